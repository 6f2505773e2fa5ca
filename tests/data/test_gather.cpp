#include <dirent.h>
#include <fcntl.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "data/dataset_state.hpp"
#include "data/io.hpp"
#include "detail/sigbus_guard.hpp"
#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

constexpr std::size_t bins = 3;

float value(std::size_t clip, std::size_t frame, std::size_t bin) {
  return 1000.0f * clip + 10.0f * frame + bin;
}

// Clips of (frames[k], 3) float32 rows, optionally a Fortran-order copy of each as "f_<k>".
mmnpz::dataset make(const std::string& name, const std::vector<std::size_t>& frames,
                    bool fortran = false) {
  const std::string path = test::scratch(name);
  {
    mmnpz::writer w(path);
    for (std::size_t k = 0; k < frames.size(); ++k) {
      std::vector<float> c(frames[k] * bins), f(frames[k] * bins);
      for (std::size_t r = 0; r < frames[k]; ++r) {
        for (std::size_t b = 0; b < bins; ++b) {
          c[r * bins + b] = value(k, r, b);
          f[b * frames[k] + r] = value(k, r, b);
        }
      }
      if (fortran) {
        w.write("clip_" + std::to_string(k), f.data(), {frames[k], bins}, true);
      } else {
        w.write("clip_" + std::to_string(k), c.data(), {frames[k], bins});
      }
    }
  }
  return mmnpz::dataset(path);
}

// What the excerpt should hold, by the rules of each pad mode.
std::vector<float> expected(const mmnpz::dataset& ds, const std::vector<std::int64_t>& idx,
                            const std::vector<std::int64_t>& start, std::size_t length,
                            mmnpz::pad_mode pad, float fill = 0) {
  std::vector<float> out;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const std::size_t len = ds.length(idx[k]);
    for (std::size_t r = 0; r < length; ++r) {
      std::size_t row = start[k] + r;
      const bool past = row >= len;
      if (pad == mmnpz::pad_mode::wrap) row %= len;
      for (std::size_t b = 0; b < bins; ++b) {
        out.push_back(past && pad == mmnpz::pad_mode::fill ? fill : value(idx[k], row, b));
      }
    }
  }
  return out;
}

std::vector<float> run(const mmnpz::dataset& ds, const std::vector<std::int64_t>& idx,
                       const std::vector<std::int64_t>& start, std::size_t length,
                       mmnpz::excerpt_options o, std::vector<std::int64_t>* valid = nullptr) {
  o.length = length;
  std::vector<float> out(idx.size() * length * bins, -1.0f);
  if (valid) valid->assign(idx.size(), -1);
  mmnpz::gather(ds, idx.data(), start.data(), idx.size(), reinterpret_cast<std::byte*>(out.data()),
                out.size() * sizeof(float), o, valid ? valid->data() : nullptr);
  return out;
}

}  // namespace

