// The fuzz targets' shared decoder: reads sizes, indices, choices and values from the fuzzer's
// bytes (an exhausted input reads as zeros, so every input decodes to a finite run), the check
// that reports a finding, and the GrowthPolicy whose answers come from the input.
#pragma once

#include <ferry/error.hpp>
#include <ferry/policies/growth.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <typeinfo>

namespace ferry_fuzz {

/// Exact arithmetic for the references (sizes of up to 2^64 - 1, multiplied).
__extension__ using u128 = unsigned __int128;

/// The fuzzer's bytes, consumed front to back.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) noexcept : p_(data), n_(size) {}

  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
  [[nodiscard]] std::size_t left() const noexcept { return n_; }

  std::uint8_t byte() noexcept {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  /// `bytes` little-endian bytes as an unsigned value.
  std::uint64_t raw(unsigned bytes = 8) noexcept {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  bool flag() noexcept { return (byte() & 1) != 0; }
  /// A value in [0, n) (0 when n == 0), from as few bytes as n needs.
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n <= 1) return 0;
    const unsigned bytes = (static_cast<unsigned>(std::bit_width(n - 1)) + 7) / 8;
    return raw(bytes) % n;
  }
  /// A value in [lo, hi].
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept {
    return hi - lo == std::numeric_limits<std::uint64_t>::max() ? raw() : lo + below(hi - lo + 1);
  }
  /// A size or index: usually below `small` (one or two bytes), sometimes an edge of the size
  /// arithmetic (powers of two and their neighbours up to 2^64 - 1), sometimes any 64-bit value.
  std::uint64_t size(std::uint64_t small) noexcept {
    const std::uint8_t how = byte();
    if (how < 200) return below(small);
    if (how < 250) return edge();
    return raw();
  }
  /// An edge of 64-bit size arithmetic: 2^k - 1, 2^k or 2^k + 1 for k in [0, 64), or 2^64 - 1.
  std::uint64_t edge() noexcept {
    const std::uint8_t b = byte();
    const unsigned k = b % 64;
    const std::uint64_t p = std::uint64_t{1} << k;
    switch ((b / 64) % 4) {
      case 0: return p - 1;
      case 1: return p;
      case 2: return p + 1;
      default: return std::numeric_limits<std::uint64_t>::max() - (k % 4);
    }
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

/// FERRY_FUZZ_TRACE=1 in the environment: each case prints what it is about to do (to replay a
/// crash input and read what it decoded to).
inline bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("FERRY_FUZZ_TRACE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}
inline void trace(const std::string& what) {
  if (tracing()) std::fprintf(stderr, "ferry fuzz: %s\n", what.c_str());
}

/// A finding: prints what went wrong and aborts (libFuzzer saves the input as a crash).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "ferry fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// `cond`, else a finding naming `what`.
inline void expect(bool cond, const std::string& what) {
  if (!cond) finding(what);
}

/// The message of the exception the last attempt() on this thread reported ("" after a call that
/// threw nothing): what a model reads to tell which documented limit refused a call.
inline std::string& last_message() {
  thread_local std::string m;
  return m;
}

/// An exception's message must start with "ferry: " (SPEC §9).
inline void expect_message(const std::exception& e, std::string_view where) {
  last_message() = e.what();
  expect(std::string_view(e.what()).starts_with("ferry: "),
         std::string(where) + ": exception message without the \"ferry: \" prefix: " + e.what());
}

/// Runs `f`; the exceptions a documented rejection may throw are reported as the returned value
/// (nothing thrown, std::out_of_range, std::invalid_argument, ferry::capacity_error, another
/// ferry::error, ferry::out_of_memory). Anything else thrown is a finding.
enum class outcome { ok, out_of_range, invalid_argument, capacity, ferry_error, out_of_memory };
inline const char* name(outcome o) {
  switch (o) {
    case outcome::ok: return "ok";
    case outcome::out_of_range: return "std::out_of_range";
    case outcome::invalid_argument: return "std::invalid_argument";
    case outcome::capacity: return "ferry::capacity_error";
    case outcome::out_of_memory: return "ferry::out_of_memory";
    default: return "ferry::error";
  }
}
/// `o` and the message of the exception the last attempt() reported (for a finding).
inline std::string described(outcome o) {
  return std::string(name(o)) + (last_message().empty() ? std::string() : " (" + last_message() + ")");
}
template <class F>
outcome attempt(std::string_view where, F&& f) {
  if (tracing()) trace(std::string(where));
  last_message().clear();
  try {
    f();
    return outcome::ok;
  } catch (const std::out_of_range& e) {
    expect_message(e, where);
    return outcome::out_of_range;
  } catch (const std::invalid_argument& e) {
    expect_message(e, where);
    return outcome::invalid_argument;
  } catch (const ferry::capacity_error& e) {
    expect_message(e, where);
    return outcome::capacity;
  } catch (const ferry::error& e) {
    expect_message(e, where);
    return outcome::ferry_error;
  } catch (const ferry::out_of_memory& e) {
    expect_message(e, where);
    return outcome::out_of_memory;
  } catch (const std::exception& e) {
    finding(std::string(where) + ": undocumented exception " + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding(std::string(where) + ": undocumented exception of unknown type");
  }
}

/// A refusal for want of room: ferry::capacity_error, or, where `no_memory_ok`,
/// ferry::out_of_memory (an allocation of a size no machine has: a growth policy's huge answer).
inline bool refused(outcome o, bool no_memory_ok) {
  return o == outcome::capacity || (no_memory_ok && o == outcome::out_of_memory);
}

/// Where input_growth's answers come from: set by a harness around the calls it makes (thread
/// local, so a worker thread that asked would get plain answers).
inline thread_local input* growth_answers = nullptr;

/// A user GrowthPolicy answering from the fuzz input: the capacity needed, a little more, the
/// next power of two, a huge legal value (2^48 to 2^64 - 1: more than any machine holds, so no
/// component can work with it), or ferry::capacity_error. Every answer is legal (>= needed), so a
/// component must either work or refuse with ferry::capacity_error (or ferry::out_of_memory from
/// an allocation of the huge size), losing nothing.
struct input_growth {
  using ferry_policy_family = ferry::families::growth;
  static constexpr bool stable_addresses = false;
  static std::size_t capacity_for(std::size_t needed, std::size_t current) {
    input* in = growth_answers;
    if (in == nullptr) return needed;
    const std::uint8_t how = in->byte();
    if (how % 8 == 6) {
      if (tracing()) trace("capacity_for(" + std::to_string(needed) + ", " + std::to_string(current) + "): refused");
      throw ferry::capacity_error("ferry: input_growth refuses capacity_for(" + std::to_string(needed) + ", " +
                                  std::to_string(current) + ")");
    }
    const std::size_t answer = answer_for(*in, how, needed, current);
    if (tracing()) trace("capacity_for(" + std::to_string(needed) + ", " + std::to_string(current) + ") = " + std::to_string(answer));
    return answer;
  }

 private:
  static std::size_t answer_for(input& in, std::uint8_t how, std::size_t needed, std::size_t current) {
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    switch (how % 8) {
      case 0:
      case 1: return needed;
      case 2: return needed + std::min<std::size_t>(max - needed, in.below(4096));
      case 3: return needed <= 1 ? 1 : (needed > (max >> 1) + 1 ? max : std::bit_ceil(needed));
      case 4: {  // huge: 2^k for k in [48, 64), or 2^64 - 1
        const unsigned k = 48 + static_cast<unsigned>(in.below(17));
        const std::size_t huge = k == 64 ? max : std::size_t{1} << k;
        return std::max(needed, huge);
      }
      case 5: return max - std::min<std::size_t>(max - needed, in.below(256));
      default: {
        const std::size_t more = in.below(1u << 16);
        return std::max(needed, current > max - more ? max : current + more);
      }
    }
  }
};

/// Sets growth_answers for a scope.
class growth_scope {
 public:
  explicit growth_scope(input& in) noexcept : old_(growth_answers) { growth_answers = &in; }
  ~growth_scope() { growth_answers = old_; }
  growth_scope(const growth_scope&) = delete;
  growth_scope& operator=(const growth_scope&) = delete;

 private:
  input* old_;
};

}  // namespace ferry_fuzz
