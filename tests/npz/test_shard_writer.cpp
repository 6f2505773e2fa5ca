#include <doctest/doctest.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "mmnpz/shard_writer.hpp"
#include "test_support.hpp"

namespace {

// A fresh, empty folder in the tests' scratch folder.
std::string scratch_dir(const std::string& name) {
  const std::string dir = test::scratch(name);
  test::run("rm -rf '" + dir + "' && mkdir -p '" + dir + "'");
  return dir;
}

// The files in `dir` matching `pattern`, sorted.
std::vector<std::string> files(const std::string& dir, const std::string& pattern = "*") {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob((dir + "/" + pattern).c_str(), 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<std::uint64_t>(st.st_size);
}

// Item k: k + 1 int32 values k*1000, k*1000 + 1, ...
std::vector<std::int32_t> item(std::size_t k) {
  std::vector<std::int32_t> v(k + 1);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>(k * 1000 + i);
  return v;
}

std::vector<std::size_t> members_per_shard(const std::vector<std::string>& paths) {
  std::vector<std::size_t> out;
  for (const auto& p : paths) out.push_back(mmnpz::reader(p).size());
  return out;
}

}  // namespace

TEST_SUITE("shard_writer") {
  TEST_CASE("max_items splits the items into shards that the shard spec opens in order") {
    const std::string dir = scratch_dir("shards_items");
    mmnpz::shard_writer_options o;
    o.max_items = 3;
    mmnpz::shard_writer w(dir + "/train.npz", o);
    for (std::size_t k = 0; k < 7; ++k)
      w.write("clip_" + std::to_string(k), item(k).data(), {k + 1});
    CHECK(w.shards() == 3);
    CHECK(w.items_written() == 7);
    CHECK(w.paths().empty());
    CHECK(w.spec().empty());
    w.close();
    const std::vector<std::string> expected = {dir + "/train-00000-of-00003.npz",
                                               dir + "/train-00001-of-00003.npz",
                                               dir + "/train-00002-of-00003.npz"};
    CHECK(w.paths() == expected);
    CHECK(files(dir) == expected);  // no .partial file is left
    CHECK(w.spec() == dir + "/train@3.npz");
    CHECK(members_per_shard(w.paths()) == std::vector<std::size_t>{3, 3, 1});

    mmnpz::dataset d(w.spec());
    REQUIRE(d.size() == 7);
    CHECK(d.paths() == expected);
    for (std::size_t k = 0; k < 7; ++k) {
      CAPTURE(k);
      CHECK(d.name(k) == "clip_" + std::to_string(k));
      const mmnpz::array_view v = d.array(k);
      const auto want = item(k);
      REQUIRE(v.shape() == std::vector<std::uint64_t>{k + 1});
      CHECK(std::equal(want.begin(), want.end(), v.data_as<std::int32_t>()));
    }
  }

  TEST_CASE("shards have a .partial name while being written, and each is closed before the next") {
    const std::string dir = scratch_dir("shards_partial");
    mmnpz::shard_writer_options o;
    o.max_items = 2;
    mmnpz::shard_writer w(dir + "/train.npz", o);
    const auto a = item(4);
    CHECK(files(dir) == std::vector<std::string>{dir + "/train-00000.npz.partial"});
    w.write("a", a.data(), {5});
    w.write("b", a.data(), {5});
    w.write("c", a.data(), {5});
    CHECK(files(dir) == std::vector<std::string>{dir + "/train-00000.npz.partial",
                                                 dir + "/train-00001.npz.partial"});
    CHECK(files(dir, "train-*-of-*.npz").empty());
    // The first shard is complete: its central directory was written when the second began.
    mmnpz::reader first(dir + "/train-00000.npz.partial");
    CHECK(first.names() == std::vector<std::string>{"a", "b"});
    w.close();
    CHECK(files(dir) == std::vector<std::string>{dir + "/train-00000-of-00002.npz",
                                                 dir + "/train-00001-of-00002.npz"});
  }

  TEST_CASE("a shard's file stays within max_bytes; an item larger alone gets its own shard") {
    const std::string dir = scratch_dir("shards_bytes");
    mmnpz::shard_writer_options o;
    o.max_bytes = 4096;
    mmnpz::shard_writer w(dir + "/train.npz", o);
    const std::vector<std::uint8_t> small(1000, 7), big(10000, 9);
    for (int k = 0; k < 5; ++k) w.write("s" + std::to_string(k), small.data(), {small.size()});
    w.write("big", big.data(), {big.size()});
    w.write_bytes("s5.json", small.data(), small.size());
    w.close();
    const auto counts = members_per_shard(w.paths());
    // Two 1000-byte items and their headers fit in 4096 bytes, three do not.
    CHECK(counts == std::vector<std::size_t>{2, 2, 1, 1, 1});
    for (std::size_t s = 0; s < w.paths().size(); ++s) {
      CAPTURE(w.paths()[s]);
      if (s != 3) CHECK(file_size(w.paths()[s]) <= 4096);
    }
    mmnpz::reader lone(w.paths()[3]);
    CHECK(lone.names() == std::vector<std::string>{"big"});
    CHECK(file_size(w.paths()[3]) > 10000);
    // The fifth small item could not join the big one, nor could the JSON member.
    CHECK(mmnpz::reader(w.paths()[2]).names() == std::vector<std::string>{"s4"});
    mmnpz::reader last(w.paths()[4]);
    const mmnpz::bytes_view b = last.bytes("s5.json");
    CHECK(std::string(reinterpret_cast<const char*>(b.data), b.size) ==
          std::string(small.begin(), small.end()));
  }

  TEST_CASE("puts every array's data at a multiple of the alignment in every shard") {
    for (std::size_t align : {1, 64, 4096, 65536}) {
      CAPTURE(align);
      const std::string dir = scratch_dir("shards_align");
      mmnpz::shard_writer_options o;
      o.max_items = 4;
      o.alignment = align;
      mmnpz::shard_writer w(dir + "/a.npz", o);
      for (std::size_t k = 0; k < 10; ++k)
        w.write("m" + std::string(k * 5, 'n'), item(k).data(), {k + 1});
      w.close();
      REQUIRE(w.paths().size() == 3);
      for (const auto& p : w.paths()) {
        mmnpz::reader r(p);
        for (std::size_t i = 0; i < r.size(); ++i) CHECK(r.array(i).file_offset() % align == 0);
      }
    }
  }

  TEST_CASE("numpy reads every shard") {
    const std::string dir = scratch_dir("shards_numpy");
    mmnpz::shard_writer_options o;
    o.max_items = 2;
    {
      mmnpz::shard_writer w(dir + "/x.npz", o);
      for (std::size_t k = 0; k < 6; ++k)
        w.write("v" + std::to_string(k), item(k * 100).data(), {k * 100 + 1});
    }  // the destructor closes and renames
    REQUIRE(files(dir).size() == 3);
    const std::string script = R"(
import glob, os, sys, numpy as np
for p in sorted(glob.glob(sys.argv[1] + '/x-*-of-*.npz')):
    with np.load(p) as f:
        print(os.path.basename(p), ' '.join(f'{k}:{f[k].sum()}' for k in f.files))
)";
    std::string expected;
    for (std::size_t k = 0; k < 6; ++k) {
      std::int64_t sum = 0;
      for (auto x : item(k * 100)) sum += x;
      if (k % 2 == 0) expected += "x-0000" + std::to_string(k / 2) + "-of-00003.npz";
      expected += " v" + std::to_string(k) + ":" + std::to_string(sum) + (k % 2 ? "\n" : "");
    }
    CHECK(test::python(script, dir) == expected);
  }

