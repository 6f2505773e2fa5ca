// The _mmnpz extension: a thin layer over the C++ reader and writer. The Python package
// (python/mmnpz) builds numpy views on top of it; nothing here creates one per member.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "fs_path.hpp"
#include "npz/writer_files.hpp"
#include "mmnpz/mmnpz.hpp"
#include "str_list.hpp"

namespace py = pybind11;

void bind_data(py::module_& m);  // data_bindings.cpp

namespace {

// Member i's name without ".npy", as numpy's `files` lists it.
std::string_view stem(const mmnpz::reader& r, std::size_t i) {
  std::string_view name = r.member(i).name;
  if (name.size() >= 4 && name.substr(name.size() - 4) == ".npy") name.remove_suffix(4);
  return name;
}

// Read-only bytes that Python sees through the buffer protocol, kept alive by a shared_ptr
// (the file mapping or an inflated buffer).
struct shared_buffer {
  std::shared_ptr<const void> keepalive;
  const std::byte* data;
  std::size_t size;
};

py::object& format_error_type() {
  static py::object* type = nullptr;
  if (!type) {
    type = new py::object(py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc("mmnpz.FormatError",
                                  "A corrupt or unsupported .npz file. Attributes: path, member "
                                  "(empty when not about one) and offset (None when unknown).",
                                  PyExc_ValueError, nullptr)));
  }
  return *type;
}

// Text of an error as a str whatever its bytes: any byte that is not UTF-8 escaped (a path in
// it as "caf\xe9.npz"; the error's path attribute is mmnpz_python::path_str's). A
// UnicodeDecodeError here would replace the error being raised.
py::str text_of(const std::string& bytes, const char* errors) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), errors);
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}
py::str message_of(const mmnpz::error& e) { return text_of(e.what(), "backslashreplace"); }

