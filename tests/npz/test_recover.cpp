#include <doctest/doctest.h>

#include <cstring>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "zip/crc32.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"
#include "test_support.hpp"

namespace {

constexpr std::uint32_t members_per_child = 120;

// Member i's contents: a size and a byte pattern both derived from i.
std::vector<std::uint8_t> contents(std::uint32_t i) {
  std::vector<std::uint8_t> v(1 + (i * 7919u) % 400000u);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::uint8_t>(i + k * 31);
  return v;
}

// Forks a writer that reports each committed member's index on a pipe, kills it with SIGKILL
// `delay` after it reported `after` members (so that kill points spread over the writing
// however fast the machine is), and returns the indices it reported.
std::vector<std::uint32_t> run_and_kill(const std::string& path, mmnpz::open_mode mode,
                                        std::uint32_t after, std::chrono::microseconds delay) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    try {
      mmnpz::writer w(path, {mode});
      for (std::uint32_t i = 0; i < members_per_child; ++i) {
        const auto v = contents(i);
        w.write("m" + std::to_string(i), v.data(), {v.size()});
        if (::write(fds[1], &i, sizeof i) != sizeof i) ::_exit(3);
      }
      w.close();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<std::uint32_t> committed;
  std::uint32_t i = 0;
  while (committed.size() < after && ::read(fds[0], &i, sizeof i) == sizeof i) {
    committed.push_back(i);
  }
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  while (::read(fds[0], &i, sizeof i) == sizeof i) committed.push_back(i);
  ::close(fds[0]);
  CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
  return committed;
}

// After recovery, the archive holds `prefix` and then m0, m1, ... each intact, and at least
// every member the writer reported as committed.
void check_recovered(const std::string& path, const std::vector<std::string>& prefix,
                     std::size_t committed) {
  mmnpz::reader r(path);
  REQUIRE(r.size() >= prefix.size() + committed);
  CHECK(r.size() <= prefix.size() + committed + 1);  // killed between commit and report
  for (std::size_t i = 0; i < prefix.size(); ++i) CHECK(r.names()[i] == prefix[i]);
  CHECK(r.verify().ok());
  for (std::size_t i = prefix.size(); i < r.size(); ++i) {
    const auto k = static_cast<std::uint32_t>(i - prefix.size());
    const auto want = contents(k);
    const auto got = r["m" + std::to_string(k)];
    REQUIRE(got.nbytes() == want.size());
    CHECK(std::equal(want.begin(), want.end(), got.data_as<std::uint8_t>()));
  }
}

}  // namespace

