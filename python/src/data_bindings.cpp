
// Datasets, batched gather, samplers and loader options for the _mmnpz extension. Options
// cross as typed objects (DatasetOptions, ExcerptOptions, SamplerOptions, LoaderOptions) built
// from keyword arguments and checked by the C++ validate(); enums cross as their text forms.
// Every call that touches array data or loops over items runs without the GIL; nothing
// creates a Python object per item.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "blake2b.hpp"
#include "data/dataset_state.hpp"
#include "detail/utf8.hpp"
#include "fs_path.hpp"
#include "mmnpz/mmnpz.hpp"
#include "str_list.hpp"

namespace py = pybind11;

namespace {

using i64_array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

// A layout as Python sees it: (descr literal, trailing shape tuple).
py::tuple layout_tuple(const mmnpz::item_layout& l) {
  py::tuple trailing(l.trailing.size());
  for (std::size_t d = 0; d < l.trailing.size(); ++d) trailing[d] = l.trailing[d];
  return py::make_tuple(l.type.descr(), trailing);
}

// A writable C-contiguous array's bytes, checked.
std::byte* writable_bytes(py::array& a, const char* what) {
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) + " must be C-contiguous");
  }
  if (!a.writeable()) throw py::value_error(std::string(what) + " must be writable");
  return static_cast<std::byte*>(a.mutable_data());
}

std::vector<std::byte> to_bytes(const py::bytes& b) {
  const std::string s = b;
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// ---- Options: one conversion per C++ field type, each message naming the option --------

template <class V, class = void>
struct option;

template <>
struct option<bool> {
  static bool from(const char*, const py::handle& v) {  // truth, as bool() takes it
    const int truth = PyObject_IsTrue(v.ptr());
    if (truth < 0) throw py::error_already_set();
    return truth != 0;
  }
  static py::object to(bool v) { return py::bool_(v); }
};

template <class V>
struct option<V, std::enable_if_t<std::is_unsigned_v<V> && !std::is_same_v<V, bool>>> {
  static V from(const char* name, const py::handle& v) {
    const auto i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();  // TypeError: not an integer
    if (i < py::int_(0)) {
      throw py::value_error(std::string(name) + " must not be negative, not " +
                            std::string(py::str(v)));
    }
    const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred()) throw py::error_already_set();  // OverflowError
    if (u > std::numeric_limits<V>::max()) {
      throw py::value_error(std::string(name) + " is too large: " + std::string(py::str(v)));
    }
    return static_cast<V>(u);
  }
  static py::object to(V v) { return py::int_(v); }
};

template <class V>
struct option<std::optional<V>> {  // None, or a V
  static std::optional<V> from(const char* name, const py::handle& v) {
    if (v.is_none()) return std::nullopt;
    return option<V>::from(name, v);
  }
  static py::object to(const std::optional<V>& v) {
    return v ? option<V>::to(*v) : py::object(py::none());
  }
};