// mmnpz::error -> OSError (with errno), KeyError, TypeError, ValueError or FormatError.
void raise(const mmnpz::error& e) {
  using mmnpz::errc;
  switch (e.code()) {
    case errc::io: {
      py::object err = py::reinterpret_borrow<py::object>(PyExc_OSError)(
          e.sys_errno(), std::strerror(e.sys_errno()), mmnpz_python::path_str(e.path()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
      return;
    }
    case errc::not_found:
      PyErr_SetObject(PyExc_KeyError, message_of(e).ptr());
      return;
    case errc::type_mismatch:
      PyErr_SetObject(PyExc_TypeError, message_of(e).ptr());
      return;
    case errc::invalid_argument:
      PyErr_SetObject(PyExc_ValueError, message_of(e).ptr());
      return;
    case errc::out_of_range:
      PyErr_SetObject(PyExc_IndexError, message_of(e).ptr());
      return;
    default: {
      py::object err = format_error_type()(message_of(e));
      err.attr("path") = mmnpz_python::path_str(e.path());
      err.attr("member") = text_of(e.member(), "backslashreplace");
      err.attr("offset") = e.offset() == mmnpz::error::no_offset ? py::object(py::none())
                                                                 : py::object(py::int_(e.offset()));
      err.attr("code") = static_cast<int>(e.code());
      PyErr_SetObject(format_error_type().ptr(), err.ptr());
    }
  }
}

mmnpz::open_mode mode_of(const std::string& mode) {
  if (mode == "x") return mmnpz::open_mode::create;
  if (mode == "w") return mmnpz::open_mode::truncate;
  if (mode == "a") return mmnpz::open_mode::append;
  throw py::value_error("mode must be 'x', 'w' or 'a', not '" + mode + "'");
}

// A C-contiguous buffer's bytes (any format).
py::buffer_info bytes_of(const py::buffer& b) {
  py::buffer_info info = b.request();
  if (!PyBuffer_IsContiguous(info.view(), 'A')) {
    throw py::value_error("the data must be contiguous");
  }
  return info;
}

// The numpy dtype of a .npy descr literal ("'<f4'", "[('a', '<i2')]"): the one cache of
// them, for the whole process (mmnpz._core.dtype is this function). Set up when the module is
// imported (no function-local static runs Python code: another thread could hold the GIL).
struct dtype_cache {
  py::object literal_eval = py::module_::import("ast").attr("literal_eval");
  py::object descr_to_dtype = py::module_::import("numpy.lib.format").attr("descr_to_dtype");
  py::dict dtypes;  // descr literal -> numpy dtype
};
dtype_cache* dtypes = nullptr;  // never destroyed: the interpreter may end first

py::object numpy_dtype(const py::str& descr) {
  if (PyObject* hit = PyDict_GetItemWithError(dtypes->dtypes.ptr(), descr.ptr())) {
    return py::reinterpret_borrow<py::object>(hit);
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  py::object dtype = dtypes->descr_to_dtype(dtypes->literal_eval(descr));
  dtypes->dtypes[descr] = dtype;
  return dtype;
}

// The one builder of the numpy.memmap views of stored arrays: `v`'s data read-only, based on
// `base` (the whole file's memmap, whose type the view takes), carrying `filename` as
// numpy.memmap's own views do.
py::object memmap_view(const mmnpz::array_view& v, const py::object& base,
                       const py::object& filename) {
  if (!base) throw py::value_error("the reader has no base memmap (call configure)");
  // The last descr's dtype is kept: members of one archive mostly share theirs, and making a
  // str to look it up took about 0.15 us of the view's 1 us (on the development VM).
  thread_local std::string last_descr;
  thread_local PyObject* last_dtype = nullptr;  // a strong reference, never released
  const std::string& descr = v.type().descr();
  if (!last_dtype || descr != last_descr) {
    py::object made = numpy_dtype(py::str(descr));
    Py_XDECREF(last_dtype);
    last_dtype = made.release().ptr();
    last_descr = descr;
  }
  py::object dtype = py::reinterpret_borrow<py::object>(last_dtype);
  constexpr std::size_t on_stack = 8;
  const std::size_t ndim = v.shape().size();
  Py_intptr_t small[2 * on_stack];
  std::vector<Py_intptr_t> large(ndim > on_stack ? 2 * ndim : 0);
  Py_intptr_t* dims = ndim > on_stack ? large.data() : small;
  Py_intptr_t* strides = dims + std::max(ndim, on_stack);
  std::copy(v.shape().begin(), v.shape().end(), dims);
  std::copy(v.strides().begin(), v.strides().end(), strides);
  auto& api = py::detail::npy_api::get();
  PyObject* array = api.PyArray_NewFromDescr_(
      Py_TYPE(base.ptr()), dtype.inc_ref().ptr(), static_cast<int>(ndim), dims, strides,
      const_cast<std::byte*>(v.data()), /*flags: read-only*/ 0, nullptr);
  if (!array) throw py::error_already_set();
  api.PyArray_SetBaseObject_(array, base.inc_ref().ptr());
  py::object view = py::reinterpret_steal<py::object>(array);
  // What numpy.memmap's own views carry: the file, where the array starts in it, the mode.
  static PyObject* const filename_key = PyUnicode_InternFromString("filename");
  static PyObject* const offset_key = PyUnicode_InternFromString("offset");
  static PyObject* const mode_key = PyUnicode_InternFromString("mode");
  static PyObject* const read_only = PyUnicode_InternFromString("r");
  const py::object offset =
      py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(v.file_offset()));
  if (!offset || PyObject_SetAttr(view.ptr(), filename_key, filename.ptr()) != 0 ||
      PyObject_SetAttr(view.ptr(), offset_key, offset.ptr()) != 0 ||
      PyObject_SetAttr(view.ptr(), mode_key, read_only) != 0) {
    throw py::error_already_set();
  }
  return view;
}

// The reader with the whole file's memmap that views are based on: one call per first access
// finds the member, decodes it and makes the view, without the buffer protocol.
struct py_reader {
  explicit py_reader(mmnpz::reader opened) : r(std::move(opened)) {}

  // The index a str key resolves to; none for a str no member name can be (one that UTF-8
  // cannot encode: a lone surrogate, as os.fsdecode makes of undecodable bytes).
  std::optional<std::size_t> find(const py::handle& key) const {
    if (!PyUnicode_Check(key.ptr())) throw py::type_error("a member name is a str");
    Py_ssize_t len = 0;
    const char* text = PyUnicode_AsUTF8AndSize(key.ptr(), &len);
    if (!text) {
      if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) throw py::error_already_set();
      PyErr_Clear();
      return std::nullopt;
    }
    return r.find(std::string_view(text, static_cast<std::size_t>(len)));
  }

  py::object lookup(const py::handle& key) {
    if (!PyUnicode_Check(key.ptr())) return py::none();
    const auto index = find(key);
    if (!index) return py::none();
    if (r.member(*index).method != 0 || !r.is_array(*index)) {  // not stored: NpzReader._item
      return py::make_tuple(*index, py::none());
    }
    mmnpz::array_view v;
    try {
      v = r.array(*index);
    } catch (const mmnpz::error& e) {
      if (e.code() != mmnpz::errc::object_array) throw;
      return py::make_tuple(*index, py::none());
    }
    if (header_too_long(*index, v)) return py::make_tuple(*index, py::none());
    return py::make_tuple(*index, memmap_view(v, whole(), filename));
  }

  // The whole file's numpy.memmap, made (and the file mapped) when first asked for: by the
  // first view, or NpzReader.mmap. One per reader: a thread that loses a race to make it
  // takes the winner's (the GIL is held from the check to the assignment).
  py::object whole() {
    if (base) return base;
    if (filename.is_none()) throw py::value_error("the reader has no base memmap (call configure)");
    const mmnpz::bytes_view f = r.file_bytes();
    py::object np = py::module_::import("numpy");
    py::object buffer =
        py::cast(shared_buffer{f.keepalive, f.data, static_cast<std::size_t>(f.size)});
    py::object made =
        np.attr("frombuffer")(buffer, np.attr("uint8")).attr("view")(np.attr("memmap"));
    made.attr("filename") = filename;
    made.attr("offset") = 0;
    made.attr("mode") = "r";
    if (!base) base = std::move(made);
    return base;
  }

  // An array member's .npy header length after its magic, version and length field, as numpy
  // compares it with max_header_size: in characters, a version 3.0 header being UTF-8 (its
  // bytes bound its characters from above).
  std::uint64_t header_length(std::size_t i) const {
    const mmnpz::npy_header h = r.array_header(i);
    const std::uint64_t prefix = h.major_version == 1 ? 10 : 12;
    const std::uint64_t bytes = h.data_offset - prefix;
    if (h.major_version != 3) return bytes;
    std::vector<std::byte> text(static_cast<std::size_t>(bytes));
    r.copy_bytes(i, text.data(), prefix, bytes);
    return static_cast<std::uint64_t>(std::count_if(text.begin(), text.end(), [](std::byte b) {
      return (static_cast<unsigned>(b) & 0xC0u) != 0x80u;  // not a continuation byte
    }));
  }

  // Whether the stored array `v` of member i has a header longer than max_header. The bytes
  // between the local header and the data bound it, which settles nearly every member without
  // decoding the header again.
  bool header_too_long(std::size_t i, const mmnpz::array_view& v) const {
    if (max_header >= mmnpz::max_npy_header_len) return false;
    const std::uint64_t before = v.file_offset() - r.member(i).local_header_offset;
    if (before <= 30 + 10 + max_header) return false;  // fixed local header + .npy preamble
    return header_length(i) > max_header;
  }

  mmnpz::reader r;
  py::object filename = py::none();  // what the whole file's memmap calls itself
  py::object base;                   // the whole file's numpy.memmap, once made
  std::uint64_t max_header = mmnpz::max_npy_header_len;  // lookup() hands no view beyond
};

// py_reader::lookup as a builtin function of one argument bound to the reader (the capsule
// it is bound to holds the reader's Python object): called once per first access, it skips
// pybind11's dispatch, about 0.2 us of a first access on the development VM.
constexpr const char* lookup_capsule = "mmnpz.Reader.lookup";

PyObject* bound_lookup(PyObject* capsule, PyObject* key) noexcept {
  auto* reader = static_cast<py_reader*>(PyCapsule_GetPointer(capsule, lookup_capsule));
  if (!reader) return nullptr;
  try {
    return reader->lookup(key).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const mmnpz::error& e) {
    raise(e);
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef bound_lookup_def = {"lookup", &bound_lookup, METH_O,
                                "reader.lookup(key), bound to the reader."};

py::object lookup_function(const py::object& self) {
  auto capsule = py::reinterpret_steal<py::capsule>(
      PyCapsule_New(&self.cast<py_reader&>(), lookup_capsule,
                    [](PyObject* c) { Py_XDECREF(PyCapsule_GetContext(c)); }));
  if (!capsule) throw py::error_already_set();
  if (PyCapsule_SetContext(capsule.ptr(), self.inc_ref().ptr()) != 0) {
    self.dec_ref();
    throw py::error_already_set();
  }
  PyObject* f = PyCFunction_NewEx(&bound_lookup_def, capsule.ptr(), nullptr);
  if (!f) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(f);
}

class py_stream {
 public:
  explicit py_stream(mmnpz::writer::stream s) : s_(std::move(s)) {}
  void write(const py::buffer& b) {
    const py::buffer_info info = bytes_of(b);
    const auto n = static_cast<std::size_t>(info.size * info.itemsize);
    py::gil_scoped_release nogil;
    s_.write(info.ptr, n);
  }
  std::uint64_t remaining() const { return s_.remaining(); }
  void commit() {
    py::gil_scoped_release nogil;
    s_.commit();
  }

 private:
  mmnpz::writer::stream s_;
};

// The Reader's description of member i: ('array', descr, shape, fortran_order, file_offset,
// nbytes, buffer or None for mapped data), ('bytes',) or ('object',).
py::tuple array_info(const mmnpz::reader& r, std::size_t i) {
  mmnpz::array_view v;
  const char* kind = "array";
  {
    // Inflating a deflated member takes long enough to be worth releasing the GIL; decoding a
    // stored one (well under a microsecond) is not. While released, no Python object may be
    // touched.
    std::optional<py::gil_scoped_release> nogil;
    if (r.member(i).is_deflated()) nogil.emplace();
    if (!r.is_array(i)) {
      kind = "bytes";
    } else {
      try {
        v = r.array(i);
      } catch (const mmnpz::error& e) {
        if (e.code() != mmnpz::errc::object_array) throw;
        kind = "object";
      }
    }
  }
  if (!v) return py::make_tuple(kind);
  py::tuple shape(v.ndim());
  for (std::size_t k = 0; k < v.ndim(); ++k) shape[k] = v.shape()[k];
  py::object buffer = py::none();
  if (!v.is_mapped()) {
    buffer = py::cast(shared_buffer{v.keepalive(), v.data(), static_cast<std::size_t>(v.nbytes())});
  }
  return py::make_tuple("array", v.type().descr(), shape, v.fortran_order(), v.file_offset(),
                        v.nbytes(), buffer);
}

// Writer.write and ShardWriter.write: a whole array from a buffer, without the GIL.
template <class Writer>
void write_array(Writer& w, const std::string& name, const py::buffer& data,
                 const std::string& descr, const std::vector<std::uint64_t>& shape,
                 bool fortran_order) {
  const mmnpz::dtype type = mmnpz::parse_descr(descr);
  const py::buffer_info info = bytes_of(data);
  py::gil_scoped_release nogil;
  w.write(name, info.ptr, type, shape, fortran_order);
}

py::dict member_dict(const mmnpz::member_info& mi) {
  py::dict d;
  d["name"] = py::str(mi.name.data(), mi.name.size());
  d["method"] = mi.method;
  d["flags"] = mi.flags;
  d["crc32"] = mi.crc32;
  d["compressed_size"] = mi.compressed_size;
  d["uncompressed_size"] = mi.uncompressed_size;
  d["local_header_offset"] = mi.local_header_offset;
  d["data_descriptor"] = mi.has_data_descriptor();
  return d;
}

void bind_errors(py::module_& m) {
  m.attr("FormatError") = format_error_type();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mmnpz::error& e) {
      raise(e);
    }
  });
}