  TEST_CASE("keep_together puts the next members in one shard, a new one when they do not fit") {
    const std::string dir = scratch_dir("shards_together");
    mmnpz::shard_writer_options o;
    o.max_items = 3;
    mmnpz::shard_writer w(dir + "/g.npz", o);
    const auto a = item(9);
    const std::string meta = R"({"sample_rate": 16000})";
    const auto group = [&](const std::string& name) {
      w.keep_together(2, w.bound(name, mmnpz::dtype::of<std::int32_t>(), {10}) +
                             w.bound_bytes(name + ".json", meta.size()));
      w.write(name, a.data(), {10});
      w.write_bytes(name + ".json", meta.data(), meta.size());
    };
    w.write("a", a.data(), {10});
    group("x");  // 1 + 2 members fit in 3
    group("y");  // a new shard
    w.write("b", a.data(), {10});
    w.write("c", a.data(), {10});  // a new shard: max_items
    w.close();
    CHECK(mmnpz::reader(w.paths()[0]).names() == std::vector<std::string>{"a", "x", "x.json"});
    CHECK(mmnpz::reader(w.paths()[1]).names() == std::vector<std::string>{"y", "y.json", "b"});
    CHECK(mmnpz::reader(w.paths()[2]).names() == std::vector<std::string>{"c"});
  }

