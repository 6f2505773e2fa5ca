#include <dirent.h>
#include <doctest/doctest.h>
#include <limits.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "data/dataset_state.hpp"
#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

// Writes `count` float32 members "clip_<first+k>" of (frames(k), 3) rows valued 1000*clip+row.
void write_clips(const std::string& path, std::size_t first, std::size_t count,
                 std::size_t base_frames = 5) {
  mmnpz::writer w(path, {mmnpz::open_mode::truncate});
  for (std::size_t k = first; k < first + count; ++k) {
    const std::size_t frames = base_frames + k % 4;
    std::vector<float> v(frames * 3);
    for (std::size_t r = 0; r < frames; ++r)
      for (std::size_t c = 0; c < 3; ++c) v[r * 3 + c] = 1000.0f * k + r;
    w.write("clip_" + std::to_string(k), v.data(), {frames, 3});
  }
}

std::string shard_path(const std::string& stem, std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.npz", i, n);
  return stem + buf;
}

// How many of this process's descriptors are open on one of `paths` (by /proc/self/fd).
std::size_t descriptors_on(const std::vector<std::string>& paths) {
  std::vector<std::string> real;
  for (const std::string& p : paths) {
    char buf[PATH_MAX];
    REQUIRE(::realpath(p.c_str(), buf) != nullptr);
    real.emplace_back(buf);
  }
  std::size_t n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (const dirent* e = ::readdir(dir)) {
    char target[PATH_MAX];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = ::readlink(link.c_str(), target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    for (const std::string& r : real) n += r == target;
  }
  ::closedir(dir);
  return n;
}

}  // namespace