TEST_SUITE("recover") {
  TEST_CASE("leaves an archive that already opens untouched") {
    const std::string path = test::scratch("intact.npz");
    const int v = 5;
    {
      mmnpz::writer w(path);
      w.write("v", &v, {});
    }
    const std::string before = test::read_file(path);
    const auto result = mmnpz::recover(path);
    CHECK(result.directory_was_intact);
    CHECK(result.members_recovered == 1);
    CHECK(test::read_file(path) == before);
  }

  TEST_CASE("leaves an archive with bytes after its end record untouched, as the reader opens it") {
    // A signature block or padding after the end record, and a member whose CRC-32 no longer
    // matches its bytes (bit rot): rebuilding would cut the bytes off, and refuse because of
    // the damaged member; the reader opens the archive as it is.
    const std::string path = test::scratch("trailing.npz");
    const double x[] = {1.5, 2.5, 3.5};
    {
      mmnpz::writer w(path);
      w.write("a", x, {3});
      w.write("b", x, {3});
    }
    const std::uint64_t a_data = mmnpz::reader(path).array("a").file_offset();
    std::string bytes = test::read_file(path);
    bytes[a_data] ^= 0x5A;
    bytes += std::string(16, '\0') + "signature";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    const auto result = mmnpz::recover(path);
    CHECK(result.directory_was_intact);
    CHECK(result.members_recovered == 2);
    CHECK(result.bytes_kept == bytes.size());
    CHECK(test::read_file(path) == bytes);
    mmnpz::reader_options o;
    o.recover = true;
    const mmnpz::reader r(path, o);  // not the copy recover() would have refused to make
    CHECK(r.names() == std::vector<std::string>{"a", "b"});
    CHECK(r.bytes_after_archive() == 25);
    CHECK_FALSE(r.verify().ok());
  }

  TEST_CASE("restores every committed member after the writer is killed at random moments") {
    std::mt19937 rng(20261121);
    std::uniform_int_distribution<std::uint32_t> after(1, members_per_child - 20);
    std::uniform_int_distribution<int> delay_us(0, 2000);
    const std::string path = test::scratch("killed.npz");
    int kills = 0;
    std::size_t restored = 0;
    for (int round = 0; round < 30; ++round) {
      std::remove(path.c_str());
      // Round 0 may kill the writer before its first member.
      const std::uint32_t reported = round == 0 ? 0 : after(rng);
      const auto delay = std::chrono::microseconds(delay_us(rng));
      CAPTURE(reported);
      CAPTURE(delay.count());
      const auto committed = run_and_kill(path, mmnpz::open_mode::create, reported, delay);
      for (std::size_t i = 0; i < committed.size(); ++i) REQUIRE(committed[i] == i);
      try {
        const auto result = mmnpz::recover(path);
        CHECK(result.members_recovered >= committed.size());
        restored += result.members_recovered;
      } catch (const mmnpz::error& e) {
        // Killed before the first member was written: there is nothing to recover.
        CHECK(committed.empty());
        continue;
      }
      check_recovered(path, {}, committed.size());
      if (kills++ == 0) {
        const std::string numpy_says = test::python(
            "import sys, numpy as np; f = np.load(sys.argv[1]); "
            "print(all(f[k].size == 1 + (int(k[1:]) * 7919) % 400000 for k in f.files))",
            path);
        CHECK(numpy_says == "True\n");
      }
    }
    MESSAGE(kills << " kill points recovered, " << restored << " members restored");
    CHECK(kills >= 29);
  }

  TEST_CASE("restores the old and the committed new members after an append is killed") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> after(0, members_per_child - 20);
    std::uniform_int_distribution<int> delay_us(0, 2000);
    const std::string base = test::scratch("append_base.npz");
    {
      mmnpz::writer w(base);
      const double x[] = {1.5, 2.5};
      w.write("old0", x, {2});
      w.write("old1", x, {1});
    }
    const std::string base_bytes = test::read_file(base);
    const std::string path = test::scratch("append_killed.npz");
    for (int round = 0; round < 20; ++round) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << base_bytes;
      const std::uint32_t reported = after(rng);
      const auto delay = std::chrono::microseconds(delay_us(rng));
      CAPTURE(reported);
      CAPTURE(delay.count());
      const auto committed = run_and_kill(path, mmnpz::open_mode::append, reported, delay);
      mmnpz::recover(path);
      check_recovered(path, {"old0", "old1"}, committed.size());
      // The archive that was there is still there, byte for byte.
      CHECK(test::read_file(path).compare(0, base_bytes.size(), base_bytes) == 0);
    }
  }

  TEST_CASE("restores members whose sizes follow in data descriptors (numpy writing to a pipe)") {
    for (const char* name : {"unseekable_stored.npz", "unseekable_deflated.npz"}) {
      CAPTURE(name);
      const std::string fixture = std::string(MMNPZ_FIXTURES) + "/good/" + name;
      const std::string bytes = test::read_file(fixture);
      const std::size_t cd = bytes.find("PK\x01\x02");
      REQUIRE(cd != std::string::npos);
      const mmnpz::reader original(fixture);
      REQUIRE(original.size() >= 2);
      // The directory lost (a writer killed before it), and a next member begun and cut off.
      for (const std::string& tail : {std::string(), std::string("PK\x03\x04\x14\x00\x08")}) {
        const std::string path = test::scratch("descriptors.npz");
        std::ofstream(path, std::ios::binary) << bytes.substr(0, cd) << tail;
        const auto result = mmnpz::recover(path);
        CHECK(result.members_recovered == original.size());
        CHECK(result.bytes_cut == tail.size());
        const mmnpz::reader r(path);
        REQUIRE(r.size() == original.size());
        CHECK(r.verify().ok());
        for (std::size_t i = 0; i < r.size(); ++i) {
          CHECK(r.member(i).name == original.member(i).name);
          const auto a = original.bytes(i);
          const auto b = r.bytes(i);
          REQUIRE(a.size == b.size);
          CHECK(std::memcmp(a.data, b.data, a.size) == 0);
        }
        const std::string numpy_says = test::python(
            "import sys, numpy as np; a = np.load(sys.argv[1]); b = np.load(sys.argv[2]); "
            "print(a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files))",
            path + "' '" + fixture);
        CHECK(numpy_says == "True\n");
      }
    }
  }

  TEST_CASE("a stored member's data ends at the first data descriptor that matches it, "
            "wherever the signatures fall") {
    // Stored data holding descriptor signatures that match nothing, some across the 2 MiB
    // pieces recover reads in (its own signature, or the descriptor after it, split), then
    // its real descriptor; a member follows. recover keeps both, and the data whole.
    const auto le = [](std::string& out, std::uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) out += static_cast<char>(i < 8 ? (v >> (8 * i)) & 0xFF : 0);
    };
    const std::string sig = "PK\x07\x08";
    const std::uint64_t mib = 1 << 20;
    for (const std::uint64_t length : {5 * mib + 123, 4 * mib - 7, 2 * mib - 2}) {
      CAPTURE(length);
      std::string data(length, '\0');
      for (std::uint64_t k = 0; k < length; ++k) data[k] = static_cast<char>((k * 2654435761u) >> 13);
      for (const std::uint64_t at : {std::uint64_t{100}, 2 * mib - 2, 2 * mib - 10, 4 * mib - 1,
                                     4 * mib - 20, 5 * mib}) {
        if (at + 4 <= length) data.replace(at, 4, sig);
      }
      const std::uint32_t crc = mmnpz::detail::crc32(0, data.data(), data.size());
      std::string file;
      le(file, 0x04034b50, 4);                 // local header, sizes in a descriptor
      le(file, 20, 2);
      le(file, 0x0008, 2);
      le(file, 0, 2);                          // stored
      le(file, 0, 4);                          // time, date
      le(file, 0, 12);                         // CRC-32, sizes: in the descriptor
      le(file, 5, 2);
      le(file, 0, 2);
      file += "x.bin" + data;
      le(file, 0x08074b50, 4);
      le(file, crc, 4);
      le(file, length, 4);
      le(file, length, 4);
      const std::string tail = "after";
      le(file, 0x04034b50, 4);                 // a second member, sizes in its header
      le(file, 20, 2);
      le(file, 0, 2);
      le(file, 0, 2);
      le(file, 0, 4);
      le(file, mmnpz::detail::crc32(0, tail.data(), tail.size()), 4);
      le(file, tail.size(), 4);
      le(file, tail.size(), 4);
      le(file, 5, 2);
      le(file, 0, 2);
      file += "y.bin" + tail;
      const std::string path = test::scratch("stored_descriptors.zip");
      std::ofstream(path, std::ios::binary) << file;
      const auto result = mmnpz::recover(path);
      CHECK(result.members_recovered == 2);
      CHECK(result.bytes_cut == 0);
      const mmnpz::reader r(path);
      REQUIRE(r.size() == 2);
      CHECK(r.verify().ok());
      const auto x = r.bytes(0);
      REQUIRE(x.size == length);
      CHECK(std::memcmp(x.data, data.data(), data.size()) == 0);
      const auto y = r.bytes(1);
      CHECK(std::string(reinterpret_cast<const char*>(y.data), y.size) == tail);
      // Cut within x's data or its descriptor: no descriptor matches, and x is cut away as a
      // write that never finished.
      for (const std::uint64_t cut : {std::uint64_t{35} + 100, 35 + length / 2, 35 + length + 9}) {
        CAPTURE(cut);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << file.substr(0, cut);
        const auto cut_result = mmnpz::recover(path);
        CHECK(cut_result.members_recovered == 0);
        CHECK(cut_result.bytes_cut == cut);
        CHECK(mmnpz::reader(path).size() == 0);
      }
    }
  }

  TEST_CASE("restores an append killed after an archive with data descriptors") {
    const std::string fixture = std::string(MMNPZ_FIXTURES) + "/good/unseekable_stored.npz";
    const std::string base_bytes = test::read_file(fixture);
    const std::string path = test::scratch("descriptors_append.npz");
    std::ofstream(path, std::ios::binary) << base_bytes;
    const std::size_t old_members = mmnpz::reader(fixture).size();
    {
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      const std::int32_t x[] = {1, 2, 3};
      w.write("appended", x, {3});
      // Killed before close(): no new directory. Simulated by cutting it off below.
    }
    const std::string full = test::read_file(path);
    const std::size_t last_cd = full.rfind("PK\x05\x06");
    const std::size_t new_cd = full.find("PK\x01\x02", base_bytes.size());
    REQUIRE(new_cd != std::string::npos);
    REQUIRE(last_cd > new_cd);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << full.substr(0, new_cd);
    const auto result = mmnpz::recover(path);
    CHECK(result.members_recovered == old_members + 1);
    const mmnpz::reader r(path);
    CHECK(r.verify().ok());
    CHECK(r.array("appended").data_as<std::int32_t>()[2] == 3);
    CHECK(test::read_file(path).compare(0, base_bytes.size(), base_bytes) == 0);
  }

  TEST_CASE("refuses to cut away a damaged member that intact members follow") {
    const std::string path = test::scratch("damaged_middle.npz");
    {
      mmnpz::writer w(path);
      const double x[] = {1.5, 2.5, 3.5};
      w.write("a", x, {3});
      w.write("b", x, {3});
      w.write("c", x, {3});
    }
    std::string bytes = test::read_file(path);
    bytes.resize(bytes.find("PK\x01\x02"));  // no directory
    const mmnpz::reader before_damage(path);
    const auto b_data = before_damage.array("b").file_offset();
    bytes[b_data] ^= 0x5A;  // a bit flip inside b's data
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    const std::uint64_t b_offset = before_damage.member(1).local_header_offset;
    CHECK_THROWS_WITH_AS(
        mmnpz::recover(path),
        (path + " at offset " + std::to_string(b_offset) +
         ": member 'b.npy' cannot be recovered: its size or CRC-32 does not match its local "
         "header; members after it would be lost, so nothing was changed")
            .c_str(),
        mmnpz::error);
    CHECK(test::read_file(path) == bytes);
  }

  TEST_CASE("refuses to cut bytes after the last member that no interrupted write leaves") {
    // As an archive inside a tar, followed by the tar's next file: only a record cut short by
    // the end of the file, or zeros, may be cut.
    const std::string path = test::scratch("foreign_tail.npz");
    std::string members;
    {
      mmnpz::writer w(path);
      const double x[] = {1.5, 2.5, 3.5};
      w.write("a", x, {3});
      w.write("b", x, {3});
    }
    members = test::read_file(path);
    members.resize(members.find("PK\x01\x02"));  // no directory: a writer that died
    for (const std::string& tail : {std::string("notes.txt\0\0\0 a tar header and a file"),
                                    std::string(100, '\0') + "x"}) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << members + tail;
      CHECK_THROWS_WITH_AS(
          mmnpz::recover(path),
          (path + " at offset " + std::to_string(members.size() + tail.find_first_not_of('\0')) +
           ": the " + std::to_string(tail.size()) + " bytes from offset " +
           std::to_string(members.size()) +
           " are no member that an interrupted write left; recover cuts only those (or zeros), "
           "so nothing was changed")
              .c_str(),
          mmnpz::error);
      CHECK(test::read_file(path) == members + tail);
    }
    // Zeros alone are cut (a file system that extended the file before its data arrived).
    std::ofstream(path, std::ios::binary | std::ios::trunc) << members + std::string(4096, '\0');
    CHECK(mmnpz::recover(path).names == std::vector<std::string>{"a.npy", "b.npy"});
    // So is a local header torn after its signature: it was kept as an empty member named ''.
    const std::string torn = std::string("PK\x03\x04", 4) + std::string(40, '\0');
    std::ofstream(path, std::ios::binary | std::ios::trunc) << members + torn;
    CHECK(mmnpz::recover(path).names == std::vector<std::string>{"a.npy", "b.npy"});
    CHECK(test::read_file(path).substr(0, members.size()) == members);
    CHECK(mmnpz::reader(path).size() == 2);
    // Followed by other bytes, it is refused.
    std::ofstream(path, std::ios::binary | std::ios::trunc) << members + torn + "x";
    CHECK_THROWS_WITH_AS(mmnpz::recover(path),
                         (path + " at offset " + std::to_string(members.size()) +
                          ": member '' cannot be recovered: it has no name; members after it "
                          "would be lost, so nothing was changed")
                             .c_str(),
                         mmnpz::error);
    CHECK(test::read_file(path) == members + torn + "x");
  }

  TEST_CASE("refuses to cut away intact members that follow a header it cannot chain from") {
    // Bytes before the archive that hold a local header signature, with lengths running past
    // the end of the file: what follows them is not an interrupted write.
    const std::string path = test::scratch("fake_header.npz");
    {
      mmnpz::writer w(path);
      const double x[] = {1.5, 2.5, 3.5};
      w.write("a", x, {3});
    }
    std::string members = test::read_file(path);
    members.resize(members.find("PK\x01\x02"));
    std::string prefix = "PK\x03\x04";
    prefix += std::string(22, '\xff') + std::string(4, '\x7f') + std::string(30, 'p');
    const std::string bytes = prefix + members;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    CHECK_THROWS_WITH_AS(
        mmnpz::recover(path),
        (path + " at offset " + std::to_string(prefix.size()) +
         ": an intact member starts here, after the last member recover can chain to (ending at "
         "offset 0): cutting there would lose it, so nothing was changed")
            .c_str(),
        mmnpz::error);
    CHECK(test::read_file(path) == bytes);
  }

  TEST_CASE("keeps the comment of the archive an interrupted append was made to") {
    const std::string path = test::scratch("comment_kept.npz");
    const double x[] = {1.5, 2.5};
    {
      mmnpz::writer_options o;
      o.comment = "dataset v3";
      mmnpz::writer w(path, o);
      w.write("a", x, {2});
    }
    {
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      w.write("b", x, {2});
      w.close();
    }
    std::string bytes = test::read_file(path);
    bytes.resize(bytes.rfind("PK\x01\x02"));  // the append's directory never written
    bytes.resize(bytes.rfind("PK\x01\x02") + 1);  // nor its end, and its last entry cut
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    mmnpz::recover(path);
    const mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"a", "b"});
    CHECK(r.comment() == "dataset v3");
  }

  TEST_CASE("a writer killed after storing an archive as its last member loses no member: the "
            "inner archive is not taken for the file's, and recover restores them all") {
    const std::string empty_zip = std::string("PK\x05\x06", 4) + std::string(18, '\0');
    const std::string inner_path = test::scratch("stored_inner.npz");
    {
      mmnpz::writer w(inner_path);
      const std::int32_t x[] = {7, 8, 9};
      w.write("inner_member", x, {3});
    }
    const std::string base = test::scratch("stored_base.npz");
    {
      mmnpz::writer w(base);
      const double x[] = {1.5, 2.5};
      w.write("old", x, {2});
    }
    const double y[] = {3.5, 4.5, 5.5};
    for (const std::string& inner : {empty_zip, test::read_file(inner_path)}) {
      for (const bool append : {false, true}) {
        CAPTURE(inner.size());
        CAPTURE(append);
        const std::string path = test::scratch("stored_archive_last.npz");
        std::ofstream(path, std::ios::binary | std::ios::trunc)
            << (append ? test::read_file(base) : std::string());
        {
          mmnpz::writer w(path, {append ? mmnpz::open_mode::append : mmnpz::open_mode::truncate});
          w.write("a", y, {3});
          w.write_bytes("nested.npz", inner.data(), inner.size());
          w.close();
        }
        std::uint64_t cut = 0;  // the end of nested.npz: the writer died before its directory
        std::uint64_t nested_header = 0;
        {
          const mmnpz::reader r(path);
          const mmnpz::bytes_view b = r.bytes("nested.npz");
          cut = static_cast<std::uint64_t>(b.data - r.file_bytes().data) + b.size;
          nested_header = r.member(r.index_of("nested.npz")).local_header_offset;
        }
        std::string bytes = test::read_file(path);
        bytes.resize(static_cast<std::size_t>(cut));
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
        if (append) {
          const mmnpz::reader r(path);  // as it was before the append
          CHECK(r.names() == std::vector<std::string>{"old"});
          CHECK(r.was_interrupted());
          CHECK_THROWS_AS(mmnpz::writer(path, {mmnpz::open_mode::append}), mmnpz::error);
        } else {
          const std::string message =
              path + " at offset " + std::to_string(cut - 22) +
              ": the archive of this end record, from offset " +
              std::to_string(inner.size() == 22 ? cut - 22 : cut - inner.size()) +
              ", lies in the bytes of the member whose local header is at offset " +
              std::to_string(nested_header) +
              ", which no directory lists (a writer that stored an archive as a member died "
              "before close()?); running `mmnpz recover` on it may restore its members";
          CHECK_THROWS_WITH_AS(mmnpz::reader{path}, message.c_str(), mmnpz::error);
          CHECK_THROWS_AS(mmnpz::writer(path, {mmnpz::open_mode::append}), mmnpz::error);
        }
        const mmnpz::recover_result rec = mmnpz::recover(path);
        CHECK_FALSE(rec.directory_was_intact);
        const mmnpz::reader r(path);
        const auto want = append ? std::vector<std::string>{"old", "a", "nested.npz"}
                                 : std::vector<std::string>{"a", "nested.npz"};
        CHECK(r.names() == want);
        CHECK(r.verify().ok());
        const mmnpz::bytes_view b = r.bytes("nested.npz");
        CHECK(std::string(reinterpret_cast<const char*>(b.data), b.size) == inner);
        CHECK(r.array("a").data_as<double>()[2] == 5.5);
      }
    }
  }

  TEST_CASE("a crash after a member abandoned half-written and a shorter one committed over it "
            "leaves every committed member to recover") {
    const std::string path = test::scratch("abandoned_then_committed.npz");
    {
      mmnpz::writer w(path);
      const double x[] = {1.5, 2.5};
      w.write("old", x, {2});
    }
    std::vector<double> big(100000, 0.25);
    const double small[] = {7.0, 8.0, 9.0};
    for (const bool raw : {false, true}) {
      CAPTURE(raw);
      std::string crashed;  // the file as a writer killed now leaves it
      {
        mmnpz::writer w(path, {mmnpz::open_mode::append});
        {
          mmnpz::writer::stream s = raw ? w.begin_bytes("big", big.size() * sizeof(double))
                                        : w.begin("big", mmnpz::dtype::of<double>(), {big.size()});
          s.write(big.data(), big.size() / 2 * sizeof(double));
        }  // abandoned: half its bytes are in the file
        w.write(raw ? "second_raw" : "second", small, {3});
        crashed = test::read_file(path);
      }
      std::ofstream(path, std::ios::binary | std::ios::trunc) << crashed;
      const mmnpz::recover_result rec = mmnpz::recover(path);
      CHECK(rec.bytes_cut == 0);
      const mmnpz::reader r(path);
      const auto want = raw ? std::vector<std::string>{"old", "second", "second_raw"}
                            : std::vector<std::string>{"old", "second"};
      CHECK(r.names() == want);
      CHECK(r.verify().ok());
      CHECK(r.array(raw ? "second_raw" : "second").data_as<double>()[2] == 9.0);
    }
  }

  TEST_CASE("recovering no member after leading bytes that end in zip64 end records leaves an "
            "empty archive, not the one those records describe") {
    // Leading bytes (no local header among them) ending in a central entry, a zip64 end
    // record listing it and a locator; then a member whose write was cut short. recover keeps
    // the leading bytes and no member: the end record it writes must not take their locator.
    std::string lead = "#!/bin/sh\nexit 0\n";
    const std::uint64_t cd_at = lead.size();
    mmnpz::zip::central_entry e;
    e.name = "a.npy";
    mmnpz::zip::emit_central_entry(lead, e);
    const std::uint64_t cd_size = lead.size() - cd_at, end64_at = lead.size();
    using mmnpz::zip::put16, mmnpz::zip::put32, mmnpz::zip::put64;
    put32(lead, mmnpz::zip::end64_sig);
    put64(lead, 44);
    put16(lead, 45);
    put16(lead, 45);
    put32(lead, 0);
    put32(lead, 0);
    put64(lead, 1);
    put64(lead, 1);
    put64(lead, cd_size);
    put64(lead, cd_at);
    put32(lead, mmnpz::zip::end64_locator_sig);
    put32(lead, 0);
    put64(lead, end64_at);
    put32(lead, 1);
    const std::string cut = "PK\x03\x04\x14\x00\x00\x00\x00\x00";  // a header cut short
    const std::string path = test::scratch("lead_like_zip64.npz");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << lead << cut;
    const mmnpz::recover_result result = mmnpz::recover(path);
    CHECK(result.members_recovered == 0);
    CHECK(result.names.empty());
    CHECK(result.bytes_kept == test::read_file(path).size());
    CHECK(test::read_file(path).compare(0, lead.size(), lead) == 0);
    const mmnpz::reader r(path);
    CHECK(r.size() == 0);
    CHECK(test::python("import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
                       "print(len(z.namelist()), z.testzip())",
                       path) == "0 None\n");
  }

  TEST_CASE("refuses a file with no member to recover") {
    const std::string path = test::scratch("nothing.npz");
    std::ofstream(path) << "no zip here";
    CHECK_THROWS_WITH_AS(mmnpz::recover(path),
                         (path + " at offset 0: no local header found: nothing to recover").c_str(),
                         mmnpz::error);
  }
}

