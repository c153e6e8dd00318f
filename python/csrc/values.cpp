// Host values from Python (values.hpp), read through exact.hpp's rule.
#include "values.hpp"

#include "exact.hpp"

#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace ferry_vllm {
namespace {

std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

std::string repr(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  if (r == nullptr) {
    PyErr_Clear();
    return "<" + type_name(o) + ">";
  }
  const py::str s = py::reinterpret_steal<py::str>(r);
  std::string text = s;
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string prefix(const char* api) { return std::string("ferry: ") + api + ": "; }

/// Whether `o` is a torch.Tensor (THPVariable_Check). THPVariable_Check is isinstance(), which
/// for any object not of the exact type torch.Tensor calls the metaclass's __instancecheck__
/// (about 0.1 us): skipped for lists, tuples and NumPy arrays of the exact type, which it would
/// answer false (their types are no subclass of torch.Tensor and their __class__ is their type).
bool is_tensor(PyObject* o) {
  const PyTypeObject* t = Py_TYPE(o);
  if (t == &PyList_Type || t == &PyTuple_Type) return false;
  if ((t->tp_flags & Py_TPFLAGS_HEAPTYPE) == 0 && std::strcmp(t->tp_name, "numpy.ndarray") == 0) return false;
  return THPVariable_Check(o);
}

/// The encoding of a torch dtype exact.hpp decodes directly (nothing: see readable()).
std::optional<exact::format> format_of(at::ScalarType st) {
  using exact::kind;
  switch (st) {
    case at::kBool: return exact::format{kind::boolean, 1, false};
    case at::kByte: return exact::format{kind::unsigned_int, 1, false};
    case at::kChar: return exact::format{kind::signed_int, 1, false};
    case at::kShort: return exact::format{kind::signed_int, 2, false};
    case at::kInt: return exact::format{kind::signed_int, 4, false};
    case at::kLong: return exact::format{kind::signed_int, 8, false};
    case at::kUInt16: return exact::format{kind::unsigned_int, 2, false};
    case at::kUInt32: return exact::format{kind::unsigned_int, 4, false};
    case at::kUInt64: return exact::format{kind::unsigned_int, 8, false};
    case at::kHalf: return exact::format{kind::floating, 2, false};
    case at::kBFloat16: return exact::format{kind::bfloat16, 2, false};
    case at::kFloat: return exact::format{kind::floating, 4, false};
    case at::kDouble: return exact::format{kind::floating, 8, false};
    default: return std::nullopt;
  }
}

/// A CPU tensor whose elements exact.hpp reads: itself, or, for a float type of at most 32 bits
/// that it does not decode (the float8 types), the tensor widened to float32 (exact). TypeError
/// for complex, quantized and bit types; ValueError for a tensor that is not on the CPU.
at::Tensor readable(at::Tensor t, const char* api, const std::string& what) {
  if (!t.is_cpu())
    throw std::invalid_argument(prefix(api) + what + " must be on the CPU, got a tensor on " + t.device().str());
  if (t.layout() != at::kStrided)
    throw py::type_error(prefix(api) + what + " must be a dense (strided) tensor, got layout " + c10::toString(t.layout()));
  if (!format_of(t.scalar_type()) && at::isFloatingType(t.scalar_type()) && t.element_size() <= 4) t = t.to(at::kFloat);
  if (!format_of(t.scalar_type()))
    throw py::type_error(prefix(api) + what + " of dtype " + c10::toString(t.scalar_type()) +
                         " does not hold numbers ferry_vllm converts (bools, integers and floats of up to 64 bits)");
  return t.resolve_neg();
}

/// Whether elements encoded as `f` are elements of T as they lie.
template <class T>
bool is_element(exact::format f) {
  if (f.swapped || f.size != sizeof(T)) return false;
  return f.k == (std::is_floating_point_v<T> ? exact::kind::floating : exact::kind::signed_int);
}

/// `v` as T, or ValueError naming it and its place.
template <class T>
T checked(const exact::value& v, const char* api, std::size_t position, bool positioned) {
  T out{};
  if (const exact::refusal why = exact::convert<T>(v, out); why != exact::refusal::none)
    throw std::invalid_argument(exact::message<T>(api, exact::text(v),
                                                  positioned ? exact::position_text(position) : std::string(), why));
  return out;
}

/// A Python integer beyond 64 bits: refused, named.
template <class T>
[[noreturn]] void beyond_64_bits(PyObject* item, const char* api, const std::string& where) {
  if constexpr (std::is_integral_v<T>)
    throw std::invalid_argument(exact::message<T>(api, repr(item), where, exact::refusal::out_of_range));
  throw std::invalid_argument(prefix(api) + "value " + repr(item) + (where.empty() ? "" : " at " + where) +
                              " is an integer beyond 64 bits, which ferry_vllm does not convert");
}

/// A Python int (or the result of __index__) as a value, or nothing when it is beyond 64 bits.
std::optional<exact::value> integer(PyObject* o) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow == 0) return exact::value::of_signed(v);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return exact::value::of_unsigned(u);
    PyErr_Clear();
  }
  return std::nullopt;
}

