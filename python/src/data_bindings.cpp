// Datasets, batched gather and samplers for the _mmnpz extension. Every call that touches
// array data or loops over items runs without the GIL; nothing creates a Python object per
// item.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mmnpz/mmnpz.hpp"

namespace py = pybind11;

namespace {

using i64_array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

std::vector<std::int64_t> shape_tuple(const std::vector<std::uint64_t>& s) {
  return {s.begin(), s.end()};
}

// A writable C-contiguous array's bytes, checked.
std::byte* writable_bytes(py::array& a, const char* what) {
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) + " must be C-contiguous");
  }
  if (!a.writeable()) throw py::value_error(std::string(what) + " must be writable");
  return static_cast<std::byte*>(a.mutable_data());
}

mmnpz::sampling kind_of(const std::string& k) {
  if (k == "sequential") return mmnpz::sampling::sequential;
  if (k == "shuffle") return mmnpz::sampling::shuffle;
  if (k == "replacement") return mmnpz::sampling::with_replacement;
  if (k == "sliding") return mmnpz::sampling::sliding_window;
  if (k == "weighted") return mmnpz::sampling::weighted_excerpts;
  throw py::value_error(
      "sampling must be 'sequential', 'shuffle', 'replacement', 'sliding' or "
      "'weighted', not '" +
      k + "'");
}

mmnpz::pad_mode pad_of(const std::string& p) {
  if (p == "none") return mmnpz::pad_mode::none;
  if (p == "fill") return mmnpz::pad_mode::fill;
  if (p == "wrap") return mmnpz::pad_mode::wrap;
  throw py::value_error("pad must be 'none', 'fill' or 'wrap', not '" + p + "'");
}

// The arguments of gather / gather_async, checked, with the Python objects they point into.
// fields: [(dataset, indices, rate_num, rate_den, out, valid or None, fill bytes)].
struct gather_request {
  gather_request(const py::list& given, const i64_array& starts_, std::uint64_t length,
                 const std::string& pad, const py::bytes& fill, std::size_t threads)
      : starts(starts_), keep(given) {
    indices.reserve(given.size());
    for (const auto& item : given) {
      const auto t = item.cast<py::tuple>();
      mmnpz::gather_field f;
      f.source = &t[0].cast<const mmnpz::dataset&>();
      indices.push_back(t[1].cast<i64_array>());
      if (indices.back().size() != starts.size()) {
        throw py::value_error("there are " + std::to_string(indices.back().size()) +
                              " indices but " + std::to_string(starts.size()) + " starts");
      }
      f.indices = indices.back().data();
      f.rate_num = t[2].cast<std::uint64_t>();
      f.rate_den = t[3].cast<std::uint64_t>();
      auto out = t[4].cast<py::array>();
      f.out = writable_bytes(out, "out");
      f.out_bytes = static_cast<std::uint64_t>(out.nbytes());
      if (!t[5].is_none()) {
        auto valid = t[5].cast<py::array>();
        if (!valid.dtype().is(py::dtype::of<std::int64_t>()) || valid.ndim() != 1 ||
            valid.size() != starts.size()) {
          throw py::value_error("valid must be an int64 array with one entry per excerpt");
        }
        f.valid = reinterpret_cast<std::int64_t*>(writable_bytes(valid, "valid"));
      }
      const std::string field_fill = t.size() > 6 ? std::string(t[6].cast<py::bytes>()) : "";
      f.fill.resize(field_fill.size());
      std::memcpy(f.fill.data(), field_fill.data(), field_fill.size());
      fields.push_back(f);
    }
    options.length = length;
    options.pad = pad_of(pad);
    const std::string fill_bytes = fill;
    options.fill.resize(fill_bytes.size());
    std::memcpy(options.fill.data(), fill_bytes.data(), fill_bytes.size());
    options.threads = threads;
  }

  i64_array starts;
  py::list keep;                   // the datasets and outputs, alive while a copy may run
  std::vector<i64_array> indices;  // converted to int64
  std::vector<mmnpz::gather_field> fields;
  mmnpz::excerpt_options options;
};

// A background gather and what it writes into; destroying it waits (without the GIL).
struct pending {
  template <class... Args>
  explicit pending(Args&&... args) : request(std::forward<Args>(args)...) {}
  pending(const pending&) = delete;
  pending& operator=(const pending&) = delete;
  ~pending() {
    py::gil_scoped_release nogil;
    running = mmnpz::pending_gather();  // waits
  }
  void start() {  // without the GIL
    running = mmnpz::gather_async(request.fields, request.starts.data(),
                                  static_cast<std::size_t>(request.starts.size()), request.options);
  }
  void wait() {
    py::gil_scoped_release nogil;
    running.wait();
  }

  gather_request request;
  mmnpz::pending_gather running;
};

}  // namespace