void bind_reader(py::module_& m) {
  py::class_<shared_buffer>(m, "_Buffer", py::buffer_protocol(),
                            R"(Read-only bytes of a mapping or an inflated member.)")
      .def_buffer([](shared_buffer& b) {
        return py::buffer_info(const_cast<std::byte*>(b.data), 1, "B", 1,
                               {static_cast<py::ssize_t>(b.size)}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const shared_buffer& b) { return b.size; });

  dtypes = new dtype_cache();
  m.def("dtype", &numpy_dtype, py::arg("descr"),
        R"(The numpy dtype of a .npy descr literal, made once per process.)");

  py::class_<py_reader>(m, "Reader", R"(A memory-mapped .npz archive (see mmnpz::reader).)")
      .def(py::init([](const mmnpz_python::fs_path& path, bool recover) {
             std::optional<mmnpz::reader> opened;
             {
               py::gil_scoped_release nogil;  // parsing the directory
               mmnpz::reader_options o;
               o.recover = recover;
               opened.emplace(path, o);
             }
             return std::make_unique<py_reader>(std::move(*opened));
           }),
           py::arg("path"), py::arg("recover") = false,
           R"(Reads the file's central directory, without the GIL (the file is mapped when first
needed); with recover,
opens what mmnpz::recover() would make of it, in memory.)")
      .def_static(
          "from_bytes",
          [](const py::buffer& data, const mmnpz_python::fs_path& display_name) {
            const py::buffer_info info = bytes_of(data);
            const auto n = static_cast<std::size_t>(info.size * info.itemsize);
            std::optional<mmnpz::reader> opened;
            {
              py::gil_scoped_release nogil;  // copying and parsing the directory
              opened.emplace(mmnpz::reader::from_bytes(info.ptr, n, display_name));
            }
            return std::make_unique<py_reader>(std::move(*opened));
          },
          py::arg("data"), py::arg("display_name") = "<memory>",
          R"(An archive held in memory (copied once); display_name appears in errors.)")
      .def_static(
          "from_descriptor",
          [](int fd, const mmnpz_python::fs_path& display_name) {
            std::optional<mmnpz::reader> opened;
            {
              py::gil_scoped_release nogil;
              opened.emplace(mmnpz::reader::from_descriptor(fd, display_name));
            }
            return std::make_unique<py_reader>(std::move(*opened));
          },
          py::arg("fd"), py::arg("display_name"),
          R"(Opens the regular file open as fd (through a duplicate: fd is not kept); display_name
appears in errors.)")
      .def_static(
          "of_dataset_item",
          [](const mmnpz::dataset& d, std::size_t item) {
            return std::make_unique<py_reader>(d.shard(d.shard_of(item)));
          },
          py::arg("dataset"), py::arg("item"),
          R"(The archive that holds a dataset's item, as the dataset holds it open (sharing its
mapping): the file it opened, also once another was renamed over its path.)")
      .def_property_readonly(
          "path", [](const py_reader& p) { return mmnpz_python::path_str(p.r.path()); })
      .def("__len__", [](const py_reader& p) { return p.r.size(); })
      .def(
          "names",
          [](const py_reader& p) {
            return mmnpz_python::str_list(p.r.size(), [&p](std::size_t i) { return stem(p.r, i); });
          },
          R"(Names without '.npy', like numpy's files.)")
      .def(
          "find", [](const py_reader& p, const py::handle& key) { return p.find(key); },
          py::arg("key"), R"(The index a key resolves to (full name, or name + '.npy'), or None.)")
      .def(
          "member", [](const py_reader& p, std::size_t i) { return member_dict(p.r.member(i)); },
          py::arg("index"), R"(The central-directory entry at index, as a dict.)")
      .def(
          "configure", [](py_reader& p, py::object filename) { p.filename = std::move(filename); },
          py::arg("filename"),
          R"(Sets the filename of the whole file's numpy.memmap, which views are based on and take
the type of; it is made, and the file mapped, when the first view or whole() needs it.)")
      .def("whole", &py_reader::whole,
           R"(The whole file's read-only uint8 numpy.memmap (made, and the file mapped, on the
first call; the same object after).)")
      .def("lookup_function", &lookup_function,
           R"(lookup as a function of the key alone, holding the reader (a first access calls it
without pybind11's dispatch).)")
      .def("lookup", &py_reader::lookup, py::arg("key"),
           R"(None when no member answers to key; else (index, view): a read-only numpy.memmap
view for a stored array, None for other members (deflated, not .npy, pickled).)")
      .def(
          "view",
          [](py_reader& p, std::size_t i) {
            return memmap_view(p.r.array(i), p.whole(), p.filename);
          },
          py::arg("index"), R"(The read-only numpy.memmap view of a stored array.)")
      .def(
          "mapping",
          [](const py_reader& p) {
            const mmnpz::bytes_view whole = p.r.file_bytes();
            return shared_buffer{whole.keepalive, whole.data, static_cast<std::size_t>(whole.size)};
          },
          R"(The whole file's mapping as a read-only buffer.)")
      .def(
          "array", [](const py_reader& p, std::size_t i) { return array_info(p.r, i); },
          py::arg("index"),
          R"(('array', descr, shape, fortran_order, file_offset, nbytes, buffer or None for
mapped data), ('bytes',) for a member without the .npy magic, or ('object',).)")
      .def(
          "limit_header", [](py_reader& p, std::uint64_t n) { p.max_header = n; },
          py::arg("max_header_size"),
          R"(lookup() gives None instead of a view for arrays whose header is longer.)")
      .def("header_length", &py_reader::header_length, py::arg("index"),
           R"(The length of an array member's .npy header after its magic, version and length
field (what numpy compares with max_header_size).)")
      .def(
          "bytes",
          [](const py_reader& p, std::size_t i) {
            const auto n = static_cast<Py_ssize_t>(p.r.bytes(i).size);
            py::object out = py::reinterpret_steal<py::object>(
                PyBytes_FromStringAndSize(nullptr, n));
            if (!out) throw py::error_already_set();
            p.r.copy_bytes(i, reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out.ptr())));
            return out;
          },
          py::arg("index"), R"(The member's contents (inflated when deflated), copied.)")
      .def(
          "stored_bytes",
          [](const py_reader& p, std::size_t i) {
            std::vector<std::byte> b;
            {
              py::gil_scoped_release nogil;
              b = p.r.stored_bytes(i);
            }
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          py::arg("index"),
          R"(The member's data as stored, whatever its method (see reader::stored_bytes).)")
      .def(
          "copy_array",
          [](const py_reader& p, std::size_t i, const py::array& out) {
            // A numpy array, not a buffer: datetime64 and timedelta64 arrays have no buffer
            // protocol (numpy refuses to export 'M' and 'm').
            const mmnpz::array_view v = p.r.array(i);
            const auto head = static_cast<std::uint64_t>(v.data() - p.r.bytes(i).data);
            if (!out.writeable() ||
                !(out.flags() & (py::array::c_style | py::array::f_style))) {
              throw py::value_error("copy_array: out must be a writable contiguous array");
            }
            if (static_cast<std::uint64_t>(out.nbytes()) != v.nbytes()) {
              throw py::value_error("copy_array: the buffer does not hold the array's " +
                                    std::to_string(v.nbytes()) + " bytes");
            }
            auto* dst = static_cast<std::byte*>(const_cast<void*>(out.data()));
            py::gil_scoped_release nogil;
            p.r.copy_bytes(i, dst, head, v.nbytes());
          },
          py::arg("index"), py::arg("out"),
          R"(Copies a stored array's data into `out`, a writable contiguous array of its size: a
file cut since it was mapped raises FormatError, where a copy of its view would die of SIGBUS.)")
      .def(
          "verify",
          [](const py_reader& p) {
            mmnpz::verify_result result;
            {
              py::gil_scoped_release nogil;
              result = p.r.verify();
            }
            py::dict failures;
            for (const auto& e : result.failures) {
              failures[text_of(e.member(), "backslashreplace")] = message_of(e);
            }
            return failures;
          },
          R"(Checks every member's CRC-32: {member name: error message} of the bad ones.)")
      .def(
          "verify_one",
          [](const py_reader& p, std::size_t i) {
            py::gil_scoped_release nogil;
            p.r.verify(i);
          },
          py::arg("index"), R"(Checks one member; raises FormatError when it is bad.)")
      .def_property_readonly("file_size", [](const py_reader& p) { return p.r.file_size(); })
      .def_property_readonly("leading_bytes",
                             [](const py_reader& p) { return p.r.leading_bytes(); })
      .def_property_readonly("comment",
                             [](const py_reader& p) {
                               const mmnpz::reader& r = p.r;
                               return py::bytes(r.comment().data(), r.comment().size());
                             })
      .def_property_readonly("is_zip64", [](const py_reader& p) { return p.r.is_zip64(); })
      .def_property_readonly("bytes_after_archive",
                             [](const py_reader& p) { return p.r.bytes_after_archive(); })
      .def_property_readonly("was_interrupted",
                             [](const py_reader& p) { return p.r.was_interrupted(); });
}