/// One number as a value: a Python bool, int or float, anything with __index__ (NumPy integers),
/// a one-element CPU tensor, a one-element buffer (NumPy scalars: float16, float32, bool).
/// TypeError for anything else; nothing for an integer beyond 64 bits (the caller names it).
std::optional<exact::value> number(PyObject* item, const char* api, const std::string& where) {
  if (PyBool_Check(item)) return exact::value::of_bool(item == Py_True);
  if (PyLong_Check(item)) return integer(item);
  if (PyFloat_Check(item)) return exact::value::of_double(PyFloat_AS_DOUBLE(item));
  const std::string at = where.empty() ? "" : " at " + where;
  if (THPVariable_Check(item)) {
    const at::Tensor t = readable(THPVariable_Unpack(item), api, "value" + at);
    if (t.numel() != 1)
      throw py::type_error(prefix(api) + "value" + at + " is a tensor of " + std::to_string(t.numel()) +
                           " elements, not a number");
    return exact::decode(static_cast<const std::byte*>(t.data_ptr()), *format_of(t.scalar_type()));
  }
  if (PyIndex_Check(item)) {
    PyObject* i = PyNumber_Index(item);
    if (i == nullptr) throw py::error_already_set();
    const py::object owner = py::reinterpret_steal<py::object>(i);
    return integer(i);
  }
  if (PyObject_CheckBuffer(item)) {
    Py_buffer view;
    if (PyObject_GetBuffer(item, &view, PyBUF_RECORDS_RO) == 0) {
      const auto f = exact::parse_format(view.format ? view.format : "B", static_cast<std::size_t>(view.itemsize));
      const bool one = view.len == view.itemsize;
      std::optional<exact::value> v;
      if (f && one) v = exact::decode(static_cast<const std::byte*>(view.buf), *f);
      PyBuffer_Release(&view);
      if (v) return v;
    } else {
      PyErr_Clear();
    }
  }
  throw py::type_error(prefix(api) + "value " + repr(item) + at + " is a " + type_name(item) + ", not a number");
}

template <class T>
T element(PyObject* item, const char* api, std::size_t position, bool positioned) {
  if (PyLong_CheckExact(item)) {  // the common case, a few instructions
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow == 0) {
      if constexpr (std::is_integral_v<T>) {
        if (v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max()) return static_cast<T>(v);
      } else {
        if (v >= -(1ll << 24) && v <= (1ll << 24)) return static_cast<T>(v);
      }
    }
  }
  const std::string where = positioned ? exact::position_text(position) : std::string();
  const auto v = number(item, api, where);
  if (!v) beyond_64_bits<T>(item, api, where);
  return checked<T>(*v, api, position, positioned);
}

}  // namespace

template <class T>
T* host_values<T>::storage(std::size_t n) {
  if (n <= small) return small_;
  large_.resize(n);
  return large_.data();
}

template <class T>
host_values<T>::~host_values() {
  if (has_view_) PyBuffer_Release(&view_);
}