  TEST_CASE("members kept together that pass the limits get a shard of their own") {
    const std::string dir = scratch_dir("shards_together_big");
    mmnpz::shard_writer_options o;
    o.max_items = 1;
    o.max_bytes = 2048;
    mmnpz::shard_writer w(dir + "/g.npz", o);
    const std::vector<std::uint8_t> big(3000, 1);
    const std::uint64_t bytes = w.bound("big", mmnpz::dtype::of<std::uint8_t>(), {3000});
    CHECK(bytes > 3000);
    CHECK(bytes < 3000 + 1024);
    w.write("first", big.data(), {10});
    w.keep_together(2, bytes + w.bound_bytes("big.txt", 3));
    w.write("big", big.data(), {3000});
    w.write_bytes("big.txt", "abc", 3);
    w.write("last", big.data(), {10});
    w.close();
    CHECK(members_per_shard(w.paths()) == std::vector<std::size_t>{1, 2, 1});
    CHECK(mmnpz::reader(w.paths()[1]).names() == std::vector<std::string>{"big", "big.txt"});
    CHECK_THROWS_WITH_AS(
        w.keep_together(1, 1),
        (dir + "/g.npz: the shard writer is closed; nothing more can be written").c_str(),
        mmnpz::error);
  }

  TEST_CASE("check_names refuses a group's names as writing them would, before any is written") {
    const std::string dir = scratch_dir("shards_check_names");
    mmnpz::shard_writer w(dir + "/n.npz");
    const auto a = item(3);
    w.write("x", a.data(), {3});
    w.write_bytes("x.json", "{}", 2);
    w.check_names({{"y", true}, {"y.json", false}, {"x", false}});  // "x.npy" is taken, not "x"
    const auto refused = [&](std::vector<std::pair<std::string, bool>> group) {
      try {
        w.check_names(group);
      } catch (const mmnpz::error& e) {
        CHECK(e.code() == mmnpz::errc::invalid_argument);
        return std::string(e.what());
      }
      return std::string("nothing refused");
    };
    const std::string at = dir + "/n.npz: ";
    CHECK(refused({{"y", true}, {"x.json", false}}) ==
          at + "member 'x.json': a shard already has a member of that name");
    CHECK(refused({{"y", true}, {"x", true}}) ==
          at + "member 'x.npy': a shard already has a member of that name");
    CHECK(refused({{"y", true}, {"z", false}, {"y", true}}) ==
          at + "member 'y.npy': the group names it twice");
    CHECK(refused({{"y", true}, {"", false}}) == at + "a member name must not be empty");
    CHECK(refused({{"y", true}, {std::string("a\0b", 3), false}}) ==
          at + "member 'a\\0b': a member name must not hold NUL");
    CHECK(refused({{"y", true}, {"../up", true}}) ==
          at + "member '../up': a member name must not contain '..' components");
    CHECK(refused({{"y", true}, {std::string(65532, 'n'), false}}).find(
              "a member name must be shorter than 65,532 bytes") != std::string::npos);
    // A name refused by check_names is refused by write_bytes() too: the rules are the same.
    CHECK_THROWS_AS(w.write_bytes("", "", 0), mmnpz::error);
    CHECK(w.items_written() == 2);
    w.close();
    mmnpz::shard_writer_options o;
    o.allow_duplicate_names = true;
    mmnpz::shard_writer d(dir + "/d.npz", o);
    d.write("x", a.data(), {3});
    d.check_names({{"x", true}, {"x", true}});
    CHECK_THROWS_AS(d.check_names({{"x", true}, {"/abs", true}}), mmnpz::error);
    d.close();
    CHECK_THROWS_WITH_AS(
        d.check_names({}),
        (dir + "/d.npz: the shard writer is closed; nothing more can be written").c_str(),
        mmnpz::error);
  }