void bind_data(py::module_& m) {
  py::class_<mmnpz::dataset>(m, "Dataset",
                             R"(Archives opened as one item sequence (see mmnpz::dataset).)")
      .def(py::init([](const std::vector<std::string>& specs, const std::string& select,
                       const std::string& order, std::size_t threads) {
             mmnpz::dataset_options o;
             o.select = select;
             if (order == "interleave") {
               o.order = mmnpz::shard_order::interleave;
             } else if (order != "concatenate") {
               throw py::value_error("order must be 'concatenate' or 'interleave', not '" + order +
                                     "'");
             }
             o.threads = threads;
             py::gil_scoped_release nogil;
             return mmnpz::dataset(specs, o);
           }),
           py::arg("specs"), py::arg("select") = "", py::arg("order") = "concatenate",
           py::arg("threads") = 0)
      .def("__len__", &mmnpz::dataset::size)
      .def_property_readonly("paths", &mmnpz::dataset::paths)
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
             for (const auto& l : d.layouts()) {
               out.append(
                   py::make_tuple(l.type.descr(), py::tuple(py::cast(shape_tuple(l.trailing)))));
             }
             return out;
           })
      .def("name", [](const mmnpz::dataset& d, std::size_t i) { return std::string(d.name(i)); })
      .def("find", [](const mmnpz::dataset& d, const std::string& name) { return d.find(name); })
      .def("batch_layout",
           [](const mmnpz::dataset& d, const i64_array& indices) {
             const auto l = mmnpz::batch_layout(d, indices.data(), indices.size());
             return py::make_tuple(l.type.descr(), py::tuple(py::cast(shape_tuple(l.trailing))));
           })
      .def("locate", [](const mmnpz::dataset& d, std::size_t i) {
        const mmnpz::reader& r = d.shard(d.shard_of(i));
        return py::make_tuple(r.path(), std::string(r.member(d.member_of(i)).name));
      });

  m.def(
      "gather",
      [](const py::list& fields, const i64_array& starts, std::uint64_t length,
         const std::string& pad, const py::bytes& fill, std::size_t threads) {
        const gather_request r(fields, starts, length, pad, fill, threads);
        py::gil_scoped_release nogil;
        mmnpz::gather(r.fields, r.starts.data(), static_cast<std::size_t>(r.starts.size()),
                      r.options);
      },
      py::arg("fields"), py::arg("starts"), py::arg("length"), py::arg("pad"), py::arg("fill"),
      py::arg("threads"), R"(Fills each field's out array; see mmnpz::gather.)");

  py::class_<pending>(m, "PendingGather", R"(A gather running in the background.)")
      .def("wait", &pending::wait, R"(Returns once every excerpt is copied (without the GIL).)");
  m.def(
      "gather_async",
      [](const py::list& fields, const i64_array& starts, std::uint64_t length,
         const std::string& pad, const py::bytes& fill, std::size_t threads) {
        auto p = std::make_unique<pending>(fields, starts, length, pad, fill, threads);
        py::gil_scoped_release nogil;
        p->start();
        return p;
      },
      py::arg("fields"), py::arg("starts"), py::arg("length"), py::arg("pad"), py::arg("fill"),
      py::arg("threads"),
      R"(Checks like gather, then copies in the background; returns a PendingGather.)");

  py::class_<mmnpz::sampler>(m, "Sampler", R"(A deterministic sample stream (see mmnpz::sampler).)")
      .def(py::init([](const i64_array& lengths, const std::string& kind, std::uint64_t seed,
                       std::uint64_t length, std::uint64_t hop, bool shuffle_windows,
                       bool random_crop, std::uint64_t num_samples, std::uint64_t rank,
                       std::uint64_t world_size, bool drop_remainder) {
             std::vector<std::uint64_t> lens(static_cast<std::size_t>(lengths.size()));
             for (std::size_t i = 0; i < lens.size(); ++i) {
               if (lengths.data()[i] < 0) throw py::value_error("lengths must not be negative");
               lens[i] = static_cast<std::uint64_t>(lengths.data()[i]);
             }
             mmnpz::sampler_options o;
             o.kind = kind_of(kind);
             o.seed = seed;
             o.length = length;
             o.hop = hop;
             o.shuffle_windows = shuffle_windows;
             o.random_crop = random_crop;
             o.num_samples = num_samples;
             o.rank = rank;
             o.world_size = world_size;
             o.drop_remainder = drop_remainder;
             py::gil_scoped_release nogil;
             return mmnpz::sampler(std::move(lens), o);
           }),
           py::arg("lengths"), py::arg("kind"), py::arg("seed"), py::arg("length"), py::arg("hop"),
           py::arg("shuffle_windows"), py::arg("random_crop"), py::arg("num_samples"),
           py::arg("rank"), py::arg("world_size"), py::arg("drop_remainder"))
      .def_property_readonly("epoch_size", &mmnpz::sampler::epoch_size)
      .def_property_readonly("rank_size", &mmnpz::sampler::rank_size)
      .def("sample", [](const mmnpz::sampler& s, std::uint64_t epoch, std::uint64_t position,
                        std::size_t count) {
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