void bind_writer(py::module_& m) {
  py::class_<py_stream>(m, "Stream", R"(A member being written in pieces.)")
      .def("write", &py_stream::write, py::arg("data"))
      .def_property_readonly("remaining", &py_stream::remaining)
      .def("commit", &py_stream::commit);

  py::class_<mmnpz::writer>(m, "Writer", R"(Writes an aligned .npz archive (see mmnpz::writer).)")
      .def(py::init([](const mmnpz_python::fs_path& path, const std::string& mode,
                       std::size_t align, bool allow_duplicates, bool durable,
                       std::optional<py::bytes> comment) {
             mmnpz::writer_options o;
             o.mode = mode_of(mode);
             o.alignment = align;
             o.allow_duplicate_names = allow_duplicates;
             o.durable = durable;
             if (comment) o.comment = std::string(*comment);
             py::gil_scoped_release nogil;
             return mmnpz::writer(path, o);
           }),
           py::arg("path"), py::arg("mode") = "x", py::arg("align") = 64,
           py::arg("allow_duplicate_names") = false, py::arg("durable") = false,
           py::arg("comment") = py::none())
      .def(
          "write",
          &write_array<mmnpz::writer>,
          py::arg("name"), py::arg("data"), py::arg("descr"), py::arg("shape"),
          py::arg("fortran_order") = false,
          R"(Writes a whole array from a contiguous buffer holding its bytes in the given order.)")
      .def(
          "write_deflated",
          [](mmnpz::writer& w, const std::string& name, const py::buffer& data,
             const std::string& descr, const std::vector<std::uint64_t>& shape, bool fortran_order,
             int level) {
            const mmnpz::dtype type = mmnpz::parse_descr(descr);
            const py::buffer_info info = bytes_of(data);
            py::gil_scoped_release nogil;
            w.write_deflated(name, info.ptr, type, shape, fortran_order, level);
          },
          py::arg("name"), py::arg("data"), py::arg("descr"), py::arg("shape"),
          py::arg("fortran_order") = false, py::arg("level") = -1,
          R"(Writes a whole array deflated at zlib level (0-9, -1 for the default).)")
      .def(
          "write_bytes",
          [](mmnpz::writer& w, const std::string& name, const py::buffer& data, bool deflate,
             int level) {
            const py::buffer_info info = bytes_of(data);
            const auto n = static_cast<std::size_t>(info.size * info.itemsize);
            py::gil_scoped_release nogil;
            if (deflate) {
              w.write_bytes_deflated(name, info.ptr, n, level);
            } else {
              w.write_bytes(name, info.ptr, n);
            }
          },
          py::arg("name"), py::arg("data"), py::arg("deflate") = false, py::arg("level") = -1,
          R"(Writes a member of exactly `name` holding the buffer's bytes (stored, or deflated).)")
      .def(
          "begin",
          [](mmnpz::writer& w, const std::string& name, const std::string& descr,
             const std::vector<std::uint64_t>& shape, bool fortran_order) {
            const mmnpz::dtype type = mmnpz::parse_descr(descr);
            // Without the GIL: begin() waits while another thread's stream is open.
            py::gil_scoped_release nogil;
            return py_stream(w.begin(name, type, shape, fortran_order));
          },
          py::arg("name"), py::arg("descr"), py::arg("shape"), py::arg("fortran_order") = false,
          py::keep_alive<0, 1>(), R"(Starts a member whose bytes arrive in pieces.)")
      .def("discard", &mmnpz::writer::discard, py::call_guard<py::gil_scoped_release>(),
           R"(Closes the writer leaving its path as it was before it (see writer::discard).)")
      .def(
          "close",
          [](mmnpz::writer& w) {
            std::optional<mmnpz::error> failed;
            {
              py::gil_scoped_release nogil;
              try {
                w.close();
              } catch (const mmnpz::error& e) {
                if (e.code() != mmnpz::errc::io) throw;
                failed = e;
              }
            }
            if (failed) {
              // The whole sentence: it says what the file holds now.
              py::object err = py::reinterpret_borrow<py::object>(PyExc_OSError)(
                  failed->sys_errno(), failed->what());
              PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
              throw py::error_already_set();
            }
          },
          R"(Writes the central directory and closes (renames over a replaced archive).)")
      .def_property_readonly("members_written", &mmnpz::writer::members_written)
      .def_property_readonly("path", &mmnpz::writer::path);
}