TEST_SUITE("recover") {
  TEST_CASE(
      "an append cut at any length opens with the old members, and recover restores every "
      "member whose bytes were complete") {
    const std::string base = test::scratch("cut_base.npz");
    {
      mmnpz::writer w(base);
      const double x[] = {1.5, 2.5};
      w.write("old0", x, {2});
      w.write("old1", x, {1});
    }
    const std::string base_bytes = test::read_file(base);
    const std::uint64_t old_size = base_bytes.size();
    {
      mmnpz::writer w(base, {mmnpz::open_mode::append});
      for (std::uint32_t i = 0; i < 12; ++i) {
        const auto v = contents(i * 5);
        w.write("m" + std::to_string(i), v.data(), {v.size()});
      }
    }
    const std::string whole = test::read_file(base);
    std::vector<std::uint64_t> ends;  // where each new member's data ends
    {
      const mmnpz::reader r(base);
      for (std::uint32_t i = 0; i < 12; ++i) {
        const auto v = r["m" + std::to_string(i)];
        ends.push_back(v.file_offset() + v.nbytes());
      }
    }
    std::mt19937_64 rng(2026);
    const std::string path = test::scratch("cut_append.npz");
    for (int round = 0; round < 60; ++round) {
      const std::uint64_t cut = old_size + rng() % (whole.size() - old_size);
      CAPTURE(cut);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, cut);
      {
        const mmnpz::reader r(path);
        CHECK(r.names() == std::vector<std::string>{"old0", "old1"});
        CHECK(r.verify().ok());
        CHECK(r.was_interrupted() == (cut > old_size));
      }
      const auto complete = static_cast<std::size_t>(
          std::count_if(ends.begin(), ends.end(), [cut](std::uint64_t e) { return e <= cut; }));
      const mmnpz::recover_result res = mmnpz::recover(path);
      CHECK(res.members_recovered == 2 + complete);
      const mmnpz::reader r(path);
      CHECK(!r.was_interrupted());
      REQUIRE(r.size() == 2 + complete);
      CHECK(r.verify().ok());
      for (std::size_t i = 0; i < complete; ++i) {
        const auto want = contents(static_cast<std::uint32_t>(i * 5));
        const auto got = r["m" + std::to_string(i)];
        REQUIRE(got.nbytes() == want.size());
        CHECK(std::equal(want.begin(), want.end(), got.data_as<std::uint8_t>()));
      }
      CHECK(test::read_file(path).compare(0, old_size, base_bytes) == 0);
    }
  }

  TEST_CASE("removes the temporary files that dead replacing writers left") {
    const std::string path = test::scratch("stale.npz");
    {
      mmnpz::writer w(path);
      const double x = 1;
      w.write("x", &x, {});
    }
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);  // a process id that is gone
    const std::string stale =
        std::string(MMNPZ_TEST_TMP) + "/.stale.npz.mmnpz-tmp-" + std::to_string(pid) + "-3";
    const std::string live =
        std::string(MMNPZ_TEST_TMP) + "/.stale.npz.mmnpz-tmp-" + std::to_string(::getppid()) + "-1";
    std::ofstream(stale) << "partial";
    std::ofstream(live) << "partial";
    CHECK(mmnpz::recover(path).directory_was_intact);
    CHECK(::access(stale.c_str(), F_OK) != 0);
    CHECK(::access(live.c_str(), F_OK) == 0);  // its process is alive
    std::remove(live.c_str());
  }
}