  TEST_CASE("writing nothing gives one empty shard") {
    const std::string dir = scratch_dir("shards_empty");
    mmnpz::shard_writer w(dir + "/e.npz");
    w.close();
    CHECK(w.paths() == std::vector<std::string>{dir + "/e-00000-of-00001.npz"});
    CHECK(mmnpz::reader(w.paths()[0]).size() == 0);
  }

  TEST_CASE("discard() leaves the final paths and a dead run's .partial as they were") {
    const std::string dir = scratch_dir("shards_discard");
    const auto a = item(1);
    {
      mmnpz::shard_writer w(dir + "/d.npz");
      w.write("kept", a.data(), {2});
      w.close();
    }
    const std::string earlier = test::read_file(dir + "/d-00000-of-00001.npz");
    test::run("echo left-by-a-dead-run > '" + dir + "/d-00001.npz.partial'");
    mmnpz::shard_writer_options o;
    o.max_items = 1;
    {
      mmnpz::shard_writer w(dir + "/d.npz", o);
      w.write("x", a.data(), {2});
      // The second shard would be d-00001.npz.partial: a dead run's is refused, not replaced.
      CHECK_THROWS_WITH_AS(w.write("y", a.data(), {2}),
                           (dir + "/d.npz: '" + dir + "/d-00001.npz.partial' is a shard of a run "
                            "that died, which may hold items (`mmnpz recover` rebuilds its "
                            "directory): rename or remove the .partial files of that run before "
                            "writing these shards again")
                               .c_str(),
                           mmnpz::error);
      w.discard();
      w.discard();  // a no-op, as close() after it
      w.close();
      CHECK(w.closed());
      CHECK(w.paths().empty());
      CHECK_THROWS_AS(w.write("z", a.data(), {2}), mmnpz::error);
    }
    CHECK(files(dir) == std::vector<std::string>{dir + "/d-00000-of-00001.npz",
                                                 dir + "/d-00001.npz.partial"});
    CHECK(test::read_file(dir + "/d-00000-of-00001.npz") == earlier);
    CHECK(test::read_file(dir + "/d-00001.npz.partial") == "left-by-a-dead-run\n");
    mmnpz::shard_writer again(dir + "/d.npz");  // the lock was let go
    again.discard();
  }