// The command line and recovery, whole operations on files.
void bind_tools(py::module_& m) {
  m.def(
      "main",
      [](const std::vector<std::string>& argv) {
        py::gil_scoped_release nogil;
        return mmnpz::cli::main(argv);
      },
      py::arg("argv"), R"(Runs the mmnpz command line; returns its exit status.)");

  m.def(
      "recover",
      [](const mmnpz_python::fs_path& path) {
        mmnpz::recover_result r;
        {
          py::gil_scoped_release nogil;
          r = mmnpz::recover(path);
        }
        py::dict d;
        d["members_recovered"] = r.members_recovered;
        d["bytes_kept"] = r.bytes_kept;
        d["bytes_cut"] = r.bytes_cut;
        d["names"] = r.names;
        d["directory_was_intact"] = r.directory_was_intact;
        return d;
      },
      py::arg("path"),
      R"(Rebuilds the central directory of an archive whose writer died before close().)");
  m.def(
      "looks_like_zip",
      [](const py::bytes& head) {
        const std::string_view b = head;
        return mmnpz::looks_like_zip(b.data(), b.size());
      },
      py::arg("head"), R"(True when the bytes start as a ZIP archive does.)");
  m.def(
      "update_member_crcs",
      [](py::buffer archive, const std::vector<std::size_t>& indices,
         const mmnpz_python::fs_path& name) {
        py::buffer_info b = archive.request(/*writable=*/true);
        if (b.ndim != 1 || b.itemsize != 1) {
          throw py::value_error("expected a writable byte buffer");
        }
        py::gil_scoped_release nogil;
        return mmnpz::update_member_crcs(static_cast<std::byte*>(b.ptr),
                                         static_cast<std::uint64_t>(b.size), indices, name);
      },
      py::arg("archive"), py::arg("indices"), py::arg("name"),
      R"(Writes stored members' new CRC-32s into their local headers and directory entries.)");
  m.def(
      "lock_for_writing",
      [](int fd, const mmnpz_python::fs_path& path) {
        mmnpz::detail::lock_for_writing(fd, path);
        if (!mmnpz::detail::names_file(path, fd)) {
          throw mmnpz::errors::invalid_argument(
              path.bytes, "the archive was replaced while it was being opened; open it again");
        }
      },
      py::arg("fd"), py::arg("path"),
      R"(Takes the writers' lock on the open file fd (held until its open file description is
closed): writers and recover of it are then refused, and so is this when one holds it.)");
  m.def(
      "validate_shard_writer_options",
      [](const mmnpz_python::fs_path& path, std::optional<std::uint64_t> max_bytes,
         std::optional<std::uint64_t> max_items, std::size_t align) {
        mmnpz::validate(mmnpz::shard_writer_options{max_bytes, max_items, align, false}, path);
      },
      py::arg("path"), py::arg("max_bytes"), py::arg("max_items"), py::arg("align"),
      R"(Refuses (ValueError) what ShardWriter(path, ...) would refuse, touching no file.)");
  // mmnpz::shard_writer (python/mmnpz/shards.py wraps it as mmnpz.ShardWriter).
  py::class_<mmnpz::shard_writer>(m, "ShardWriter", R"(Writes sharded aligned .npz archives.)")
      .def(py::init([](const mmnpz_python::fs_path& path,
                       std::optional<std::uint64_t> max_bytes,
                       std::optional<std::uint64_t> max_items, std::size_t align,
                       bool allow_duplicates) {
             mmnpz::shard_writer_options o{max_bytes, max_items, align, allow_duplicates};
             py::gil_scoped_release nogil;
             return mmnpz::shard_writer(path, o);
           }),
           py::arg("path"), py::arg("max_bytes") = py::none(), py::arg("max_items") = py::none(),
           py::arg("align") = 64, py::arg("allow_duplicate_names") = false)
      .def(
          "write",
          &write_array<mmnpz::shard_writer>,
          py::arg("name"), py::arg("data"), py::arg("descr"), py::arg("shape"),
          py::arg("fortran_order") = false)
      .def(
          "write_bytes",
          [](mmnpz::shard_writer& w, const std::string& name, const py::buffer& data) {
            const py::buffer_info info = bytes_of(data);
            py::gil_scoped_release nogil;
            w.write_bytes(name, info.ptr, static_cast<std::size_t>(info.size * info.itemsize));
          },
          py::arg("name"), py::arg("data"))
      .def(
          "bound",
          [](const mmnpz::shard_writer& w, const std::string& name, const std::string& descr,
             const std::vector<std::uint64_t>& shape, bool fortran_order) {
            return w.bound(name, mmnpz::parse_descr(descr), shape, fortran_order);
          },
          py::arg("name"), py::arg("descr"), py::arg("shape"), py::arg("fortran_order") = false)
      .def("bound_bytes", &mmnpz::shard_writer::bound_bytes, py::arg("name"), py::arg("n"))
      .def("check_names", &mmnpz::shard_writer::check_names, py::arg("members"))
      .def("keep_together", &mmnpz::shard_writer::keep_together, py::arg("items"),
           py::arg("bytes"))
      .def("close", &mmnpz::shard_writer::close, py::call_guard<py::gil_scoped_release>())
      .def("discard", &mmnpz::shard_writer::discard, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("closed", &mmnpz::shard_writer::closed)
      .def_property_readonly(
          "paths", [](const mmnpz::shard_writer& w) { return mmnpz_python::path_list(w.paths()); })
      .def_property_readonly(
          "spec", [](const mmnpz::shard_writer& w) { return mmnpz_python::path_str(w.spec()); })
      .def_property_readonly("shards", &mmnpz::shard_writer::shards)
      .def_property_readonly("items_written", &mmnpz::shard_writer::items_written)
      .def_property_readonly(
          "path", [](const mmnpz::shard_writer& w) { return mmnpz_python::path_str(w.path()); });
}

}  // namespace

PYBIND11_MODULE(_mmnpz, m) {
  m.doc() = R"(Memory-mapped .npz archives: the compiled core of the mmnpz package.)";
  m.attr("__version__") = mmnpz::version_string;
  bind_errors(m);
  bind_reader(m);
  bind_writer(m);
  bind_tools(m);
  bind_data(m);
}