template <class T>
host_values<T>::host_values(py::handle source, const char* api) {
  PyObject* obj = source.ptr();
  if (is_tensor(obj)) {
    const at::Tensor t = readable(THPVariable_Unpack(obj), api, "the values");
    if (t.dim() == 0)
      throw py::type_error(prefix(api) + "the values must be a sequence, got a 0-d tensor (" + repr(obj) + ")");
    const exact::format f = *format_of(t.scalar_type());
    if (is_element<T>(f) && t.is_contiguous()) {
      tensor_ = t;
      span_ = {static_cast<const T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
      return;
    }
    if (static_cast<std::size_t>(t.dim()) > exact::max_dims)
      throw std::invalid_argument(prefix(api) + "the values have " + std::to_string(t.dim()) + " dimensions, more than " +
                                  std::to_string(exact::max_dims));
    std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
    for (auto& s : strides) s *= static_cast<std::int64_t>(t.element_size());
    const std::span<const std::int64_t> shape(t.sizes().data(), t.sizes().size());
    T* out = storage(static_cast<std::size_t>(t.numel()));
    if (const auto fail = exact::convert_all<T>(static_cast<const std::byte*>(t.data_ptr()), f, shape, strides, out))
      throw std::invalid_argument(exact::message<T>(api, exact::text(fail->v), exact::position_text(fail->position, shape),
                                                    fail->why));
    span_ = {out, static_cast<std::size_t>(t.numel())};
    return;
  }
  if (PyObject_CheckBuffer(obj) && !PyUnicode_Check(obj)) {
    Py_buffer* const view = &view_;
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) == 0) {
      struct release {
        Py_buffer* v;
        bool keep = false;
        ~release() {
          if (!keep) PyBuffer_Release(v);
        }
      } guard{view};
      const char* fmt = view->format ? view->format : "B";
      const auto f = exact::parse_format(fmt, static_cast<std::size_t>(view->itemsize));
      if (view->ndim == 0)
        throw py::type_error(prefix(api) + "the values must be a sequence, got a 0-d " + type_name(obj) + " (" + repr(obj) +
                             ")");
      if (!f && std::string_view(fmt).ends_with("O")) {
        // An object array: its elements are Python objects, read one by one (flattened first).
        py::object flat = py::reinterpret_borrow<py::object>(obj);
        if (view->ndim > 1 && py::hasattr(flat, "ravel")) flat = flat.attr("ravel")();
        convert_sequence(flat, api);
        return;
      }
      if (!f)
        throw py::type_error(prefix(api) + "the values' buffer format '" + fmt + "' (items of " +
                             std::to_string(view->itemsize) +
                             " bytes) does not hold numbers ferry_vllm converts (bools, integers and floats of up to 64 bits)");
      if (static_cast<std::size_t>(view->ndim) > exact::max_dims)
        throw std::invalid_argument(prefix(api) + "the values have " + std::to_string(view->ndim) +
                                    " dimensions, more than " + std::to_string(exact::max_dims));
      const auto n = static_cast<std::size_t>(view->len / view->itemsize);
      if (is_element<T>(*f) && PyBuffer_IsContiguous(view, 'C') &&
          reinterpret_cast<std::uintptr_t>(view->buf) % alignof(T) == 0) {
        span_ = {static_cast<const T*>(view->buf), n};
        guard.keep = true;
        has_view_ = true;
        return;
      }
      const std::span<const std::int64_t> shape(reinterpret_cast<const std::int64_t*>(view->shape),
                                                static_cast<std::size_t>(view->ndim));
      std::vector<std::int64_t> strides(shape.size());
      for (std::size_t d = shape.size(); d-- > 0;)  // C order when the exporter gives none
        strides[d] = view->strides ? view->strides[d]
                                   : (d + 1 == shape.size() ? view->itemsize : strides[d + 1] * shape[d + 1]);
      static_assert(sizeof(Py_ssize_t) == sizeof(std::int64_t));
      T* out = storage(n);
      if (const auto fail = exact::convert_all<T>(static_cast<const std::byte*>(view->buf), *f, shape, strides, out))
        throw std::invalid_argument(exact::message<T>(api, exact::text(fail->v),
                                                      exact::position_text(fail->position, shape), fail->why));
      span_ = {out, n};
      return;
    }
    PyErr_Clear();  // not exportable as numbers (e.g. NumPy datetimes): read as a sequence below
  }
  convert_sequence(source, api);
}

template <class T>
void host_values<T>::convert_sequence(py::handle source, const char* api) {
  PyObject* obj = source.ptr();
  if (PyUnicode_Check(obj))
    throw py::type_error(prefix(api) + "the values must be numbers, got the str " + repr(obj));
  if (!PySequence_Check(obj) && Py_TYPE(obj)->tp_iter == nullptr)
    throw py::type_error(prefix(api) + "the values must be a sequence or an iterable of numbers, got " + repr(obj) +
                         " (" + type_name(obj) + ")");
  PyObject* seq = PySequence_Fast(obj, "ferry: the values must be a sequence or an iterable of numbers");
  if (seq == nullptr) throw py::error_already_set();
  const py::object owner = py::reinterpret_steal<py::object>(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  const auto n = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(seq));
  T* out = storage(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = element<T>(items[i], api, i, true);
  span_ = {out, n};
}

template <class T>
T host_scalar(py::handle value, const char* api) {
  return element<T>(value.ptr(), api, 0, false);
}

std::int64_t int_argument(py::handle value, const char* api, const char* what) {
  PyObject* o = value.ptr();
  if (PyLong_CheckExact(o)) {  // a Python int, read as it is (PyNumber_Index would return it)
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) return v;
  }
  if (!PyLong_Check(o) && (!PyIndex_Check(o) || PyFloat_Check(o)))
    throw py::type_error(prefix(api) + what + " must be an int, got " + repr(o) + " (" + type_name(o) + ")");
  PyObject* i = PyNumber_Index(o);
  if (i == nullptr) {
    PyErr_Clear();
    throw py::type_error(prefix(api) + what + " must be an int, got " + repr(o) + " (" + type_name(o) + ")");
  }
  const py::object owner = py::reinterpret_steal<py::object>(i);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  if (overflow != 0) throw std::out_of_range(prefix(api) + what + " " + repr(i) + " is beyond int64");
  return v;
}

template class host_values<std::int32_t>;
template class host_values<std::int64_t>;
template class host_values<float>;
template std::int32_t host_scalar<std::int32_t>(py::handle, const char*);
template std::int64_t host_scalar<std::int64_t>(py::handle, const char*);
template float host_scalar<float>(py::handle, const char*);

}  // namespace ferry_vllm