  TEST_CASE("a .partial a dead run left is refused, not replaced: its items stay recoverable") {
    // A new run of the same name replaced it: the items it had committed were lost.
    const std::string dir = scratch_dir("shards_dead_run");
    const auto a = item(1);
    {
      mmnpz::writer w(dir + "/r-00000.npz.partial");  // as a killed run leaves it, closed here
      w.write("old", a.data(), {2});
    }
    const std::string dead = test::read_file(dir + "/r-00000.npz.partial");
    CHECK_THROWS_WITH_AS(mmnpz::shard_writer(dir + "/r.npz"),
                         (dir + "/r.npz: '" + dir + "/r-00000.npz.partial' is a shard of a run "
                          "that died, which may hold items (`mmnpz recover` rebuilds its "
                          "directory): rename or remove the .partial files of that run before "
                          "writing these shards again")
                             .c_str(),
                         mmnpz::error);
    CHECK(test::read_file(dir + "/r-00000.npz.partial") == dead);
    CHECK(files(dir) == std::vector<std::string>{dir + "/r-00000.npz.partial"});
    REQUIRE(::rename((dir + "/r-00000.npz.partial").c_str(), (dir + "/old.npz").c_str()) == 0);
    mmnpz::shard_writer again(dir + "/r.npz");  // the run's lock was let go
    again.write("new", a.data(), {2});
    again.close();
    CHECK(mmnpz::reader(dir + "/r-00000-of-00001.npz").names() ==
          std::vector<std::string>{"new"});
  }

  TEST_CASE("an exception before the first item discards; after one, the shards are closed") {
    const std::string dir = scratch_dir("shards_unwind");
    const auto a = item(1);
    {
      mmnpz::shard_writer w(dir + "/u.npz");
      w.write("earlier", a.data(), {2});
    }
    const std::string earlier = test::read_file(dir + "/u-00000-of-00001.npz");
    try {
      mmnpz::shard_writer w(dir + "/u.npz");
      throw std::runtime_error("the producer failed");
    } catch (const std::runtime_error&) {
    }
    // (It was replaced by an empty shard.)
    CHECK(test::read_file(dir + "/u-00000-of-00001.npz") == earlier);
    CHECK(files(dir) == std::vector<std::string>{dir + "/u-00000-of-00001.npz"});
    try {
      mmnpz::shard_writer w(dir + "/u.npz");
      w.write("written", a.data(), {2});
      throw std::runtime_error("the producer failed later");
    } catch (const std::runtime_error&) {
    }
    CHECK(mmnpz::reader(dir + "/u-00000-of-00001.npz").names() ==
          std::vector<std::string>{"written"});
  }

  TEST_CASE("a shard begun for an item that was refused is removed at close") {
    const std::string dir = scratch_dir("shards_refused");
    mmnpz::shard_writer_options o;
    o.max_items = 1;
    mmnpz::shard_writer w(dir + "/r.npz", o);
    const auto a = item(2);
    w.write("a", a.data(), {3});
    CHECK_THROWS_AS(w.write("../evil", a.data(), {3}), mmnpz::error);
    w.close();
    CHECK(files(dir) == std::vector<std::string>{dir + "/r-00000-of-00001.npz"});
  }

  TEST_CASE("refuses a name that an earlier shard holds, unless duplicates are allowed") {
    const std::string dir = scratch_dir("shards_dup");
    mmnpz::shard_writer_options o;
    o.max_items = 1;
    const auto a = item(0);
    {
      mmnpz::shard_writer w(dir + "/d.npz", o);
      w.write("a", a.data(), {1});
      w.write("b", a.data(), {1});
      CHECK_THROWS_WITH_AS(
          w.write("a", a.data(), {1}),
          (dir + "/d.npz: member 'a.npy': a shard already has a member of that name").c_str(),
          mmnpz::error);
      w.write_bytes("a", a.data(), 4);  // "a" is not "a.npy"
      w.close();
      CHECK(w.paths().size() == 3);
    }
    o.allow_duplicate_names = true;
    mmnpz::shard_writer w(dir + "/d.npz", o);
    w.write("a", a.data(), {1});
    w.write("a", a.data(), {1});
    w.close();
    CHECK(w.paths().size() == 2);
  }

