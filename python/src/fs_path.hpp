#pragma once

// A file system path argument as the bytes the OS names the file by. Python holds a path whose
// name is not UTF-8 (a Latin-1 "caf\xe9.npz") as a str with surrogates (os.fsdecode), which
// pybind11's std::string caster refuses as no str at all; this caster encodes it back as
// os.fsencode does, so every file numpy can open, mmnpz can too.
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace mmnpz_python {

/// A path as the OS's bytes (os.fsencode of the str the caller gave).
struct fs_path {
  std::string bytes;
  operator const std::string&() const { return bytes; }  // NOLINT: a path is its bytes
};

/// A path's bytes as Python's str of it (os.fsdecode): bytes that are not UTF-8 become
/// surrogates, so that the str names the same file again.
inline pybind11::str path_str(const std::string& bytes) {
  PyObject* s =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "surrogateescape");
  if (!s) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::str>(s);
}

/// [path_str(p) for p in paths].
inline pybind11::list path_list(const std::vector<std::string>& paths) {
  pybind11::list out;
  for (const std::string& p : paths) out.append(path_str(p));
  return out;
}

}  // namespace mmnpz_python

namespace pybind11::detail {

/// str (encoded as os.fsencode does) or bytes; os.PathLike is turned into those by the
/// Python wrappers (mmnpz._core.path), which also give the TypeError for anything else.
template <>
struct type_caster<mmnpz_python::fs_path> {
  PYBIND11_TYPE_CASTER(mmnpz_python::fs_path, const_name("str"));

  bool load(handle src, bool /*convert*/) {
    if (PyBytes_Check(src.ptr())) {
      value.bytes.assign(PyBytes_AS_STRING(src.ptr()),
                         static_cast<std::size_t>(PyBytes_GET_SIZE(src.ptr())));
      return true;
    }
    if (!PyUnicode_Check(src.ptr())) return false;
    PyObject* encoded = PyUnicode_EncodeFSDefault(src.ptr());
    if (!encoded) {
      PyErr_Clear();
      return false;
    }
    value.bytes.assign(PyBytes_AS_STRING(encoded),
                       static_cast<std::size_t>(PyBytes_GET_SIZE(encoded)));
    Py_DECREF(encoded);
    return true;
  }

  static handle cast(const mmnpz_python::fs_path& p, return_value_policy, handle) {
    return mmnpz_python::path_str(p.bytes).release();
  }
};

}  // namespace pybind11::detail