TEST_SUITE("recover") {
  TEST_CASE("a file cut while recover reads it gives an error saying where it now ends, not a "
            "SIGBUS, and recover writes nothing") {
    // Member a intact, member b damaged, then a 2 GiB hole: recover reads all of it (only
    // zeros after a damaged member make it an interrupted write), and the file is cut to 8 KiB
    // past b meanwhile.
    const std::string path = test::scratch("cut_while_recovering.npz");
    std::uint64_t b_end = 0;
    {
      mmnpz::writer w(path);
      const auto a = contents(3), b = contents(4);
      w.write("a", a.data(), {a.size()});
      w.write("b", b.data(), {b.size()});
    }
    {
      const mmnpz::reader r(path);
      b_end = r["b"].file_offset() + r["b"].nbytes();
    }
    const std::uint64_t cut = b_end + 8192;
    {
      std::string bytes = test::read_file(path).substr(0, b_end);
      bytes[b_end - 1] = static_cast<char>(bytes[b_end - 1] ^ 0x5A);  // b's CRC-32 fails
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      REQUIRE(::truncate(path.c_str(), std::int64_t{2} << 30) == 0);
    }
    // 200 ms: recover is reading zeros.
    const std::string what = test::cut_while_running(path, cut, 200, [&] { mmnpz::recover(path); });
    CAPTURE(what);
    CHECK(test::is_cut_error(what, path, cut));
    CHECK(test::read_file(path).size() == cut);  // no directory was written
    ::unlink(path.c_str());
  }
}