  TEST_CASE("refuses a path without .npz, limits that are not positive and writing after close") {
    const std::string dir = scratch_dir("shards_errors");
    const std::string why =
        ": a shard writer's path must be a file name ending in .npz (\"out/train.npz\" gives "
        "out/train-00000-of-00012.npz ...)";
    for (std::string bad :
         {dir + "/train", dir + "/train.npy", dir + "/.npz", std::string(".npz")}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(mmnpz::shard_writer{bad}, (bad + why).c_str(), mmnpz::error);
      // validate() says so too, touching no file (mmnpz pack checks before it writes).
      CHECK_THROWS_WITH_AS(mmnpz::validate(mmnpz::shard_writer_options{}, bad),
                           (bad + why).c_str(), mmnpz::error);
    }
    mmnpz::validate(mmnpz::shard_writer_options{}, dir + "/never.npz");
    CHECK(::access((dir + "/never.npz").c_str(), F_OK) != 0);
    CHECK(::access((dir + "/.never.npz.mmnpz-shards.lock").c_str(), F_OK) != 0);
    const std::string path = dir + "/t.npz";
    mmnpz::shard_writer_options o;
    o.max_bytes = 0;
    CHECK_THROWS_WITH_AS(mmnpz::shard_writer(path, o),
                         (path + ": max_bytes must be positive, not 0").c_str(), mmnpz::error);
    o.max_bytes.reset();
    o.max_items = 0;
    CHECK_THROWS_WITH_AS(mmnpz::shard_writer(path, o),
                         (path + ": max_items must be positive, not 0").c_str(), mmnpz::error);
    o.max_items.reset();
    o.alignment = 48;
    CHECK_THROWS_WITH_AS(mmnpz::shard_writer(path, o),
                         (path + ": alignment 48 is not a power of two from 1 to 65536").c_str(),
                         mmnpz::error);
    CHECK(files(dir).empty());  // nothing was created

    mmnpz::shard_writer w(path);
    w.close();
    w.close();  // idempotent
    CHECK(w.closed());
    const std::int32_t x = 1;
    const std::string closed = path + ": the shard writer is closed; nothing more can be written";
    CHECK_THROWS_WITH_AS(w.write("x", &x, {1}), closed.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(w.write_bytes("x", &x, 4), closed.c_str(), mmnpz::error);
    try {
      w.write("x", &x, {1});
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::invalid_argument);
    }
  }

  TEST_CASE("a second shard writer of one path is refused until the first is closed") {
    // Each shard's writer locks only its own .partial: a second run of one job would replace
    // the shards the first had closed already.
    const std::string dir = scratch_dir("shards_twice");
    const auto a = item(1);
    mmnpz::shard_writer first(dir + "/t.npz", {std::nullopt, 1});
    first.write("a0", a.data(), {2});
    first.write("a1", a.data(), {2});  // shard 0 is closed, shard 1 open
    CHECK_THROWS_WITH_AS(mmnpz::shard_writer(dir + "/t.npz"),
                         (dir + "/t.npz: another shard writer is writing these shards; two would "
                                "lose items, so wait until it is closed")
                             .c_str(),
                         mmnpz::error);
    first.close();
    CHECK(files(dir) == std::vector<std::string>{dir + "/t-00000-of-00002.npz",
                                                  dir + "/t-00001-of-00002.npz"});
    CHECK(::access((dir + "/.t.npz.mmnpz-shards.lock").c_str(), F_OK) != 0);  // removed
    mmnpz::shard_writer again(dir + "/t.npz");
    again.write("b", a.data(), {2});
    again.close();
    CHECK(mmnpz::reader(dir + "/t-00000-of-00001.npz").names() == std::vector<std::string>{"b"});
  }

  TEST_CASE("replaces the shards of an earlier run of the same count") {
    // (A .partial an earlier run left when it died is refused: see above.)
    const std::string dir = scratch_dir("shards_again");
    const auto a = item(1);
    for (int run = 0; run < 2; ++run) {
      mmnpz::shard_writer w(dir + "/t.npz");
      w.write(run == 0 ? "first" : "second", a.data(), {2});
      w.close();
    }
    CHECK(files(dir) == std::vector<std::string>{dir + "/t-00000-of-00001.npz"});
    CHECK(mmnpz::reader(dir + "/t-00000-of-00001.npz").names() ==
          std::vector<std::string>{"second"});
  }
}