TEST_SUITE("gather") {
  TEST_CASE("random excerpts equal the members' rows for every thread count") {
    const std::vector<std::size_t> frames{50, 7, 120, 33, 64, 9, 200};
    for (bool fortran : {false, true}) {
      const auto ds = make(fortran ? "g_f.npz" : "g_c.npz", frames, fortran);
      std::mt19937 rng(1);
      for (std::size_t threads : {1, 2, 4}) {
        std::vector<std::int64_t> idx, start;
        for (int k = 0; k < 64; ++k) {
          std::int64_t i;
          do i = rng() % frames.size();
          while (frames[i] < 8);
          idx.push_back(i);
          start.push_back(rng() % (frames[i] - 8 + 1));
        }
        mmnpz::excerpt_options o;
        o.threads = threads;
        std::vector<std::int64_t> valid;
        CHECK(run(ds, idx, start, 8, o, &valid) ==
              expected(ds, idx, start, 8, mmnpz::pad_mode::none));
        CHECK(valid == std::vector<std::int64_t>(64, 8));
      }
    }
  }

  TEST_CASE("short members are padded with zeros or a value, or wrapped") {
    const auto ds = make("g_pad.npz", {5, 12, 0});
    const std::vector<std::int64_t> idx{0, 1, 0, 2}, start{2, 10, 5, 0};
    mmnpz::excerpt_options o;
    o.pad = mmnpz::pad_mode::fill;
    std::vector<std::int64_t> valid;
    CHECK(run(ds, idx, start, 6, o, &valid) == expected(ds, idx, start, 6, mmnpz::pad_mode::fill));
    CHECK(valid == std::vector<std::int64_t>{3, 2, 0, 0});
    const float minus = -7.5f;
    o.fill.resize(4);
    std::memcpy(o.fill.data(), &minus, 4);
    CHECK(run(ds, idx, start, 6, o) == expected(ds, idx, start, 6, mmnpz::pad_mode::fill, -7.5f));

    o = {};
    o.pad = mmnpz::pad_mode::wrap;
    const std::vector<std::int64_t> widx{0, 1, 0}, wstart{2, 10, 13};
    CHECK(run(ds, widx, wstart, 14, o, &valid) ==
          expected(ds, widx, wstart, 14, mmnpz::pad_mode::wrap));
    CHECK(valid == std::vector<std::int64_t>{14, 14, 14});
  }

  TEST_CASE("bad requests are refused before anything is copied, naming the member") {
    const auto ds = make("g_bad.npz", {5, 12, 0});
    const std::string p = ds.paths()[0];
    mmnpz::excerpt_options o;
    auto attempt = [&](std::vector<std::int64_t> idx, std::vector<std::int64_t> start,
                       std::size_t length) {
      std::vector<float> out(idx.size() * length * bins, -1.0f);
      o.length = length;
      try {
        mmnpz::gather(ds, idx.data(), start.data(), idx.size(),
                      reinterpret_cast<std::byte*>(out.data()), out.size() * 4, o);
      } catch (const mmnpz::error& e) {
        for (float v : out) REQUIRE(v == -1.0f);  // untouched
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(attempt({1, 0}, {0, 1}, 6) ==
          p + ": member 'clip_0.npy': excerpt [1, 7) runs past the end of the member (5 rows); "
              "pad or wrap to allow it");
    CHECK(attempt({1, 3}, {0, 0}, 2) ==
          p + ": index 3 (batch entry 1) is out of range for a dataset of 3 items");
    CHECK(attempt({1, -1}, {0, 0}, 2) ==
          p + ": index -1 (batch entry 1) is out of range for a dataset of 3 items");
    CHECK(attempt({1}, {-2}, 2) == p + ": member 'clip_1.npy': excerpt start -2 is negative");
    o.pad = mmnpz::pad_mode::fill;
    CHECK(attempt({0}, {6}, 2) ==
          p + ": member 'clip_0.npy': excerpt [6, 8) starts past the end of the member (5 rows)");
    o.pad = mmnpz::pad_mode::wrap;
    CHECK(attempt({2}, {0}, 2) == p + ": member 'clip_2.npy': an empty member cannot be wrapped");
    std::vector<float> small(5);
    std::int64_t i = 0, s = 0;
    o.length = 2;
    CHECK_THROWS_WITH_AS(
        mmnpz::gather(ds, &i, &s, 1, reinterpret_cast<std::byte*>(small.data()), 20, o),
        "<gather>: the output has 20 bytes but 1 excerpts of 2 rows of 12 "
        "bytes need 24",
        mmnpz::error);
  }

  TEST_CASE("a field without its source, indices, starts or output is refused, not followed") {
    const auto ds = make("g_null.npz", {5});
    mmnpz::excerpt_options o;
    o.length = 2;
    std::vector<float> out(2 * bins);
    std::int64_t i = 0, s = 0;
    mmnpz::gather_field f;
    f.indices = &i;
    f.out = reinterpret_cast<std::byte*>(out.data());
    f.out_bytes = out.size() * 4;
    CHECK_THROWS_WITH_AS(mmnpz::gather({f}, &s, 1, o),
                         "<gather>: a field has no source dataset (a null pointer)", mmnpz::error);
    f.source = &ds;
    f.indices = nullptr;
    CHECK_THROWS_WITH_AS(mmnpz::gather({f}, &s, 1, o), "<gather>: a field has no indices (a null pointer)",
                         mmnpz::error);
    f.indices = &i;
    f.out = nullptr;
    CHECK_THROWS_WITH_AS(mmnpz::gather({f}, &s, 1, o), "<gather>: a field has no output (a null pointer)",
                         mmnpz::error);
    f.out = reinterpret_cast<std::byte*>(out.data());
    CHECK_THROWS_WITH_AS(mmnpz::gather({f}, nullptr, 1, o),
                         "<gather>: no starts given (a null pointer)", mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::gather(ds, &i, nullptr, 1, f.out, f.out_bytes, o),
                         "<gather>: no starts given (a null pointer)", mmnpz::error);
    mmnpz::gather({f}, &s, 1, o);
    CHECK(out[bins] == value(0, 1, 0));
  }

  TEST_CASE("members whose dtype or trailing shape disagree are refused") {
    const std::string path = test::scratch("g_mixed.npz");
    {
      mmnpz::writer w(path);
      const std::vector<float> a(12, 1.0f);
      const std::vector<double> b(12, 2.0);
      w.write("a", a.data(), {4, 3});
      w.write("b", b.data(), {4, 3});
      w.write("c", a.data(), {3, 4});
    }
    const mmnpz::dataset ds(path);
    std::vector<std::int64_t> idx{0, 1}, start{0, 0};
    CHECK_THROWS_WITH_AS(mmnpz::batch_layout(ds, idx.data(), 2),
                         (path + ": member 'b.npy': has dtype <f8 but the batch has <f4").c_str(),
                         mmnpz::error);
    idx = {0, 2};
    CHECK_THROWS_WITH_AS(
        mmnpz::batch_layout(ds, idx.data(), 2),
        (path + ": member 'c.npy': has trailing shape (4,) but the batch has (3,)").c_str(),
        mmnpz::error);
    std::vector<float> out(2 * 2 * 3);
    mmnpz::excerpt_options o;
    o.length = 2;
    CHECK_THROWS_AS(mmnpz::gather(ds, idx.data(), start.data(), 2,
                                  reinterpret_cast<std::byte*>(out.data()), 48, o),
                    mmnpz::error);
  }

  TEST_CASE("several fields take the same window at their own frame rates") {
    // Spectrogram frames at rate 1, labels at rate 1/4 (one label per 4 frames).
    const std::string path = test::scratch("g_fields.npz");
    {
      mmnpz::writer w(path);
      for (int k = 0; k < 3; ++k) {
        std::vector<float> spec(40 * bins);
        for (std::size_t r = 0; r < 40; ++r)
          for (std::size_t b = 0; b < bins; ++b) spec[r * bins + b] = value(k, r, b);
        std::vector<std::int32_t> labels(10);
        for (int r = 0; r < 10; ++r) labels[r] = 100 * k + r;
        w.write("c" + std::to_string(k) + "_spec", spec.data(), {40, bins});
        w.write("c" + std::to_string(k) + "_labels", labels.data(), {10});
      }
    }
    mmnpz::dataset_options so, lo;
    so.select = "*_spec";
    lo.select = "*_labels";
    const mmnpz::dataset spec(path, so), labels(path, lo);
    const std::vector<std::int64_t> idx{2, 0}, start{8, 21};
    std::vector<float> s_out(2 * 12 * bins);
    std::vector<std::int32_t> l_out(2 * 3);
    std::vector<std::int64_t> s_valid(2), l_valid(2);
    mmnpz::gather_field fs, fl;
    fs.source = &spec;
    fs.indices = idx.data();
    fs.out = reinterpret_cast<std::byte*>(s_out.data());
    fs.out_bytes = s_out.size() * 4;
    fs.valid = s_valid.data();
    fl.source = &labels;
    fl.indices = idx.data();
    fl.rate_num = 1;
    fl.rate_den = 4;
    fl.out = reinterpret_cast<std::byte*>(l_out.data());
    fl.out_bytes = l_out.size() * 4;
    fl.valid = l_valid.data();
    mmnpz::excerpt_options o;
    o.length = 12;
    mmnpz::gather({fs, fl}, start.data(), 2, o);
    CHECK(s_out == expected(spec, idx, start, 12, mmnpz::pad_mode::none));
    CHECK(l_out == std::vector<std::int32_t>{202, 203, 204, 5, 6, 7});  // frames 8/4, 21/4
    o.length = 10;
    CHECK_THROWS_WITH_AS(mmnpz::gather({fs, fl}, start.data(), 2, o),
                         "<gather>: an excerpt of 10 rows at rate 1/4 is not a whole number of "
                         "rows",
                         mmnpz::error);
  }

  TEST_CASE("many threads gathering from one dataset at once all get their excerpts") {
    std::vector<std::size_t> frames;
    for (std::size_t k = 0; k < 200; ++k) frames.push_back(16 + (k * 13) % 100);
    const auto ds = make("g_threads.npz", frames);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(t);
        for (int round = 0; round < 30; ++round) {
          std::vector<std::int64_t> idx(32), start(32);
          for (int k = 0; k < 32; ++k) {
            idx[k] = rng() % frames.size();
            start[k] = rng() % (frames[idx[k]] - 16 + 1);
          }
          mmnpz::excerpt_options o;
          o.threads = 1 + t % 3;
          if (run(ds, idx, start, 16, o) != expected(ds, idx, start, 16, mmnpz::pad_mode::none)) {
            ++failures;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(failures == 0);
  }
}

TEST_SUITE("gather") {
  TEST_CASE("a forked child gathers on threads of its own pool") {
    std::vector<std::size_t> frames(64, 40);
    const auto ds = make("g_fork.npz", frames);
    std::vector<std::int64_t> idx(64), start(64, 3);
    for (int k = 0; k < 64; ++k) idx[k] = 63 - k;
    mmnpz::excerpt_options o;
    o.threads = 2;
    const auto want = expected(ds, idx, start, 30, mmnpz::pad_mode::none);
    REQUIRE(run(ds, idx, start, 30, o) == want);  // the parent's pool exists now
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      bool ok = true;
      for (int round = 0; round < 20; ++round) ok = ok && run(ds, idx, start, 30, o) == want;
      // The child's pool has threads again (fork copies only the calling thread).
      int threads = 0;
      if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d)) threads += e->d_name[0] != '.';
        ::closedir(d);
      }
      const bool pooled = std::thread::hardware_concurrency() < 2 || threads >= 2;
      std::_Exit(!ok ? 1 : !pooled ? 2 : 0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_SUITE("gather") {
  TEST_CASE("background gathers fill their outputs by wait() and check everything up front") {
    std::vector<std::size_t> frames;
    for (std::size_t k = 0; k < 100; ++k) frames.push_back(20 + k);
    const auto ds = make("g_async.npz", frames);
    std::mt19937 rng(3);
    constexpr int batches = 8;
    std::vector<std::vector<std::int64_t>> idx(batches), start(batches);
    std::vector<std::vector<float>> out(batches);
    std::vector<mmnpz::pending_gather> pending;
    mmnpz::excerpt_options o;
    o.length = 20;
    for (int b = 0; b < batches; ++b) {
      for (int k = 0; k < 16; ++k) {
        idx[b].push_back(rng() % 100);
        start[b].push_back(rng() % (frames[idx[b].back()] - 20 + 1));
      }
      out[b].assign(16 * 20 * bins, -1.0f);
      o.threads = 1 + b % 2;
      pending.push_back(mmnpz::gather_async(
          {mmnpz::gather_field{&ds, idx[b].data(), 1, 1,
                               reinterpret_cast<std::byte*>(out[b].data()), out[b].size() * 4}},
          start[b].data(), 16, o));
    }
    for (int b = batches; b-- > 0;) {  // waited for in any order
      pending[b].wait();
      pending[b].wait();  // a second wait returns at once
      CHECK(out[b] == expected(ds, idx[b], start[b], 20, mmnpz::pad_mode::none));
    }
    // A request that cannot be met throws before anything runs.
    std::vector<std::int64_t> bad{0, 100};
    std::vector<float> untouched(2 * 20 * bins, -1.0f);
    CHECK_THROWS_AS(
        mmnpz::gather_async({mmnpz::gather_field{&ds, bad.data(), 1, 1,
                                                 reinterpret_cast<std::byte*>(untouched.data()),
                                                 untouched.size() * 4}},
                            start[0].data(), 2, o),
        mmnpz::error);
    CHECK(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == -1.0f; }));
    {  // Destroying a pending gather waits for it.
      std::vector<float> last(16 * 20 * bins, -1.0f);
      {
        auto p = mmnpz::gather_async(
            {mmnpz::gather_field{&ds, idx[0].data(), 1, 1,
                                 reinterpret_cast<std::byte*>(last.data()), last.size() * 4}},
            start[0].data(), 16, o);
      }
      CHECK(last == expected(ds, idx[0], start[0], 20, mmnpz::pad_mode::none));
    }
  }
}

// ---- gather by reads (io_mode) ----

namespace {

// Bytes of an excerpt gathered with io mode `io` from a single-field dataset, any dtype.
std::vector<std::byte> gather_bytes(const mmnpz::dataset& ds, const std::vector<std::int64_t>& idx,
                                    const std::vector<std::int64_t>& start, std::size_t length,
                                    mmnpz::pad_mode pad, mmnpz::io_mode io,
                                    std::vector<std::byte> fill = {}) {
  mmnpz::excerpt_options o;
  o.length = length;
  o.pad = pad;
  o.io = io;
  o.fill = std::move(fill);
  const std::uint64_t row = ds.layout(static_cast<std::size_t>(idx[0])).row_bytes;
  std::vector<std::byte> out(idx.size() * length * row, std::byte{0xAB});
  mmnpz::gather(ds, idx.data(), start.data(), idx.size(), out.data(), out.size(), o);
  return out;
}

// Returns short counts, EINTR and (for RWF_NOWAIT) EAGAIN at random, else reads for real.
std::atomic<unsigned> flaky_state{12345};
std::atomic<int> flaky_calls{0};
ssize_t flaky_pread(int fd, void* buf, std::size_t n, off_t offset, int flags) {
  ++flaky_calls;
  unsigned x = flaky_state.fetch_add(0x9E3779B9u) * 2654435761u;
  x ^= x >> 15;
  switch (x % 5) {
    case 0:
      errno = EINTR;
      return -1;
    case 1:
      if (flags != 0) {
        errno = EAGAIN;
        return -1;
      }
      break;
    case 2:
      n = std::min<std::size_t>(n, 1 + x % 7);  // a short count
      break;
    default:
      break;
  }
  return ::pread(fd, buf, n, offset);
}

// Restores the real system call at the end of a scope.
struct pread_seam {
  explicit pread_seam(mmnpz::detail::pread_function f) { mmnpz::detail::set_pread_for_testing(f); }
  ~pread_seam() { mmnpz::detail::set_pread_for_testing(nullptr); }
};

// Counts the reads that gather makes (every call of the system call, RWF_NOWAIT ones too).
std::atomic<int> pread_calls{0};
ssize_t counting_pread(int fd, void* buf, std::size_t n, off_t offset, int flags) {
  ++pread_calls;
  if (flags == 0) return ::pread(fd, buf, n, offset);
  iovec part{buf, n};
  return ::preadv2(fd, &part, 1, offset, flags);
}

// counting_pread, with the next `uncached_left` RWF_NOWAIT reads failing as if their pages
// were out of the page cache (EAGAIN: gather then reads them blocking).
std::atomic<int> uncached_left{0};
ssize_t uncached_pread(int fd, void* buf, std::size_t n, off_t offset, int flags) {
  if (flags != 0 && uncached_left.fetch_sub(1) > 0) {
    ++pread_calls;
    errno = EAGAIN;
    return -1;
  }
  return counting_pread(fd, buf, n, offset, flags);
}

// counting_pread, noting the offset of each read from descriptor `offsets_of_fd`.
std::atomic<int> offsets_of_fd{-1};
std::mutex offsets_lock;
std::set<off_t> offsets_read;
ssize_t offset_noting_pread(int fd, void* buf, std::size_t n, off_t offset, int flags) {
  if (fd == offsets_of_fd) {
    const std::lock_guard<std::mutex> hold(offsets_lock);
    offsets_read.insert(offset);
  }
  return counting_pread(fd, buf, n, offset, flags);
}

// Takes `c` through its learning: first touches alternate, reads costing `read_ns` and faults
// `fault_ns` per KiB; then one copy of mapped pages costing `copy_ns` per KiB, unless 0.
void learn(mmnpz::detail::first_touch_costs& c, std::uint64_t read_ns, std::uint64_t fault_ns,
           std::uint64_t copy_ns = 0) {
  using way = mmnpz::detail::first_touch_costs::way;
  for (std::uint32_t k = 0; k < 2 * mmnpz::detail::first_touch_costs::warmup; ++k) {
    const bool map = c.map_now(0);
    c.record(map ? way::fault : way::read, 1024, map ? fault_ns : read_ns);
  }
  if (copy_ns != 0) c.record(way::copy, 1024, copy_ns);
}

// 2 MiB of anonymous memory on a 2 MiB boundary, in 4 KiB pages (no transparent huge page),
// none touched yet: page tables that a test fills page by page, for pagemap to report.
struct anonymous_region {
  static constexpr std::size_t size = std::size_t{2} << 20;
  void* raw = ::mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
  std::byte* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<std::uintptr_t>(raw) + size - 1) / size * size);
  anonymous_region() {
    REQUIRE(::sysconf(_SC_PAGESIZE) == 4096);
    REQUIRE(raw != MAP_FAILED);
    REQUIRE(::madvise(base, size, MADV_NOHUGEPAGE) == 0);
  }
  anonymous_region(const anonymous_region&) = delete;
  anonymous_region& operator=(const anonymous_region&) = delete;
  ~anonymous_region() { ::munmap(raw, 2 * size); }
};

// Forces io_mode::automatic's choice for pieces of untouched granules (0: read, 1: map) in a
// scope, instead of the cheaper way measured so far.
struct first_touch_seam {
  explicit first_touch_seam(int map) { mmnpz::detail::set_first_touch_for_testing(map); }
  ~first_touch_seam() { mmnpz::detail::set_first_touch_for_testing(-1); }
};

// Reads made by one single-threaded io_mode::automatic gather of excerpts (idx, start), whose
// bytes are checked against `pad`'s rules.
int auto_reads(const mmnpz::dataset& ds, const std::vector<std::int64_t>& idx,
               const std::vector<std::int64_t>& start, std::size_t length,
               mmnpz::pad_mode pad = mmnpz::pad_mode::none) {
  mmnpz::excerpt_options o;
  o.pad = pad;
  o.threads = 1;
  o.io = mmnpz::io_mode::automatic;
  pread_calls = 0;
  const auto got = run(ds, idx, start, length, o);
  const int calls = pread_calls;
  CHECK(got == expected(ds, idx, start, length, pad));
  return calls;
}

// Rows of 12 bytes: the first row of member `item` at or after the next granule boundary
// (64 KiB of the address space, as the kernel's fault-around) that lies `after` bytes past
// the member's data, counted from the member's first row.
std::int64_t row_at_granule(const mmnpz::dataset& ds, std::size_t item, std::uint64_t after) {
  const auto data = reinterpret_cast<std::uintptr_t>(ds.array(item).data());
  const std::uint64_t g = mmnpz::detail::granule_bytes;
  const std::uintptr_t boundary = (data + after + g - 1) / g * g;
  return static_cast<std::int64_t>((boundary - data + 11) / 12);
}

// Runs body() in a forked child, which ends it with std::_Exit or a signal, and returns the
// child's wait status. Signal handlers and cut files stay the child's.
template <class Body>
int status_of_child(Body&& body) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(20);  // a child stuck (a loop of faults) ends by SIGALRM
    body();
    std::_Exit(6);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return status;
}