TEST_SUITE("dataset") {
  TEST_CASE("opening many items writes its tables in huge pages where the kernel has them, and "
            "every item keeps its name and length") {
    // The readers' tables, the items being decoded, the items (48 bytes each), their lengths,
    // name ends and names: 22,466 faults in 4 KiB pages at 300,000 items, 8,159 in huge pages.
    const std::string path = test::scratch("many_items.npz");
    constexpr std::size_t n = 300'000;
    {
      mmnpz::writer w(path);
      std::uint8_t v[3] = {};
      for (std::size_t k = 0; k < n; ++k) {
        v[0] = static_cast<std::uint8_t>(k);
        w.write("m" + std::to_string(k), v, {k % 3 + 1});
      }
    }
    ::malloc_trim(0);  // the writer's freed memory goes back: the dataset's is fresh
    const long before = test::minor_faults();
    mmnpz::dataset_options one_thread;
    one_thread.threads = 1;  // no pool thread's first stack pages in the count
    const mmnpz::dataset ds(path, one_thread);
    const long faults = test::minor_faults() - before;
    CAPTURE(faults);
    REQUIRE(ds.size() == n);
    for (const std::size_t k : {std::size_t{0}, std::size_t{1}, n / 2, n - 1}) {
      CHECK(ds.lengths()[k] == k % 3 + 1);
      CHECK(ds.name(k) == "m" + std::to_string(k));
    }
    if (test::huge_pages_on_advice() && !test::sanitized) CHECK(faults < 10'000);
  }

  TEST_CASE("a dataset holds one descriptor per archive, its reader's, and gathers through it") {
    const std::string stem = test::scratch("descriptors");
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < 3; ++i) {
      paths.push_back(shard_path(stem, i, 3));
      write_clips(paths.back(), 4 * i, 4);
    }
    CHECK(descriptors_on(paths) == 0);
    {
      const mmnpz::dataset ds(stem + "@3.npz");
      CHECK(descriptors_on(paths) == 3);  // 500 shards must not need 1,000 descriptors
      mmnpz::excerpt_options o;
      o.length = 2;
      o.io = mmnpz::io_mode::read;
      const std::int64_t indices[] = {1, 6, 11};
      const std::int64_t starts[] = {0, 1, 2};
      std::vector<float> out(3 * 2 * 3);
      mmnpz::gather(ds, indices, starts, 3, reinterpret_cast<std::byte*>(out.data()),
                    out.size() * sizeof(float), o);
      CHECK(out[0] == 1000.0f * 1);
      CHECK(out[6] == 1000.0f * 6 + 1);
      CHECK(out[12] == 1000.0f * 11 + 2);
      CHECK(descriptors_on(paths) == 3);
    }
    CHECK(descriptors_on(paths) == 0);
  }

  TEST_CASE("a shard spec names NAME-0000i-of-0000N files and patterns expand sorted") {
    CHECK(mmnpz::expand_paths({"d/train@3.npz"}) ==
          std::vector<std::string>{"d/train-00000-of-00003.npz", "d/train-00001-of-00003.npz",
                                   "d/train-00002-of-00003.npz"});
    CHECK(mmnpz::expand_paths({"a.npz", "b@1"}) ==
          std::vector<std::string>{"a.npz", "b-00000-of-00001"});
    CHECK(mmnpz::expand_paths({"x@y/a.npz"}) == std::vector<std::string>{"x@y/a.npz"});
    const std::string literal = test::scratch("odd@2[1].npz");  // exists: taken as it is
    write_clips(literal, 0, 1);
    CHECK(mmnpz::expand_paths({literal}) == std::vector<std::string>{literal});
    const std::string stem = test::scratch("globbed");
    write_clips(stem + "_b.npz", 0, 1);
    write_clips(stem + "_a.npz", 0, 1);
    CHECK(mmnpz::expand_paths({stem + "_*.npz"}) ==
          std::vector<std::string>{stem + "_a.npz", stem + "_b.npz"});
    try {
      mmnpz::expand_paths({stem + "_nothing*.npz"});
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      CHECK(std::string(e.what()) ==
            "cannot find any file matching '" + stem + "_nothing*.npz': No such file or directory");
    }
  }

  TEST_CASE("items of several shards are numbered concatenated or interleaved") {
    const std::string stem = test::scratch("shards");
    write_clips(shard_path(stem, 0, 3), 0, 4);
    write_clips(shard_path(stem, 1, 3), 4, 2);
    write_clips(shard_path(stem, 2, 3), 6, 3);
    const mmnpz::dataset cat(stem + "@3.npz");
    REQUIRE(cat.size() == 9);
    CHECK(cat.shards() == 3);
    for (std::size_t i = 0; i < 9; ++i) {
      CHECK(cat.name(i) == "clip_" + std::to_string(i));
      CHECK(cat.length(i) == 5 + i % 4);
      CHECK(cat.lengths()[i] == 5 + i % 4);
      CHECK(cat.index_of("clip_" + std::to_string(i)) == i);
      CHECK(cat.index_of("clip_" + std::to_string(i) + ".npy") == i);
      CHECK(cat.array(i).data_as<float>()[3] == 1000.0f * i + 1);
    }
    CHECK(cat.layouts().size() == 1);
    CHECK(cat.layout(0).trailing == std::vector<std::uint64_t>{3});
    CHECK(cat.layout(0).row_bytes == 12);
    CHECK_FALSE(cat.find("clip_9"));
    CHECK_THROWS_WITH_AS(cat.index_of("nope"), "<dataset>: no item named 'nope'", mmnpz::error);
    CHECK_THROWS_WITH_AS(
        cat.length(9), "<dataset>: index 9 is out of range for a dataset of 9 items", mmnpz::error);

    mmnpz::dataset_options o;
    o.order = mmnpz::shard_order::interleave;
    const mmnpz::dataset inter(stem + "@3.npz", o);
    std::vector<std::string> names;
    for (std::size_t i = 0; i < inter.size(); ++i) names.emplace_back(inter.name(i));
    CHECK(names == std::vector<std::string>{"clip_0", "clip_4", "clip_6", "clip_1", "clip_5",
                                            "clip_7", "clip_2", "clip_8", "clip_3"});
    CHECK(inter.shard_of(1) == 1);
    CHECK(inter.member_of(1) == 0);
  }

  TEST_CASE("select keeps matching members and other members must be arrays with an axis") {
    const std::string path = test::scratch("mixed.npz");
    {
      mmnpz::writer w(path);
      const float spec[6] = {1, 2, 3, 4, 5, 6};
      const std::int32_t labels[3] = {7, 8, 9};
      const double rate = 16000;
      w.write("a_spec", spec, {2, 3});
      w.write("a_labels", labels, {3});
      w.write("rate", &rate, {});
      w.write_bytes("readme.txt", "hi", 2);
    }
    mmnpz::dataset_options o;
    o.select = "*_spec";
    const mmnpz::dataset specs(path, o);
    REQUIRE(specs.size() == 1);
    CHECK(specs.name(0) == "a_spec");
    o.select = "a_*";
    const mmnpz::dataset both(path, o);
    CHECK(both.size() == 2);
    CHECK(both.layouts().size() == 2);
    CHECK(both.layout(1).type.str() == "<i4");
    CHECK(both.layout(1).trailing.empty());
    CHECK(both.layout(1).row_bytes == 4);
    o.select = "r*";
    CHECK_THROWS_WITH_AS(mmnpz::dataset(path, o),
                         (path + ": member 'rate.npy': is a 0-d array; dataset items need a "
                                 "first axis (choose members with select)")
                             .c_str(),
                         mmnpz::error);
    o.select = "readme*";
    try {
      mmnpz::dataset d(path, o);
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::not_an_array);
      CHECK(e.member() == "readme.txt");
    }
  }

  TEST_CASE("without select, members that are not .npy files are no items") {
    const std::string path = test::scratch("sidecars.npz");
    {
      mmnpz::writer w(path);
      const float clip[4] = {1, 2, 3, 4};
      w.write("clip", clip, {2, 2});
      w.write_bytes("clip.json", "{}", 2);
      w.write("clip2", clip, {4});
    }
    const mmnpz::dataset d(path);
    REQUIRE(d.size() == 2);
    CHECK(d.name(0) == "clip");
    CHECK(d.name(1) == "clip2");
    mmnpz::dataset_options o;
    o.select = "clip*";  // a select chooses the sidecar too
    CHECK_THROWS_AS(mmnpz::dataset(path, o), mmnpz::error);
  }

  TEST_CASE("a select that matches no member of any archive is refused, not an empty dataset") {
    const std::string a = test::scratch("select_a.npz"), b = test::scratch("select_b.npz");
    write_clips(a, 0, 2);
    write_clips(b, 2, 1);
    mmnpz::dataset_options o;
    o.select = "clip_*";
    CHECK(mmnpz::dataset(std::vector<std::string>{a, b}, o).size() == 3);
    o.select = "clip_2";  // in one archive only: fine
    CHECK(mmnpz::dataset(std::vector<std::string>{a, b}, o).size() == 1);
    o.select = "clips_*";
    CHECK_THROWS_WITH_AS(mmnpz::dataset(std::vector<std::string>{a, b}, o),
                         "<dataset>: select 'clips_*' matches no member of any of the 2 "
                         "archives (names are matched without \".npy\")",
                         mmnpz::error);
    o.select = "clip_0.npy";
    CHECK_THROWS_WITH_AS(mmnpz::dataset(a, o),
                         (a + ": select 'clip_0.npy' matches no member of the archive (names "
                              "are matched without \".npy\")").c_str(),
                         mmnpz::error);
  }

  TEST_CASE("a folder is every .npz inside it, sorted") {
    const std::string folder = test::scratch("folder[1]");
    ::mkdir(folder.c_str(), 0777);
    write_clips(folder + "/b.npz", 0, 2);
    write_clips(folder + "/a.npz", 2, 1);
    CHECK(mmnpz::expand_paths({folder}) ==
          std::vector<std::string>{folder + "/a.npz", folder + "/b.npz"});
    CHECK(mmnpz::expand_paths({folder + "/"}) ==
          std::vector<std::string>{folder + "/a.npz", folder + "/b.npz"});
    const mmnpz::dataset d(folder);
    CHECK(d.size() == 3);
    CHECK(d.name(0) == "clip_2");
    const std::string empty = test::scratch("empty_folder");
    ::mkdir(empty.c_str(), 0777);
    CHECK_THROWS_AS(mmnpz::expand_paths({empty}), mmnpz::error);
  }

  TEST_CASE("a missing shard is an error naming it") {
    const std::string stem = test::scratch("gap");
    write_clips(shard_path(stem, 0, 2), 0, 1);
    CHECK_THROWS_WITH_AS(
        mmnpz::dataset(stem + "@2.npz"),
        ("cannot open '" + shard_path(stem, 1, 2) + "': No such file or directory").c_str(),
        mmnpz::error);
  }

  TEST_CASE("an archive cut after it was opened: opening the dataset names member and offset") {
    const std::string path = test::scratch("cut_dataset.npz");
    write_clips(path, 0, 600);  // more than one part of headers to read
    std::uint64_t lho = 0;
    {
      mmnpz::reader r(path);
      lho = r.member(*r.find("clip_400")).local_header_offset;
    }
    mmnpz::detail::after_archives_open = [&] {
      REQUIRE(::truncate(path.c_str(), static_cast<off_t>(lho + 7)) == 0);
    };
    CHECK_THROWS_WITH_AS(mmnpz::dataset{path},
                         (path + ": member 'clip_400.npy' at offset " + std::to_string(lho) +
                          ": the archive was truncated after it was opened: the file now ends "
                          "at byte " +
                          std::to_string(lho + 7))
                             .c_str(),
                         mmnpz::error);
    mmnpz::detail::after_archives_open = nullptr;
  }

  TEST_CASE("a dataset reads every item's headers at opening, in parts, as the reader would") {
    const std::string path = test::scratch("many_items.npz");
    write_clips(path, 0, 700);
    mmnpz::dataset d(path);
    mmnpz::reader r(path);
    REQUIRE(d.size() == 700);
    for (std::size_t i = 0; i < d.size(); i += 7) {
      const mmnpz::array_view v = d.array(i);
      const mmnpz::array_view w = r.array(d.name(i));
      CHECK(v.shape() == w.shape());
      CHECK(v.file_offset() == w.file_offset());
      CHECK(std::memcmp(v.data(), w.data(), v.nbytes()) == 0);
    }
  }

  TEST_CASE("opening keeps items, not decoded headers: array(i) reads an item's headers again") {
    // 700 items in three parts of headers, their layouts (3 or 4 columns, <f4 or <i2) differing
    // within and between parts: each item keeps its own.
    const std::string path = test::scratch("items_only.npz");
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      for (std::size_t k = 0; k < 700; ++k) {
        const std::uint64_t cols = k % 3 == 0 ? 4 : 3;
        const std::uint64_t frames = 2 + k % 5;
        if (k % 7 == 0) {
          std::vector<std::int16_t> v(frames * cols, static_cast<std::int16_t>(k));
          w.write("clip_" + std::to_string(k), v.data(), {frames, cols});
        } else {
          std::vector<float> v(frames * cols, static_cast<float>(k));
          w.write("clip_" + std::to_string(k), v.data(), {frames, cols});
        }
      }
    }
    mmnpz::dataset d(path);
    REQUIRE(d.size() == 700);
    CHECK(d.layouts().size() == 4);
    for (std::size_t i = 0; i < d.size(); ++i) {
      const std::size_t k = std::stoul(std::string(d.name(i)).substr(5));
      CHECK(d.length(i) == 2 + k % 5);
      CHECK(d.layout(i).trailing == std::vector<std::uint64_t>{k % 3 == 0 ? 4u : 3u});
      CHECK(d.layout(i).type.str() == (k % 7 == 0 ? "<i2" : "<f4"));
    }
    // Nothing of item 500 was kept but its item: after a cut before it, its array() reads
    // its headers again and says so, while gather-side figures stay known.
    const std::size_t i500 = *d.find("clip_500");
    const std::uint64_t lho = d.shard(0).member(d.member_of(i500)).local_header_offset;
    const std::uint64_t data_offset = d.array(i500 - 1).file_offset();  // decoded now: before
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(lho)) == 0);
    CHECK(d.length(i500) == 2 + 500 % 5);
    CHECK(d.array(i500 - 1).file_offset() == data_offset);  // the reader's cache
    CHECK_THROWS_WITH_AS(d.array(i500),
                         (path + ": member 'clip_500.npy' at offset " + std::to_string(lho) +
                          ": the archive was truncated after it was opened: the file now ends "
                          "at byte " + std::to_string(lho))
                             .c_str(),
                         mmnpz::error);
  }

  TEST_CASE("opening many shards from many threads gives the same items") {
    const std::string stem = test::scratch("many");
    for (std::size_t s = 0; s < 40; ++s) write_clips(shard_path(stem, s, 40), s * 25, 25);
    mmnpz::dataset_options one;
    one.threads = 1;
    const mmnpz::dataset a(stem + "@40.npz", one);
    const mmnpz::dataset b(stem + "@40.npz");
    REQUIRE(a.size() == 1000);
    CHECK(a.lengths() == b.lengths());
    for (std::size_t i = 0; i < 1000; ++i) CHECK(b.name(i) == "clip_" + std::to_string(i));
  }
}
