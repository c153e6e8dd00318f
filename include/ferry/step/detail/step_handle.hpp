// ferry/step/detail/step_handle.hpp: what every step_batch handle (upload, publish, writes) is: a
// share of the batch's state and its entry there, and the check that makes each of its calls
// throw once the handle is empty or its batch is gone.
#pragma once

#include <ferry/config.hpp>
#include <ferry/error.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace ferry::detail {

/// The base of step_batch's handles: a share of the batch's state `Core` (which moves with the
/// batch, and outlives it while a handle holds it, so that a stale handle is caught, never a read
/// of freed memory) and the handle's entry in the state's list of its kind. Only `Batch` (the
/// step_batch) makes handles (the handles inherit these constructors) and reads their entry.
template <class Batch, class Core>
class step_handle {
 protected:
  step_handle() = default;
  /// Entry `i` of the plan in `c`.
  step_handle(std::shared_ptr<Core> c, std::size_t i) : core_(std::move(c)), i_(i) {}

  /// The batch's state; ferry::error for an empty (default-constructed) `kind` handle, or one
  /// whose batch was destroyed or assigned over.
  Core& state(const char* kind) const {
    if (!core_ || core_->dead()) [[unlikely]]
      throw_unusable(kind);
    return *core_;
  }
  /// As state(), but null for an empty handle (whose counts read 0).
  const Core* state_or_null(const char* kind) const { return core_ ? &state(kind) : nullptr; }

  std::shared_ptr<Core> core_;  ///< The batch's state (null: an empty handle).
  std::size_t i_ = 0;           ///< The entry in the state's list of this kind of handle.

 private:
  friend Batch;

  /// Throws the ferry::error of an unusable `kind` handle: empty, or its batch assigned over or
  /// destroyed.
  [[noreturn]] FERRY_COLD void throw_unusable(const char* kind) const {
    if (!core_) throw error(std::string("ferry: use of an empty step_batch::") + kind + " handle");
    throw error(std::string("ferry: use of a step_batch::") + kind +
                " handle whose batch was assigned over or destroyed (a move keeps handles valid; "
                "an assignment over a batch, or its destruction, ends its handles)");
  }
};

}  // namespace ferry::detail