// 64 KiB of a new file mapped read-only, the file then cut to nothing: touching the mapping
// raises SIGBUS. For a child (see status_of_child): ends it with code 4 on failure.
const std::byte* mapping_of_a_cut_file() {
  char name[] = "/tmp/mmnpz-sigbus-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0 || ::ftruncate(fd, 65536) != 0) std::_Exit(4);
  void* m = ::mmap(nullptr, 65536, PROT_READ, MAP_SHARED, fd, 0);
  ::unlink(name);
  if (m == MAP_FAILED || ::ftruncate(fd, 0) != 0) std::_Exit(4);
  return static_cast<const std::byte*>(m);
}

}  // namespace

TEST_SUITE("gather io") {
  TEST_CASE("io modes parse, print and are validated like the other options") {
    CHECK(mmnpz::parse_io_mode("read") == mmnpz::io_mode::read);
    CHECK(mmnpz::to_string(mmnpz::io_mode::automatic) == "auto");
    CHECK_THROWS_WITH_AS(mmnpz::parse_io_mode("mmap"),
                         "<dataset>: io must be one of 'auto', 'read', 'map', not 'mmap'",
                         mmnpz::error);
    mmnpz::excerpt_options o;
    o.io = static_cast<mmnpz::io_mode>(7);
    CHECK_THROWS_WITH_AS(mmnpz::validate(o),
                         "<gather>: io must be one of 'auto', 'read', 'map', not 7", mmnpz::error);
    mmnpz::dataset_options d;
    d.io = static_cast<mmnpz::io_mode>(3);
    CHECK_THROWS_WITH_AS(mmnpz::validate(d),
                         "<dataset>: io must be one of 'auto', 'read', 'map', not 3", mmnpz::error);
  }

  TEST_CASE("reads and the mapping give the same excerpts in every pad mode, across member ends") {
    const std::vector<std::size_t> frames{5, 17, 1, 33, 8, 64, 2};
    for (const mmnpz::io_mode opened : {mmnpz::io_mode::automatic, mmnpz::io_mode::map}) {
      const std::string path = test::scratch("g_io_modes.npz");
      make("g_io_modes.npz", frames);
      mmnpz::dataset_options dopt;
      dopt.io = opened;
      const mmnpz::dataset ds(path, dopt);
      std::mt19937 rng(7);
      std::vector<std::int64_t> idx(40), start(40);
      for (int k = 0; k < 40; ++k) {
        idx[k] = rng() % frames.size();
        start[k] = rng() % (frames[idx[k]] + 1);  // up to the member's end: crossing it
      }
      for (const auto pad : {mmnpz::pad_mode::fill, mmnpz::pad_mode::wrap}) {
        const float fill = 2.5f;
        std::vector<std::byte> fb(4);
        std::memcpy(fb.data(), &fill, 4);
        const auto want = expected(ds, idx, start, 20, pad, pad == mmnpz::pad_mode::fill ? fill : 0);
        std::vector<std::byte> want_bytes(want.size() * 4);
        std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
        for (const auto io : {mmnpz::io_mode::read, mmnpz::io_mode::map, mmnpz::io_mode::automatic}) {
          CAPTURE(static_cast<int>(io));
          CAPTURE(static_cast<int>(pad));
          CHECK(gather_bytes(ds, idx, start, 20, pad, io, fb) == want_bytes);
        }
        // io=auto with either first touch, then again (granules seen, or mapped).
        for (const int map_first : {0, 1}) {
          const first_touch_seam seam(map_first);
          const mmnpz::dataset fresh(path, dopt);
          for (int pass = 0; pass < 3; ++pass) {
            CAPTURE(map_first);
            CAPTURE(pass);
            CHECK(gather_bytes(fresh, idx, start, 20, pad, mmnpz::io_mode::automatic, fb) ==
                  want_bytes);
          }
        }
      }
    }
  }

  TEST_CASE("reads and the mapping agree for every dtype and for several fields at their rates") {
    const std::string path = test::scratch("g_io_dtypes.npz");
    {
      mmnpz::writer w(path);
      for (int k = 0; k < 6; ++k) {
        const std::size_t n = 3 + 5 * k;
        std::vector<std::int8_t> a(n * 3);
        std::vector<std::uint16_t> b(n);
        std::vector<double> c(n * 2);
        std::vector<std::int64_t> d(n / 2 + 1);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int8_t>(k * 31 + i);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(k * 977 + i);
        for (std::size_t i = 0; i < c.size(); ++i) c[i] = k + 0.001 * i;
        for (std::size_t i = 0; i < d.size(); ++i) d[i] = -k * 100000 - static_cast<int>(i);
        const std::string s = std::to_string(k);
        w.write("a" + s, a.data(), {n, 3});
        w.write("b" + s, b.data(), {n});
        w.write("c" + s, c.data(), {n, 2});
        w.write("d" + s, d.data(), {n / 2 + 1});
      }
    }
    std::vector<mmnpz::dataset> sets;
    for (const char* sel : {"a*", "b*", "c*", "d*"}) {
      mmnpz::dataset_options o;
      o.select = sel;
      sets.emplace_back(path, o);
    }
    std::vector<std::int64_t> idx{5, 0, 3, 3, 1, 4, 2}, start(idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k) start[k] = (k * 7) % (3 + 5 * idx[k]);
    for (const auto pad : {mmnpz::pad_mode::fill, mmnpz::pad_mode::wrap}) {
      for (std::size_t d = 0; d < 3; ++d) {  // "d" items are shorter: a field at rate 1/2
        const mmnpz::dataset& ds = sets[d];
        CHECK(gather_bytes(ds, idx, start, 9, pad, mmnpz::io_mode::read) ==
              gather_bytes(ds, idx, start, 9, pad, mmnpz::io_mode::map));
      }
      // Fields "a" at rate 1 and "d" at rate 1/2, into one call.
      auto both = [&](mmnpz::io_mode io) {
        std::vector<std::int8_t> a(idx.size() * 8 * 3);
        std::vector<std::int64_t> d(idx.size() * 4);
        mmnpz::gather_field fa, fd;
        fa.source = &sets[0];
        fa.indices = idx.data();
        fa.out = reinterpret_cast<std::byte*>(a.data());
        fa.out_bytes = a.size();
        fd.source = &sets[3];
        fd.indices = idx.data();
        fd.rate_den = 2;
        fd.out = reinterpret_cast<std::byte*>(d.data());
        fd.out_bytes = d.size() * 8;
        mmnpz::excerpt_options o;
        o.length = 8;
        o.pad = pad;
        o.io = io;
        mmnpz::gather({fa, fd}, start.data(), idx.size(), o);
        return std::make_pair(a, d);
      };
      CHECK(both(mmnpz::io_mode::read) == both(mmnpz::io_mode::map));
    }
  }

  TEST_CASE("short reads, EINTR and pieces not in the page cache are retried until complete") {
    std::vector<std::size_t> frames;
    for (std::size_t k = 0; k < 50; ++k) frames.push_back(10 + (k * 7) % 40);
    const auto ds = make("g_io_flaky.npz", frames);
    std::vector<std::int64_t> idx(64), start(64);
    for (int k = 0; k < 64; ++k) {
      idx[k] = (k * 11) % 50;
      start[k] = k % 12;
    }
    const auto want = expected(ds, idx, start, 24, mmnpz::pad_mode::wrap);
    const pread_seam seam(&flaky_pread);
    flaky_calls = 0;
    for (std::size_t threads : {1, 2, 4}) {
      mmnpz::excerpt_options o;
      o.pad = mmnpz::pad_mode::wrap;
      o.io = mmnpz::io_mode::read;
      o.threads = threads;
      CHECK(run(ds, idx, start, 24, o) == want);
    }
    CHECK(flaky_calls > 3 * 64);  // the seam was used, and retried
  }

  TEST_CASE("an archive truncated after opening is an error naming member and offset") {
    const auto ds = make("g_io_truncated.npz", {10, 10, 10});
    const std::string path = ds.paths()[0];
    const std::uint64_t data = ds.array(1).file_offset();  // rows of 12 bytes
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(data + 53)) == 0);
    const std::vector<std::int64_t> idx{0, 1}, start{0, 2};
    mmnpz::excerpt_options o;
    o.length = 6;
    o.io = mmnpz::io_mode::read;
    std::vector<float> out(2 * 6 * bins);
    const std::string want = path + ": member 'clip_1.npy' at offset " + std::to_string(data + 24) +
                             ": read 29 of 72 bytes: the archive was truncated after it was opened";
    CHECK_THROWS_WITH_AS(mmnpz::gather(ds, idx.data(), start.data(), 2,
                                       reinterpret_cast<std::byte*>(out.data()), out.size() * 4, o),
                         want.c_str(), mmnpz::error);
    // The same from a background gather: wait() throws it.
    auto pending = [&] {
      mmnpz::gather_field f;
      f.source = &ds;
      f.indices = idx.data();
      f.out = reinterpret_cast<std::byte*>(out.data());
      f.out_bytes = out.size() * 4;
      return mmnpz::gather_async({f}, start.data(), 2, o);
    }();
    CHECK_THROWS_WITH_AS(pending.wait(), want.c_str(), mmnpz::error);
    // Item 0 lies before the cut: it is still read.
    const std::vector<std::int64_t> first{0};
    CHECK(run(ds, first, {4}, 6, o) == expected(ds, first, {4}, 6, mmnpz::pad_mode::none));
  }

  TEST_CASE("a forked child reads an archive truncated under it as an error, not SIGBUS") {
    const auto ds = make("g_io_truncated_fork.npz", {10, 10});
    const std::string path = ds.paths()[0];
    const std::uint64_t data = ds.array(1).file_offset();
    const int status = status_of_child([&] {
      int code = 3;
      try {
        if (::truncate(path.c_str(), static_cast<off_t>(data)) != 0) std::_Exit(4);
        mmnpz::excerpt_options o;
        o.threads = 2;
        o.io = mmnpz::io_mode::read;
        run(ds, {1, 0}, {0, 0}, 10, o);
      } catch (const mmnpz::error& e) {
        code = e.member() == "clip_1.npy" && e.offset() == data ? 0 : 5;
      }
      std::_Exit(code);
    });
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  TEST_CASE("a SIGBUS that a handler in front of mmnpz's raises again is not a copy's end") {
    // As Python's faulthandler, enabled during a gather: it catches the copy's SIGBUS, puts
    // back the handler it found (mmnpz's) and raises the signal again. That one is sent, not
    // a fault: it is ignored, the copy faults again, and then it is caught.
    const int status = status_of_child([] {
      const std::byte* m = mapping_of_a_cut_file();
      mmnpz::detail::guard_sigbus();
      static struct sigaction found {};
      static volatile int caught = 0;
      struct sigaction front {};
      front.sa_handler = [](int sig) {
        ++caught;
        ::sigaction(SIGBUS, &found, nullptr);
        ::raise(sig);
      };
      front.sa_flags = SA_NODEFER;
      sigemptyset(&front.sa_mask);
      ::sigaction(SIGBUS, &front, &found);
      std::byte out[4096];
      const bool copied = mmnpz::detail::copy_from_mapping(out, m, sizeof out);
      std::_Exit(!copied && caught == 1 ? 0 : 5);
    });
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  TEST_CASE("a SIGBUS outside a copy whose earlier handler returns ends the process") {
    // As Python's faulthandler, disabled after mmnpz's handler was put in front of it: its
    // handler returns, and the fault comes back. The second time, the default action.
    const int status = status_of_child([] {
      const std::byte* m = mapping_of_a_cut_file();
      mmnpz::detail::guard_sigbus();
      struct sigaction returns {};
      returns.sa_handler = [](int) {};
      sigemptyset(&returns.sa_mask);
      ::sigaction(SIGBUS, &returns, nullptr);
      mmnpz::detail::guard_sigbus();  // in front of it again, as a gather does
      volatile std::byte b = *(reinterpret_cast<const volatile std::byte*>(m) + 100);
      (void)b;
    });
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGBUS);
  }

  TEST_CASE("io=auto reads untouched granules, copies re-used ones through the mapping") {
    // Members of 240,000 bytes: several 64 KiB granules each.
    const auto ds = make("g_io_granules.npz", {20000, 20000, 20000});
    const pread_seam seam(&counting_pread);
    const first_touch_seam reads_first(0);
    const std::int64_t b = row_at_granule(ds, 1, 1000);  // a boundary inside member 1
    const std::int64_t g = static_cast<std::int64_t>(mmnpz::detail::granule_bytes / 12);
    REQUIRE(b + 2 * g + 10 < 20000);
    // A piece crossing the boundary is read: neither granule was touched.
    CHECK(auto_reads(ds, {1}, {b - 5}, 10) == 1);
    // Again: both granules were seen, so it is copied through the mapping, and so is any
    // other piece inside them.
    CHECK(auto_reads(ds, {1}, {b - 5}, 10) == 0);
    CHECK(auto_reads(ds, {1}, {b + 10}, 50) == 0);
    CHECK(auto_reads(ds, {1}, {b - 60}, 40) == 0);
    // A piece reaching into an untouched granule is read, once.
    CHECK(auto_reads(ds, {1}, {b + g - 3}, 10) == 1);
    CHECK(auto_reads(ds, {1}, {b + g - 3}, 10) == 0);
    // Several excerpts of a batch each go their own way: one read (untouched), one mapped.
    CHECK(auto_reads(ds, {1, 2}, {b + 20, 100}, 10) == 1);
    CHECK(auto_reads(ds, {1, 2}, {b + 20, 100}, 10) == 0);
  }

  TEST_CASE("io=auto reads both pieces of a wrapped excerpt, then copies them") {
    const auto ds = make("g_io_granules_wrap.npz", {20000, 20000, 20000});
    const pread_seam seam(&counting_pread);
    const first_touch_seam reads_first(0);
    // Rows [19990, 20000) and [0, 10) of member 1: 240 KB apart, in two granules.
    CHECK(auto_reads(ds, {1}, {19990}, 20, mmnpz::pad_mode::wrap) == 2);
    CHECK(auto_reads(ds, {1}, {19990}, 20, mmnpz::pad_mode::wrap) == 0);
    // Padding with a fill reads what the member has, once (member 2's end is far from
    // every piece above).
    CHECK(auto_reads(ds, {2}, {19995}, 20, mmnpz::pad_mode::fill) == 1);
    CHECK(auto_reads(ds, {2}, {19995}, 20, mmnpz::pad_mode::fill) == 0);
  }

  TEST_CASE("io=auto maps untouched granules when the mapping is the cheaper first touch") {
    const auto ds = make("g_io_granules_map.npz", {20000});
    const pread_seam seam(&counting_pread);
    const first_touch_seam maps_first(1);
    CHECK(auto_reads(ds, {0}, {3000}, 100) == 0);
    CHECK(auto_reads(ds, {0}, {3000}, 100) == 0);
    // io=read still reads what the mapping holds.
    mmnpz::excerpt_options o;
    o.io = mmnpz::io_mode::read;
    pread_calls = 0;
    CHECK(run(ds, {0}, {3000}, 100, o) == expected(ds, {0}, {3000}, 100, mmnpz::pad_mode::none));
    CHECK(pread_calls == 1);
  }

  TEST_CASE("a few pieces out of the page cache are read where they are; many make batches cold") {
    const auto ds = make("g_io_cold.npz", {20000, 20000, 20000});
    const pread_seam seam(&uncached_pread);
    std::vector<std::int64_t> starts(64);
    for (std::size_t k = 0; k < starts.size(); ++k) starts[k] = static_cast<std::int64_t>(k * 300);
    const std::vector<std::int64_t> zero(64, 0), one(64, 1), two(64, 2);
    {
      const first_touch_seam maps_first(1);
      REQUIRE(auto_reads(ds, zero, starts, 10) == 0);  // member 0 is mapped
    }
    const first_touch_seam reads_first(0);
    // Two of the batch's pieces out of memory (a batch of 64 turns cold at its third):
    // read where they are. Member 0 is then still copied through the mapping.
    uncached_left = 2;
    auto_reads(ds, two, starts, 10);
    CHECK(uncached_left <= 0);
    uncached_left = 0;
    CHECK(auto_reads(ds, zero, starts, 10) == 0);
    // Every piece out of memory: that batch and the next ones are cold, read (the mapping
    // is left alone while pages arrive), member 0's mapped pieces too.
    uncached_left = 1000;
    auto_reads(ds, one, starts, 10);
    uncached_left = 0;
    CHECK(auto_reads(ds, zero, starts, 10) == 64);
  }

  TEST_CASE("an archive evicted under a gather is read while another one is mapped") {
    // Two archives of one dataset, items 0 and 1, each copied through the mapping once.
    std::vector<std::string> paths;
    for (std::size_t k = 0; k < 2; ++k) {
      paths.push_back(test::scratch("g_io_probe_" + std::to_string(k) + ".npz"));
      mmnpz::writer w(paths.back());
      std::vector<float> c(20000 * bins);
      for (std::size_t r = 0; r < 20000; ++r) {
        for (std::size_t b = 0; b < bins; ++b) c[r * bins + b] = value(k, r, b);
      }
      w.write("clip_" + std::to_string(k), c.data(), {20000, bins});
    }
    const mmnpz::dataset ds(paths);
    REQUIRE(ds.size() == 2);
    std::vector<std::int64_t> idx, starts;
    for (std::int64_t k = 0; k < 128; ++k) {
      idx.push_back(k / 64);
      starts.push_back(k % 64 * 300);
    }
    const pread_seam seam(&offset_noting_pread);
    {
      const first_touch_seam maps_first(1);
      REQUIRE(auto_reads(ds, idx, starts, 10) == 0);
    }
    // The archive mapped higher up is evicted: its pieces come after the other's in the
    // gather's order, so the chunks that start first probe the archive still in memory.
    const std::size_t gone = ds.array(1).data() > ds.array(0).data() ? 1 : 0;
    const mmnpz::array_view v = ds.array(gone);
    const long page = ::sysconf(_SC_PAGESIZE);
    auto* begin = reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(v.data()) /
                                               page * page);
    const std::size_t span = static_cast<std::size_t>(v.data() + v.nbytes() - begin);
    REQUIRE(::madvise(begin, span, MADV_DONTNEED) == 0);  // the page tables let go of them
    {
      const int fd = ::open(paths[gone].c_str(), O_RDONLY);
      REQUIRE(fd >= 0);
      ::fdatasync(fd);  // dirty pages are not dropped
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    if (mmnpz::detail::resident(begin, 4096)) {
      MESSAGE("the file system kept the pages: nothing to check");
      return;
    }
    mmnpz::excerpt_options o;
    o.threads = 2;
    o.io = mmnpz::io_mode::automatic;
    offsets_read.clear();
    offsets_of_fd = mmnpz::state_of(ds).fds[gone];
    CHECK(run(ds, idx, starts, 10, o) == expected(ds, idx, starts, 10, mmnpz::pad_mode::none));
    offsets_of_fd = -1;
    // Every piece of the evicted archive was read, none copied through the mapping.
    int unread = 0;
    for (std::size_t k = 0; k < idx.size(); ++k) {
      if (idx[k] != static_cast<std::int64_t>(gone)) continue;
      const std::uint64_t at = mmnpz::state_of(ds).items[gone].offset + starts[k] * 12;
      unread += offsets_read.count(static_cast<off_t>(at)) == 0;
    }
    CHECK(unread == 0);
  }

  TEST_CASE("a forked child reads first what its parent had copied through the mapping") {
    const auto ds = make("g_io_granules_fork.npz", {20000});
    const pread_seam seam(&counting_pread);
    const first_touch_seam reads_first(0);
    CHECK(auto_reads(ds, {0}, {500}, 100) == 1);
    CHECK(auto_reads(ds, {0}, {500}, 100) == 0);  // mapped in the parent
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child's page tables hold none of the file: its granules start untouched.
      const bool first_read = auto_reads(ds, {0}, {500}, 100) == 1;
      const bool then_mapped = auto_reads(ds, {0}, {500}, 100) == 0;
      std::_Exit(first_read && then_mapped ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(auto_reads(ds, {0}, {500}, 100) == 0);  // the parent's stay mapped
  }

  TEST_CASE("the first-touch choice alternates while it learns, then takes the cheaper way") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    costs c;
    std::vector<bool> warmup;
    for (std::uint32_t k = 0; k < 2 * costs::warmup; ++k) {
      const bool map = c.map_now(0);
      warmup.push_back(map);
      c.record(map ? way::fault : way::read, 4096, map ? 2000 : 8000);  // 500 and 2000 ns per KiB
    }
    for (std::size_t k = 0; k < warmup.size(); ++k) CHECK(warmup[k] == (k % 2 == 1));
    CHECK(c.cost(way::fault) == 500);
    CHECK(c.cost(way::read) == 2000);
    int maps = 0;
    for (std::uint32_t k = 0; k < 4 * costs::explore_every; ++k) maps += c.map_now(0);
    CHECK(maps == 4 * (costs::explore_every - 1));  // one in explore_every reads, to follow
    // Reads got cheaper: an outlier counts as 4x the mean of the 8 samples so far, ...
    c.record(way::read, 1024, 1000000);
    CHECK(c.cost(way::read) == (8 * 2000 + 8000) / 9);
    // ... and enough cheap samples turn the choice: first touches are all read (faults of
    // re-used granules keep sampling the mapping's cost).
    for (int k = 0; k < 100; ++k) c.record(way::read, 1024, 100);
    CHECK(c.cost(way::read) < c.cost(way::fault));
    int reads = 0;
    for (std::uint32_t k = 0; k < 4 * costs::explore_every; ++k) reads += !c.map_now(0);
    CHECK(reads == 4 * costs::explore_every);
  }

  TEST_CASE("a cost is the median of its first samples, then follows about the last 64") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    costs c;
    for (std::uint64_t ns : {1000, 3000, 2000}) c.record(way::read, 1024, ns);
    CHECK(c.cost(way::read) == 2000);
    // A copy preempted among the first: a timeslice of 3 ms is left out, not averaged in.
    c.record(way::read, 1024, 3000000);
    CHECK(c.cost(way::read) == 2000);
    for (std::uint32_t k = 4; k < costs::averaged; ++k) c.record(way::read, 1024, 2000);
    CHECK(c.cost(way::read) == 2000);
    // One sample moves it by a 64th of the difference (at most 3x the cost: 4x counts).
    c.record(way::read, 1024, 1000000);
    CHECK(c.cost(way::read) == (2000 * 63 + 8000) / 64);
    for (int k = 0; k < 1000; ++k) c.record(way::read, 2048, 1000);  // 500 ns per KiB
    CHECK(c.cost(way::read) >= 500);
    CHECK(c.cost(way::read) < 520);
    CHECK(c.cost(way::fault) == 0);  // the other ways have no sample yet
    CHECK(c.cost(way::copy) == 0);
  }

  TEST_CASE("a piece's route counts the fewest reads of its granules that are not mapped") {
    using map = mmnpz::detail::granule_map;
    map g;
    g.cover(4 * mmnpz::detail::granule_bytes);
    alignas(65536) static std::byte file[4 * 65536];
    static_assert(mmnpz::detail::granule_bytes == 65536);
    const std::byte* first = file + 100;           // in granule 0
    const std::byte* across = file + 65536 - 100;  // granules 0 and 1
    std::uint32_t reads = 99;
    CHECK(g.route_of(file, first, 50, &reads) == map::route::read);
    CHECK(reads == 0);
    g.mark_read(file, first, 50);
    g.mark_read(file, first, 50);
    CHECK(g.route_of(file, first, 50, &reads) == map::route::promote);
    CHECK(reads == 2);
    CHECK(g.route_of(file, across, 200, &reads) == map::route::read);  // granule 1 unseen
    g.mark_read(file, across, 200);  // granule 0 read 3 times, granule 1 once
    CHECK(g.route_of(file, across, 200, &reads) == map::route::promote);
    CHECK(reads == 1);
    g.mark_mapped(file, file + 65536, 10);  // granule 1 mapped: granule 0's 3 reads count
    CHECK(g.route_of(file, across, 200, &reads) == map::route::promote);
    CHECK(reads == 3);
    g.mark_mapped(file, first, 50);
    CHECK(g.route_of(file, across, 200, &reads) == map::route::map);
    CHECK(reads == 0);
  }

  TEST_CASE("granules whose pages the page tables all map are found and marked mapped") {
    using map = mmnpz::detail::granule_map;
    constexpr std::size_t region = anonymous_region::size, g = mmnpz::detail::granule_bytes;
    const anonymous_region memory;
    std::byte* base = memory.base;
    map m;
    m.cover(region);
    CHECK(m.mark_present(base, base + 100) == 0);  // nothing mapped yet
    for (std::size_t k = 0; k < 3 * g; k += 4096) base[k] = std::byte{1};  // granules 0-2
    for (std::size_t k = 5 * g; k < 6 * g - 4096; k += 4096) base[k] = std::byte{1};  // 15/16
    CHECK(m.route_of(base, base + g, 10) == map::route::read);
    CHECK(m.mark_present(base, base + 4 * g) == 3);
    CHECK(m.route_of(base, base + g, 10) == map::route::map);
    CHECK(m.route_of(base, base + 2 * g + 100, g) == map::route::read);  // granule 3: no
    CHECK(m.route_of(base, base + 5 * g, 10) == map::route::read);  // one page missing
    CHECK(m.mark_present(base, base + 100) == 0);  // found before
    // A map that begins after the region's start marks only its own granules.
    map later;
    later.cover(region);
    CHECK(later.mark_present(base + 2 * g, base + 2 * g) == 1);
    CHECK(later.route_of(base + 2 * g, base + 2 * g, 10) == map::route::map);
  }

  TEST_CASE("a fault that mapped many granules is recorded at a share of its cost for each") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    constexpr std::size_t region = anonymous_region::size, g = mmnpz::detail::granule_bytes;
    const anonymous_region memory;
    std::byte* base = memory.base;
    // Granule 0 alone mapped: the fault bought one granule, its whole cost is recorded.
    base[0] = std::byte{1};
    mmnpz::detail::granule_map narrow;
    narrow.cover(region);
    costs one;
    learn(one, 1000, 2500);
    one.record_fault(narrow, base, base + 100, 1024, 8000);
    CHECK(one.cost(way::fault) == (8 * 2500 + 8000) / 9);
    // All 32 granules of the region mapped: each bought at a 32nd of the cost.
    for (std::size_t k = 0; k < region; k += 4096) base[k] = std::byte{1};
    mmnpz::detail::granule_map wide;
    wide.cover(region);
    costs all;
    learn(all, 1000, 2500);
    all.record_fault(wide, base, base + 100, 1024, 32 * 1000);
    CHECK(all.cost(way::fault) == (8 * 2500 + 1000) / 9);
    CHECK(wide.route_of(base, base + 31 * g, 10) == mmnpz::detail::granule_map::route::map);
  }

  TEST_CASE("faults are looked at first, then while they map more than their granules") {
    using costs = mmnpz::detail::first_touch_costs;
    costs c;
    int looks = 0;
    for (std::uint32_t k = 0; k < costs::probe_first; ++k) {
      looks += c.probe_now();
      c.probed(false);
    }
    CHECK(looks == static_cast<int>(costs::probe_first));
    looks = 0;
    for (std::uint32_t k = 0; k < 4 * costs::probe_every; ++k) looks += c.probe_now();
    CHECK(looks == 4);  // one in probe_every while faults map only their own granules
    c.probed(true);
    looks = 0;
    for (int k = 0; k < 4; ++k) {
      looks += c.probe_now();
      c.probed(false);
    }
    CHECK(looks == 4);  // a wide fault: every fault is looked at for a while
  }

  TEST_CASE("a granule is read until its reads would cost more than a fault, then faulted in") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    costs c;
    learn(c, 1000, 2500);  // a fault costs 2.5 reads
    REQUIRE(c.cost(way::fault) == 2500);
    REQUIRE(c.cost(way::read) == 1000);
    CHECK(!c.map_now(0));  // a first touch reads: 1,000 < 2,500
    CHECK(!c.map_now(1));  // read once before: a second read brings the reads to 2,000
    CHECK(c.map_now(2));   // a third would bring them to 3,000: the fault is cheaper
    CHECK(c.map_now(200));
    // While learning, re-used granules are faulted in (that samples the fault's cost).
    costs learning;
    CHECK(learning.map_now(1));
  }

  TEST_CASE("what a copy of mapped pages costs is left out of both ways' costs") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    costs c;
    learn(c, 1000, 2500, 500);
    REQUIRE(c.cost(way::copy) == 500);
    // Reads cost 500 more than a copy, the fault 2,000 more: bought at the fifth touch.
    CHECK(!c.map_now(0));
    CHECK(!c.map_now(3));  // four reads' 2,000 beyond copies: as much as the fault's
    CHECK(c.map_now(4));
    // A copy timed above a read's cost counts as a read's (reads never cost less): the
    // median of the copy's three samples so far.
    c.record(way::copy, 1024, 100000);
    c.record(way::copy, 1024, 100000);
    REQUIRE(c.cost(way::copy) == 100000);
    CHECK(!c.map_now(200));
  }

  TEST_CASE("a fault preempted among the first eight does not turn first touches to reads") {
    using costs = mmnpz::detail::first_touch_costs;
    using way = costs::way;
    costs c;
    // Faults cost 500 ns per KiB, reads 2,000; the very first fault was preempted for a
    // timeslice (3 ms for its KiB), with no average yet to bound it by: a mean of the eight
    // would price faults above 300,000.
    for (std::uint32_t k = 0; k < 2 * costs::warmup; ++k) {
      const bool map = c.map_now(0);
      c.record(map ? way::fault : way::read, 1024, !map ? 2000 : k == 1 ? 3000000 : 500);
    }
    CHECK(c.cost(way::fault) == 500);
    int maps = 0;
    for (std::uint32_t k = 0; k < costs::explore_every; ++k) maps += c.map_now(0);
    CHECK(maps == static_cast<int>(costs::explore_every) - 1);
  }

  TEST_CASE("granules are faulted in at first touch once their re-use repays the fault") {
    using costs = mmnpz::detail::first_touch_costs;
    costs c;
    learn(c, 1000, 2500, 500);
    // The fault costs 1,500 more than a read; each later use saves 500: 3 uses repay it.
    c.count_touches(100, 300);
    CHECK(!c.map_now(0));
    CHECK(!c.map_now(1));
    c.count_touches(0, 1);  // touches came back more than 3 times per granule
    int maps = 0;
    for (std::uint32_t k = 0; k < 4 * costs::explore_every; ++k) maps += c.map_now(0);
    CHECK(maps == 4 * (costs::explore_every - 1));  // one in explore_every still reads
    CHECK(c.map_now(1));
    // Touches of new granules bring the re-use down again.
    c.count_touches(1000, 0);
    CHECK(!c.map_now(0));
  }
}