std::string text(const char* name, const py::handle& v) {
  if (!py::isinstance<py::str>(v)) {
    throw py::type_error(std::string(name) + " must be a str, not " +
                         std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(v.ptr(), &size);
  if (!utf8) {  // a lone surrogate
    PyErr_Clear();
    throw py::value_error(std::string(name) + " must be text that UTF-8 can encode, not " +
                          std::string(py::repr(v)));
  }
  return std::string(utf8, static_cast<std::size_t>(size));
}

template <>
struct option<std::string> {
  static std::string from(const char* name, const py::handle& v) { return text(name, v); }
  static py::object to(const std::string& v) { return py::str(v); }
};

template <>
struct option<std::vector<std::byte>> {  // bytes, e.g. a fill element
  static std::vector<std::byte> from(const char* name, const py::handle& v) {
    if (!py::isinstance<py::bytes>(v)) {
      throw py::type_error(std::string(name) + " must be bytes");
    }
    return to_bytes(py::reinterpret_borrow<py::bytes>(v));
  }
  static py::object to(const std::vector<std::byte>& v) {
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  }
};

// An enum crosses as its text form; C++ parses it, with the one message for a wrong name.
template <class E, E (*Parse)(std::string_view)>
struct enum_option {
  static E from(const char* name, const py::handle& v) { return Parse(text(name, v)); }
  static py::object to(E v) { return py::str(std::string(mmnpz::to_string(v))); }
};
template <>
struct option<mmnpz::pad_mode> : enum_option<mmnpz::pad_mode, &mmnpz::parse_pad_mode> {};
template <>
struct option<mmnpz::sampling> : enum_option<mmnpz::sampling, &mmnpz::parse_sampling> {};
template <>
struct option<mmnpz::shard_order> : enum_option<mmnpz::shard_order, &mmnpz::parse_shard_order> {};
template <>
struct option<mmnpz::io_mode> : enum_option<mmnpz::io_mode, &mmnpz::parse_io_mode> {};

template <>
struct option<mmnpz::excerpt_options> {  // nested: an ExcerptOptions object
  static mmnpz::excerpt_options from(const char*, const py::handle& v) {
    return v.cast<mmnpz::excerpt_options>();
  }
  static py::object to(const mmnpz::excerpt_options& v) { return py::cast(v); }
};

// An options struct bound as a class built from keyword arguments (each set through its
// option<> conversion, then the whole checked by mmnpz::validate), with a property per field
// and a repr listing them all.
template <class T>
class options_class {
 public:
  options_class(py::module_& m, const char* name, const char* doc) : cls_(m, name, doc) {}

  template <class V>
  options_class& field(const char* name, V T::*member) {
    auto set = [name, member](T& o, const py::handle& v) { o.*member = option<V>::from(name, v); };
    auto get = [member](const T& o) { return option<V>::to(o.*member); };
    fields_->push_back({name, set, get});
    cls_.def_property(name, get, set);
    return *this;
  }

  void done() {
    auto fields = fields_;
    const std::string type_name = py::str(cls_.attr("__name__"));
    cls_.def(py::init([fields, type_name](const py::kwargs& given) {
      T o;
      for (const auto& [key, value] : given) {
        const std::string k = py::str(key);
        const field_entry* f = nullptr;
        for (const auto& e : *fields) {
          if (k == e.name) f = &e;
        }
        if (!f) {
          throw py::type_error(type_name + "() got an unexpected keyword argument '" + k + "'");
        }
        f->set(o, value);
      }
      mmnpz::validate(o);
      return o;
    }));
    cls_.def("__repr__", [fields, type_name](const T& o) {
      std::string out = type_name + "(";
      for (const auto& e : *fields) {
        out += (&e == &fields->front() ? "" : ", ") + std::string(e.name) + "=" +
               std::string(py::repr(e.get(o)));
      }
      return out + ")";
    });
  }

 private:
  struct field_entry {
    const char* name;
    std::function<void(T&, const py::handle&)> set;
    std::function<py::object(const T&)> get;
  };
  py::class_<T> cls_;
  std::shared_ptr<std::vector<field_entry>> fields_ = std::make_shared<std::vector<field_entry>>();
};

// ---- Gather ------------------------------------------------------------------------------

constexpr const char* bad_valid = "valid must be an int64 array with one entry per excerpt";

// One field of a gather from Python: the gather_field and the Python objects it points into.
struct py_gather_field {
  py_gather_field(py::object source_, i64_array indices_, py::array out_, std::uint64_t rate_num,
                  std::uint64_t rate_den, py::object valid_, const py::bytes& fill)
      : source(std::move(source_)),
        indices(std::move(indices_)),
        out(std::move(out_)),
        valid(std::move(valid_)) {
    field.source = &source.cast<const mmnpz::dataset&>();
    field.indices = indices.data();
    field.rate_num = rate_num;
    field.rate_den = rate_den;
    field.out = writable_bytes(out, "out");
    field.out_bytes = static_cast<std::uint64_t>(out.nbytes());
    if (!valid.is_none()) {
      auto rows = valid.cast<py::array>();
      if (!rows.dtype().is(py::dtype::of<std::int64_t>()) || rows.ndim() != 1) {
        throw py::value_error(bad_valid);
      }
      field.valid = reinterpret_cast<std::int64_t*>(writable_bytes(rows, "valid"));
    }
    field.fill = to_bytes(fill);
  }

  py::object source;  // the Dataset
  i64_array indices;  // converted to int64
  py::array out;
  py::object valid;  // None or the valid-rows array
  mmnpz::gather_field field;
};

// The arguments of gather / gather_async, checked, with the fields that keep the datasets and
// outputs alive while a copy may run.
struct py_gather {
  py_gather(const py::list& given, i64_array starts_, const mmnpz::excerpt_options& options_)
      : starts(std::move(starts_)), options(options_) {
    for (const auto& item : given) {
      const auto& f = item.cast<const py_gather_field&>();
      if (f.indices.size() != starts.size()) {
        throw py::value_error("there are " + std::to_string(f.indices.size()) + " indices but " +
                              std::to_string(starts.size()) + " starts");
      }
      if (f.field.valid && py::len(f.valid) != static_cast<std::size_t>(starts.size())) {
        throw py::value_error(bad_valid);
      }
      keep.push_back(py::reinterpret_borrow<py::object>(item));
      fields.push_back(f.field);
    }
  }
  std::size_t count() const { return static_cast<std::size_t>(starts.size()); }

  std::vector<py::object> keep;
  i64_array starts;
  mmnpz::excerpt_options options;
  std::vector<mmnpz::gather_field> fields;
};

// A background gather and what it writes into; destroying it waits (without the GIL).
struct pending {
  explicit pending(py_gather r) : request(std::move(r)) {}
  pending(const pending&) = delete;
  pending& operator=(const pending&) = delete;
  ~pending() {
    py::gil_scoped_release nogil;
    running = mmnpz::pending_gather();  // waits
  }
  void start() {  // without the GIL
    running = mmnpz::gather_async(request.fields, request.starts.data(), request.count(),
                                  request.options);
  }
  void wait() {
    py::gil_scoped_release nogil;
    running.wait();
  }

  py_gather request;
  mmnpz::pending_gather running;
};

// UTF-8 of one element of a numpy str array: `width` UCS-4 code units, trailing zeros being
// padding (as numpy reads them). Refuses what str.encode("utf-8") refuses (surrogates).
void utf8_of(const char32_t* units, std::size_t width, std::string& out) {
  while (width > 0 && units[width - 1] == 0) --width;
  out.clear();
  for (std::size_t i = 0; i < width; ++i) {
    const auto c = static_cast<std::uint32_t>(units[i]);
    if (c >= 0xD800 && c < 0xE000) {
      throw py::value_error("a name holds a surrogate code point, which UTF-8 cannot encode");
    }
    if (c > 0x10FFFF) throw py::value_error("a name holds a code point beyond U+10FFFF");
    mmnpz::detail::append_utf8(out, c);
  }
}

void bind_dataset(py::module_& m) {
  m.def(
      "_name_positions",
      [](const py::array& names, const py::bytes& key) {
        const py::dtype type = names.dtype();
        if (type.kind() != 'U' || names.ndim() != 1 ||
            !(names.flags() & py::array::c_style)) {
          throw py::type_error("_name_positions: names must be a contiguous 1-D str array");
        }
        const std::string k = key;
        const auto width = static_cast<std::size_t>(type.itemsize()) / 4;
        const auto n = static_cast<std::size_t>(names.shape(0));
        py::array_t<double> out(static_cast<py::ssize_t>(n));
        const auto* units = static_cast<const char32_t*>(names.data());
        double* positions = out.mutable_data();
        const mmnpz::python::blake2b_64 hash(k.data(), k.size());
        std::string utf8;
        for (std::size_t i = 0; i < n; ++i) {
          utf8_of(units + i * width, width, utf8);
          const std::uint64_t h = hash(utf8.data(), utf8.size());
          positions[i] = static_cast<double>(h) / 18446744073709551616.0;  // 2^64
        }
        return out;
      },
      py::arg("names"), py::arg("key"),
      R"(For each name of a 1-D str array, int.from_bytes(hashlib.blake2b(name.encode(),
digest_size=8, key=key).digest(), "little") / 2**64 (Dataset.split's positions).)");

  options_class<mmnpz::dataset_options>(
      m, "DatasetOptions", R"(How a Dataset opens its archives (mmnpz::dataset_options).)")
      .field("select", &mmnpz::dataset_options::select)
      .field("order", &mmnpz::dataset_options::order)
      .field("threads", &mmnpz::dataset_options::threads)
      .field("io", &mmnpz::dataset_options::io)
      .done();

  m.def(
      "_after_archives_open",
      [](py::object callback) {
        if (callback.is_none()) {
          mmnpz::detail::after_archives_open = nullptr;
          return;
        }
        auto held = std::make_shared<py::object>(std::move(callback));
        mmnpz::detail::after_archives_open = [held] {
          py::gil_scoped_acquire gil;
          (*held)();
        };
      },
      py::arg("callback"),
      R"(For tests: calls callback() in every Dataset opening once its archives are open and before
their items' headers are read (None: no longer).)");

  py::class_<mmnpz::dataset>(m, "Dataset",
                             R"(Archives opened as one item sequence (see mmnpz::dataset).)")
      .def(py::init([](const std::vector<mmnpz_python::fs_path>& specs,
                       const mmnpz::dataset_options& o) {
             const std::vector<std::string> spec_bytes(specs.begin(), specs.end());
             py::gil_scoped_release nogil;
             return mmnpz::dataset(spec_bytes, o);
           }),
           py::arg("specs"), py::arg("options"))
      .def("__len__", &mmnpz::dataset::size)
      .def_property_readonly(
          "paths", [](const mmnpz::dataset& d) { return mmnpz_python::path_list(d.paths()); })
      .def(
          "identities",
          [](const mmnpz::dataset& d) {
            // (device, inode, size) of each archive as opened, from its descriptor: what a
            // pickle checks that the archives opened again are (the paths may name others).
            py::list out;
            for (std::size_t k = 0; k < d.shards(); ++k) {
              struct stat st {};
              const int fd = d.shard(k).descriptor();
              if (fd < 0 || ::fstat(fd, &st) != 0) {
                out.append(py::none());
              } else {
                out.append(py::make_tuple(static_cast<std::uint64_t>(st.st_dev),
                                          static_cast<std::uint64_t>(st.st_ino),
                                          static_cast<std::uint64_t>(st.st_size)));
              }
            }
            return out;
          },
          R"((device, inode, size) of each archive as opened (None where unknown).)")
      .def("lengths", [](const mmnpz::dataset& d) { return to_numpy(d.lengths()); })
      .def("layout_ids",
           [](const mmnpz::dataset& d) {
             py::array_t<std::uint32_t> out(static_cast<py::ssize_t>(d.size()));
             auto* p = out.mutable_data();
             for (std::size_t i = 0; i < d.size(); ++i) {
               p[i] = static_cast<std::uint32_t>(d.layout_id(i));
             }
             return out;
           })
      .def("layouts",
           [](const mmnpz::dataset& d) {
             py::list out;
             for (const auto& l : d.layouts()) out.append(layout_tuple(l));
             return out;
           })
      .def("name", [](const mmnpz::dataset& d, std::size_t i) { return std::string(d.name(i)); })
      .def("names",
           [](const mmnpz::dataset& d) {
             return mmnpz_python::str_list(d.size(), [&d](std::size_t i) { return d.name(i); });
           })
      .def("find", [](const mmnpz::dataset& d, const std::string& name) { return d.find(name); })
      .def("batch_layout",
           [](const mmnpz::dataset& d, const i64_array& indices) {
             return layout_tuple(mmnpz::batch_layout(d, indices.data(), indices.size()));
           })
      .def("locate", [](const mmnpz::dataset& d, std::size_t i) {
        const mmnpz::reader& r = d.shard(d.shard_of(i));
        return py::make_tuple(mmnpz_python::path_str(r.path()),
                              std::string(r.member(d.member_of(i)).name));
      });
}

void bind_gather(py::module_& m) {
  options_class<mmnpz::excerpt_options>(
      m, "ExcerptOptions",
      R"(One excerpt length and pad rule for a batch (mmnpz::excerpt_options).)")
      .field("length", &mmnpz::excerpt_options::length)
      .field("pad", &mmnpz::excerpt_options::pad)
      .field("fill", &mmnpz::excerpt_options::fill)
      .field("threads", &mmnpz::excerpt_options::threads)
      .field("io", &mmnpz::excerpt_options::io)
      .done();

  py::class_<py_gather_field>(m, "GatherField",
                              R"(One field of a gather: which items of which dataset, into what.)")
      .def(py::init<py::object, i64_array, py::array, std::uint64_t, std::uint64_t, py::object,
                    const py::bytes&>(),
           py::arg("source"), py::arg("indices"), py::arg("out"), py::kw_only(),
           py::arg("rate_num") = 1, py::arg("rate_den") = 1, py::arg("valid") = py::none(),
           py::arg("fill") = py::bytes())
      .def_readonly("out", &py_gather_field::out)
      .def_readonly("valid", &py_gather_field::valid);

  m.def(
      "field_length",
      [](std::uint64_t length, std::uint64_t num, std::uint64_t den) {
        return mmnpz::field_length(length, num, den);
      },
      py::arg("length"), py::arg("rate_num"), py::arg("rate_den"),
      R"(The rows of a field's excerpt at rate num/den (ValueError unless whole).)");

  m.def(
      "gather",
      [](const py::list& fields, i64_array starts, const mmnpz::excerpt_options& options) {
        const py_gather r(fields, std::move(starts), options);
        py::gil_scoped_release nogil;
        mmnpz::gather(r.fields, r.starts.data(), r.count(), r.options);
      },
      py::arg("fields"), py::arg("starts"), py::arg("options"),
      R"(Fills each GatherField's out array; see mmnpz::gather.)");

  py::class_<pending>(m, "PendingGather", R"(A gather running in the background.)")
      .def("wait", &pending::wait, R"(Returns once every excerpt is copied (without the GIL).)");
  m.def(
      "gather_async",
      [](const py::list& fields, i64_array starts, const mmnpz::excerpt_options& options) {
        auto p = std::make_unique<pending>(py_gather(fields, std::move(starts), options));
        py::gil_scoped_release nogil;
        p->start();
        return p;
      },
      py::arg("fields"), py::arg("starts"), py::arg("options"),
      R"(Checks like gather, then copies in the background; returns a PendingGather.)");
}

void bind_sampler(py::module_& m) {
  options_class<mmnpz::sampler_options>(m, "SamplerOptions",
                                        R"(How a Sampler draws (mmnpz::sampler_options).)")
      .field("kind", &mmnpz::sampler_options::kind)
      .field("seed", &mmnpz::sampler_options::seed)
      .field("length", &mmnpz::sampler_options::length)
      .field("hop", &mmnpz::sampler_options::hop)
      .field("shuffle_windows", &mmnpz::sampler_options::shuffle_windows)
      .field("random_crop", &mmnpz::sampler_options::random_crop)
      .field("num_samples", &mmnpz::sampler_options::num_samples)
      .field("rank", &mmnpz::sampler_options::rank)
      .field("world_size", &mmnpz::sampler_options::world_size)
      .field("drop_remainder", &mmnpz::sampler_options::drop_remainder)
      .field("pad_short_items", &mmnpz::sampler_options::pad_short_items)
      .done();

  py::class_<mmnpz::sampler>(m, "Sampler", R"(A deterministic sample stream (see mmnpz::sampler).)")
      .def(py::init([](const i64_array& lengths, const mmnpz::sampler_options& o) {
             std::vector<std::uint64_t> lens(static_cast<std::size_t>(lengths.size()));
             for (std::size_t i = 0; i < lens.size(); ++i) {
               if (lengths.data()[i] < 0) throw py::value_error("lengths must not be negative");
               lens[i] = static_cast<std::uint64_t>(lengths.data()[i]);
             }
             py::gil_scoped_release nogil;
             return mmnpz::sampler(std::move(lens), o);
           }),
           py::arg("lengths"), py::arg("options"))
      .def_property_readonly(
          "options", [](const mmnpz::sampler& s) { return mmnpz::sampler_options(s.options()); })
      .def_property_readonly("epoch_size", &mmnpz::sampler::epoch_size)
      .def_property_readonly("rank_size", &mmnpz::sampler::rank_size)
      .def("sample", [](const mmnpz::sampler& s, std::uint64_t epoch, std::uint64_t position,
                        std::size_t count) {
        if (position > s.rank_size() || count > s.rank_size() - position) {
          s.fill(epoch, position, count, nullptr, nullptr);  // throws: not an array of count
        }
        py::array_t<std::int64_t> indices(static_cast<py::ssize_t>(count));
        py::array_t<std::int64_t> starts(static_cast<py::ssize_t>(count));
        auto* i = indices.mutable_data();
        auto* st = starts.mutable_data();
        {
          py::gil_scoped_release nogil;
          s.fill(epoch, position, count, i, st);
        }
        return py::make_tuple(indices, starts);
      });
}

void bind_loader(py::module_& m) {
  options_class<mmnpz::loader_options>(
      m, "LoaderOptions", R"(What a batch loader is asked for (mmnpz::loader_options).)")
      .field("batch_size", &mmnpz::loader_options::batch_size)
      .field("excerpt", &mmnpz::loader_options::excerpt)
      .field("epochs", &mmnpz::loader_options::epochs)
      .field("prefetch", &mmnpz::loader_options::prefetch)
      .field("drop_last", &mmnpz::loader_options::drop_last)
      .done();

  m.def("batches_per_epoch", &mmnpz::batches_per_epoch, py::arg("options"), py::arg("sampler"),
        R"(Batches per epoch for the sampler's rank (ValueError when there is none).)");
}

}  // namespace

void bind_data(py::module_& m) {
  bind_dataset(m);
  bind_gather(m);
  bind_sampler(m);
  bind_loader(m);
}
