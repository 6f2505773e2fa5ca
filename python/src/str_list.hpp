#pragma once

// A Python list of n str made directly from UTF-8 names, for the calls that hand out every
// member's or item's name at once (numpy's `files`, Dataset.names): an ASCII name is copied
// into a compact str, without a std::string or pybind11's caster per name.
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstring>
#include <string_view>

namespace mmnpz_python {

/// [name_of(0), ..., name_of(n - 1)] as str; name_of returns a std::string_view of UTF-8.
/// Throws (error_already_set) on bytes that are not UTF-8.
///
/// The list is not tracked by Python's cycle collector. Tracked, a list of a million names
/// was traversed by every collection that reached its generation: 14 ms for the first
/// young collection after it was made (a first access of an archive's members met it as a
/// pause every few hundred accesses), then 25 ms more per full collection. A list of str
/// cannot be part of a reference cycle; one the caller makes by appending containers to it
/// would only be left uncollected (a leak, never a dangling reference).
template <class NameOf>
pybind11::list str_list(std::size_t n, NameOf&& name_of) {
  pybind11::list out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string_view name = name_of(i);
    unsigned char high = 0;
    for (char c : name) high |= static_cast<unsigned char>(c);
    PyObject* s = nullptr;
    if (high < 0x80) {
      s = PyUnicode_New(static_cast<Py_ssize_t>(name.size()), 127);
      if (s) std::memcpy(PyUnicode_1BYTE_DATA(s), name.data(), name.size());
    } else {
      s = PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "strict");
    }
    if (!s) throw pybind11::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), s);
  }
  PyObject_GC_UnTrack(out.ptr());
  return out;
}

}  // namespace mmnpz_python
