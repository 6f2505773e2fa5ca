// Fuzz target for the reader and the ZIP codec (fuzz_codec.cpp): opens an archive from bytes,
// lists it, decodes every member (also streamed by read(), and its .npy header alone by
// array_header()) and verifies it. Then what must never lose data: update_member_crcs() on a
// copy in memory and, on the input written to a file, recover() and an appending writer; and
// gather() of that file as a dataset, by reads and through the mapping, and a reader of the
// file, compared with the reader of the bytes in memory. Any mmnpz::error is an expected answer to a malformed input;
// anything else (another exception, a sanitizer report, a broken invariant) is a bug and
// escapes to the fuzzer. Built with libFuzzer under -DMMNPZ_FUZZ=ON, and in every build into
// fuzz_replay, which runs the saved corpus as an ordinary test.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_codec.hpp"
#include "mmnpz/data/dataset.hpp"
#include "mmnpz/data/gather.hpp"
#include "mmnpz/npy.hpp"
#include "mmnpz/reader.hpp"
#include "mmnpz/writer.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace {

// A broken invariant is a bug: it escapes as an exception other than mmnpz::error.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::logic_error("fuzz_reader: invariant broken: " + what);
}

// Every member's bytes and array data must lie inside what keeps them alive: for mapped
// members, inside the file. Checked explicitly because the in-memory copy of the file is
// rounded up to a page, so a small overread would not be seen by AddressSanitizer.
bool inside(const std::byte* p, std::uint64_t n, const std::byte* lo, std::uint64_t size) {
  return p >= lo && static_cast<std::uint64_t>(p - lo) <= size &&
         n <= size - static_cast<std::uint64_t>(p - lo);
}

// Reads every byte, so that a sanitizer sees any byte that is not there.
std::uint64_t checksum(const std::byte* p, std::uint64_t n) {
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < n; ++i) sum = sum * 31 + static_cast<std::uint8_t>(p[i]);
  return sum;
}

// Typed access either works or raises mmnpz::error (type_mismatch, misaligned).
std::uint64_t typed_access(const mmnpz::array_view& a) {
  std::uint64_t sum = 0;
  const auto attempt = [&](auto get) {
    try {
      sum += reinterpret_cast<std::uintptr_t>(get()) & 1;
    } catch (const mmnpz::error& e) {
      sum += static_cast<std::uint64_t>(e.code());
    }
  };
  attempt([&] { return a.data_as<double>(); });
  attempt([&] { return a.data_as<std::int32_t>(mmnpz::alignment_check::allow_misaligned); });
  attempt([&] { return a.data_as<std::uint8_t>(); });
  attempt([&] { return a.data_as<bool>(); });
  return sum;
}

// What the reader accepted, mmnpz writes back in a header that reads as the same array (so
// here even mmnpz::error is a bug).
void check_header_round_trip(const mmnpz::array_view& a) {
  const mmnpz::dtype& t = a.type();
  try {
    require(mmnpz::parse_descr(t.descr()) == t, "descr() does not parse back to the dtype");
    if (a.nbytes() > (1u << 16)) return;
    std::string npy = mmnpz::make_npy_header(t, a.shape(), a.fortran_order());
    npy.append(reinterpret_cast<const char*>(a.data()), a.nbytes());
    const mmnpz::npy_header h = mmnpz::read_npy_header(npy.data(), npy.size());
    require(h.type == t && h.shape == a.shape() && h.fortran_order == a.fortran_order() &&
                h.nbytes == a.nbytes(),
            "make_npy_header() does not read back as the array");
  } catch (const mmnpz::error& e) {
    require(false, "the header mmnpz writes for " + t.descr() + " does not read: " + e.what());
  }
}

// What read() streamed of a member: its pieces joined, or the error that ended it.
struct streamed {
  std::string contents;
  std::optional<mmnpz::error> failure;
};

// Every piece but the last has `chunk` bytes, the last one 1 to `chunk`.
streamed read_in_pieces(const mmnpz::reader& r, std::size_t i, std::size_t chunk) {
  streamed s;
  std::size_t previous = chunk;
  try {
    r.read(
        i,
        [&](const std::byte* p, std::size_t n) {
          require(previous == chunk, "read() handed out a short piece before the last");
          require(n > 0 && n <= chunk, "read() handed out a piece of " + std::to_string(n) +
                                           " bytes in pieces of " + std::to_string(chunk));
          previous = n;
          s.contents.append(reinterpret_cast<const char*>(p), n);
        },
        chunk);
  } catch (const mmnpz::error& e) {
    s.failure = e;
  }
  return s;
}

std::string what(const std::optional<mmnpz::error>& e) { return e ? e->what() : "no error"; }

std::uint64_t exercise_member(const mmnpz::reader& r, std::size_t i,
                              const mmnpz::bytes_view& file) {
  std::uint64_t sum = 0;
  const mmnpz::member_info& m = r.member(i);
  sum += m.crc32 + m.compressed_size + m.uncompressed_size + m.name.size();
  // The last member of a name wins, as in numpy.
  const auto found = r.find(m.name);
  require(found && *found >= i && r.member(*found).name == m.name,
          "a member's own name does not resolve to it or a later namesake");

  // Before bytes() and array() decode the member: read() inflates it itself, uncached, and
  // array_header() inflates its first bytes only.
  const streamed s = read_in_pieces(r, i, 4096);
  // stored_bytes() reads the data of any method as stored; of a stored member, bytes()'s.
  std::optional<std::vector<std::byte>> stored;
  try {
    stored = r.stored_bytes(i);
    require(stored->size() == m.compressed_size, "stored_bytes() size differs from the "
                                                 "directory's compressed size");
  } catch (const mmnpz::error& e) {
    sum += e.detail().size();
  }
  std::optional<mmnpz::npy_header> header;
  std::optional<mmnpz::error> header_failure;
  try {
    header = r.array_header(i);
  } catch (const mmnpz::error& e) {
    header_failure = e;
  }

  mmnpz::bytes_view b;
  try {
    b = r.bytes(i);
  } catch (const mmnpz::error& e) {
    require(s.failure && what(s.failure) == e.what(),
            "bytes() failed with '" + std::string(e.what()) + "' but read() with '" +
                what(s.failure) + "'");
    // A stored member fails in its local header, which array_header() reads too; a deflated
    // one may fail after its .npy header.
    require(m.is_deflated() || what(header_failure) == e.what(),
            "bytes() failed with '" + std::string(e.what()) + "' but array_header() with '" +
                what(header_failure) + "'");
    throw;
  }
  require(b.size == m.uncompressed_size, "bytes() size differs from the directory's");
  if (m.method == 0) {
    require(stored && stored->size() == b.size &&
                (b.size == 0 || std::memcmp(stored->data(), b.data, b.size) == 0),
            "stored_bytes() of a stored member differs from bytes()");
  }
  require(b.size == 0 || b.data != nullptr, "bytes() of a non-empty member is null");
  if (b.mapped) require(inside(b.data, b.size, file.data, file.size), "bytes() outside the file");
  sum += checksum(b.data, b.size);
  require(!s.failure, "read() failed where bytes() did not: " + what(s.failure));
  require(s.contents.size() == b.size &&
              (b.size == 0 || std::memcmp(s.contents.data(), b.data, b.size) == 0),
          "read() streamed other contents than bytes() gives");
  std::uint64_t at = 0;  // now from the cache, in pieces of another size
  r.read(
      i,
      [&](const std::byte* p, std::size_t n) {
        require(n <= b.size - at && std::memcmp(p, b.data + at, n) == 0,
                "read() from the cache differs from bytes()");
        at += n;
      },
      1000);
  require(at == b.size, "read() from the cache stopped short of bytes()");

  if (!r.is_array(i)) {
    require(header_failure && header_failure->code() == mmnpz::errc::not_an_array,
            "array_header() of a member that is not an array gave " + what(header_failure));
    return sum;
  }
  mmnpz::array_view a;
  try {
    a = r.array(i);
  } catch (const mmnpz::error& e) {
    if (e.code() == mmnpz::errc::object_array) {
      require(header && header->type.has_object(),
              "array() refused an object array that array_header() did not see");
    } else {
      require(what(header_failure) == e.what(), "array() failed with '" + std::string(e.what()) +
                                                    "' but array_header() with '" +
                                                    what(header_failure) + "'");
    }
    throw;
  }
  require(header.has_value(),
          "array() succeeded where array_header() failed: " + what(header_failure));
  require(header->type == a.type() && header->shape == a.shape() &&
              header->fortran_order == a.fortran_order() && header->nbytes == a.nbytes() &&
              a.data() == b.data + header->data_offset,
          "array_header() and array() disagree");
  const mmnpz::dtype& t = a.type();
  sum += static_cast<std::uint8_t>(t.kind()) + t.itemsize() + t.descr().size() + t.str().size();
  sum += t.fields().size() + t.datetime_unit().size() + (t.has_object() ? 1 : 0);
  require(a.shape().size() == a.strides().size(), "shape and strides differ in length");
  for (auto d : a.shape()) sum += d;
  for (auto s : a.strides()) sum += static_cast<std::uint64_t>(s);
  sum += a.fortran_order() ? 1 : 0;
  require(a.data() != nullptr, "array data is null");
  require(a.is_mapped() == b.mapped, "array and bytes disagree on being mapped");
  require(inside(a.data(), a.nbytes(), b.data, b.size), "array data outside the member");
  if (a.is_mapped()) {
    require(a.file_offset() == static_cast<std::uint64_t>(a.data() - file.data),
            "file_offset() is not where the data lies");
  }
  sum += checksum(a.data(), a.nbytes()) + a.size() + (a.is_aligned(8) ? 1 : 0);
  sum += typed_access(a);
  check_header_round_trip(a);
  return sum;
}

// What a directory says (or the error that stopped it), for comparing two ways of reading it.
std::string summary_of(const std::function<mmnpz::zip::directory()>& read) {
  try {
    const mmnpz::zip::directory d = read();
    std::string out = std::to_string(d.cd_offset) + " " + std::to_string(d.archive_end) + " " +
                      std::to_string(d.leading_bytes) + " " + std::string(d.comment) + "|";
    for (const auto& m : d.members) {
      out += std::string(m.name) + " " + std::to_string(m.local_header_offset) + " " +
             std::to_string(m.compressed_size) + "|";
    }
    return out;
  } catch (const mmnpz::error& e) {
    return std::string("error: ") + e.what();
  }
}

// Opening by reads, as the reader opens a file: the last `first` bytes, more when the end
// record's search asks for them (never more than its window), and everything else before them
// read in pieces: the central directory, the zip64 records, a search from the file's start.
// It must say what reading the whole file says.
void check_opening_by_reads(const std::byte* data, std::size_t size, std::uint64_t first) {
  const std::string path = "fuzz.npz";
  const std::string whole =
      summary_of([&] { return mmnpz::zip::read_directory(data, size, path); });
  const mmnpz::zip::piece_reader read = [&](std::byte* dst, std::uint64_t n, std::uint64_t at) {
    require(at <= size && n <= size - at, "a piece read past the end of the file");
    std::memcpy(dst, data + at, static_cast<std::size_t>(n));
  };
  const std::string by_reads = summary_of([&] {
    std::uint64_t offset = size - std::min<std::uint64_t>(size, first);
    while (true) {
      std::uint64_t need = 0;
      if (auto d = mmnpz::zip::read_directory_tail(data + offset, offset, size, path, need, read)) {
        return std::move(*d);
      }
      require(need < offset, "read_directory_tail asked for no new bytes");
      require(size - need <= mmnpz::zip::end_search_window,
              "read_directory_tail asked for more than the end record's window");
      offset = need;
    }
  });
  require(whole == by_reads,
          "opening by reads says '" + by_reads + "', the whole file '" + whole + "'");
}

// update_member_crcs() on a copy of the input, for its stored members (or member 0 when the
// reader refuses the input): an error, or CRC-32s that the directory then states and the
// members' bytes have, after which a second call writes nothing.
void check_crc_update(const std::uint8_t* data, std::size_t size) {
  std::vector<std::size_t> stored;
  try {
    const mmnpz::reader r = mmnpz::reader::from_bytes(data, size, "fuzz.npz");
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!r.member(i).is_deflated() && !r.member(i).has_data_descriptor()) stored.push_back(i);
    }
  } catch (const mmnpz::error&) {
  }
  if (stored.empty()) stored.push_back(0);
  std::string copy(reinterpret_cast<const char*>(data), size);
  auto* p = reinterpret_cast<std::byte*>(copy.data());
  std::vector<std::uint32_t> crcs;
  try {
    crcs = mmnpz::update_member_crcs(p, size, stored, "fuzz.npz");
  } catch (const mmnpz::error&) {
    return;
  }
  require(crcs.size() == stored.size(), "update_member_crcs() returned a CRC-32 per index");
  const std::string once = copy;
  require(mmnpz::update_member_crcs(p, size, stored, "fuzz.npz") == crcs && copy == once,
          "a second update_member_crcs() changed the archive");
  const mmnpz::reader r = mmnpz::reader::from_bytes(p, size, "fuzz.npz");
  for (std::size_t k = 0; k < stored.size(); ++k) {
    require(r.member(stored[k]).crc32 == crcs[k], "the directory states another CRC-32");
    try {
      const mmnpz::bytes_view b = r.bytes(stored[k]);
      require(mmnpz::detail::crc32(0, b.data, b.size) == crcs[k],
              "update_member_crcs() returned another CRC-32 than the member's bytes have");
    } catch (const mmnpz::error&) {
    }
  }
}

// A file of this process's own to hand the input to recover() and to an appending writer:
// in $MMNPZ_FUZZ_SCRATCH when set (scripts/fuzz.sh removes it however the fuzzer ends), else
// in a directory of /dev/shm when there is one (the target runs it for every input) removed
// at exit.
const std::string& scratch_file() {
  static const std::string path = [] {
    if (const char* given = std::getenv("MMNPZ_FUZZ_SCRATCH")) {
      return std::string(given) + "/input.npz";
    }
    std::string dir = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    dir += "/mmnpz-fuzz-XXXXXX";
    require(mkdtemp(dir.data()) != nullptr, "cannot make a scratch directory");
    static const std::string kept = dir;
    std::atexit([] { std::filesystem::remove_all(kept); });
    return dir + "/input.npz";
  }();
  return path;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_input(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  require(static_cast<bool>(out.flush()), "cannot write the scratch file");
}

// Whether the input opens as an archive with nothing appended after it.
bool opens_whole(const std::uint8_t* data, std::size_t size) {
  try {
    return !mmnpz::reader::from_bytes(data, size, "fuzz.npz").was_interrupted();
  } catch (const mmnpz::error&) {
    return false;
  }
}

// recover() never loses what is stored: it leaves an archive that opens as it is, leaves the
// file as it was when it refuses, and otherwise keeps members whose bytes are those of the
// input at the same offsets, in an archive that opens and verifies.
void check_recover(const std::uint8_t* data, std::size_t size, bool opens) {
  const std::string& path = scratch_file();
  const std::string input(reinterpret_cast<const char*>(data), size);
  write_input(path, data, size);
  mmnpz::recover_result done;
  try {
    done = mmnpz::recover(path);
  } catch (const mmnpz::error& e) {
    require(file_bytes(path) == input,
            "recover() refused with '" + std::string(e.what()) + "' and changed the file");
    require(!opens, "recover() refused an archive that opens: " + std::string(e.what()));
    return;
  }
  const std::string after = file_bytes(path);
  if (done.directory_was_intact) {
    require(after == input, "recover() found the directory intact and changed the file");
    return;
  }
  require(!opens, "recover() rebuilt the directory of an archive that opens");
  require(after.size() == done.bytes_kept, "recover() says another size than the file's");
  try {
    const mmnpz::reader r(path);
    require(r.size() == done.members_recovered && r.names().size() == done.names.size(),
            "recover() says other members than the archive it left holds");
    require(r.verify().ok(), "recover() kept a member that does not verify");
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::uint64_t at = r.member(i).local_header_offset;
      const std::uint64_t n = mmnpz::zip::local_header_size + r.member(i).compressed_size;
      require(at + n <= input.size() && after.compare(at, n, input, at, n) == 0,
              "recover() kept member " + std::to_string(i) + " with other bytes than the input's");
    }
  } catch (const mmnpz::error& e) {
    require(false, "recover() left an archive that does not open: " + std::string(e.what()));
  }
}

// An appending writer never loses what is stored: the input stays a prefix of the file
// whether it refuses or appends, and after an append every member that was there is listed as
// it was, and the new one reads back.
void check_append(const std::uint8_t* data, std::size_t size, bool opens) {
  const std::string& path = scratch_file();
  const std::string input(reinterpret_cast<const char*>(data), size);
  write_input(path, data, size);
  const std::int32_t added[3] = {7, -1, 1 << 30};
  try {
    mmnpz::writer w(path, {mmnpz::open_mode::append});
    w.write("fuzz_appended", added, {3});
    w.close();
  } catch (const mmnpz::error& e) {
    const std::string after = file_bytes(path);
    require(after.size() >= input.size() && after.compare(0, input.size(), input) == 0,
            "an append refused with '" + std::string(e.what()) + "' and changed stored bytes");
    return;
  }
  const std::string after = file_bytes(path);
  require(after.size() > input.size() && after.compare(0, input.size(), input) == 0,
          "an append changed bytes of the archive it appended to");
  if (size == 0) return;  // a new archive
  require(opens, "an append went ahead on an archive that does not open");
  try {
    const mmnpz::reader before = mmnpz::reader::from_bytes(data, size, "fuzz.npz");
    const mmnpz::reader r(path);
    require(r.size() == before.size() + 1, "an append lost or added members");
    for (std::size_t i = 0; i < before.size(); ++i) {
      const mmnpz::member_info& a = before.member(i);
      const mmnpz::member_info& b = r.member(i);
      require(a.name == b.name && a.crc32 == b.crc32 && a.compressed_size == b.compressed_size &&
                  a.local_header_offset == b.local_header_offset,
              "an append changed member " + std::to_string(i) + "'s directory entry");
    }
    const mmnpz::array_view v = r.array("fuzz_appended");
    require(v.nbytes() == sizeof added && std::memcmp(v.data(), added, sizeof added) == 0,
            "the appended member does not read back");
  } catch (const mmnpz::error& e) {
    require(false, "an append left an archive that does not read: " + std::string(e.what()));
  }
}

// How listing() shows an array member (dtype, number of axes, bytes, a checksum of its bytes)
// and a member that is no array (a checksum of its bytes).
std::string array_item(const mmnpz::array_view& a) {
  return a.type().descr() + " " + std::to_string(a.shape().size()) + " " +
         std::to_string(a.nbytes()) + " " + std::to_string(checksum(a.data(), a.nbytes()));
}

std::string bytes_item(const mmnpz::bytes_view& b) {
  return "bytes " + std::to_string(checksum(b.data, b.size));
}

// What a reader makes of member i, as listing() shows it: array_item(), bytes_item() or the
// error that stopped it.
std::string item_of(const mmnpz::reader& r, std::size_t i) {
  try {
    return r.is_array(i) ? array_item(r.array(i)) : bytes_item(r.bytes(i));
  } catch (const mmnpz::error& e) {
    return e.what();
  }
}

// What a reader makes of every member: its array (dtype, shape, a checksum of its bytes), its
// bytes when it is no array, or the error that stopped it.
std::string listing(const std::function<mmnpz::reader()>& open, bool decode_first) {
  std::string out;
  try {
    const mmnpz::reader r = open();
    if (decode_first) {
      std::vector<std::size_t> all(r.size());
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
      r.decode(all);
    }
    for (std::size_t i = 0; i < r.size(); ++i) out += item_of(r, i) + "|";
  } catch (const mmnpz::error& e) {
    out += std::string("open: ") + e.what();
  }
  return out;
}

// listing() through visit_arrays() (headers read in file order, cached nowhere) for the
// members that are not deflated, as listing() for the deflated ones.
std::string visited_listing(const std::function<mmnpz::reader()>& open) {
  std::string out;
  try {
    const mmnpz::reader r = open();
    std::vector<std::size_t> all(r.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<std::string> items(r.size());
    std::vector<bool> visited(r.size());
    r.visit_arrays(all, [&](std::size_t i, const mmnpz::array_view& a, std::exception_ptr failure) {
      require(!visited[i], "visit_arrays() visited member " + std::to_string(i) + " twice");
      visited[i] = true;
      if (a) {
        items[i] = array_item(a);
        return;
      }
      try {
        std::rethrow_exception(failure);
      } catch (const mmnpz::error& e) {
        if (e.code() != mmnpz::errc::not_an_array) {
          items[i] = e.what();
          return;
        }
      }
      try {
        items[i] = bytes_item(r.bytes(i));
      } catch (const mmnpz::error& e) {
        items[i] = e.what();
      }
    });
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!visited[i]) {
        require(r.member(i).is_deflated(), "visit_arrays() skipped member " + std::to_string(i) +
                                               ", which is not deflated");
        items[i] = item_of(r, i);
      }
      out += items[i] + "|";
    }
  } catch (const mmnpz::error& e) {
    out += std::string("open: ") + e.what();
  }
  return out;
}

// A reader of the file (headers read with pread, alone or a window of members at a time) says
// what a reader of the same bytes in memory says.
void check_reading_the_file(const std::uint8_t* data, std::size_t size) {
  const std::string& path = scratch_file();
  write_input(path, data, size);
  const std::string in_memory =
      listing([&] { return mmnpz::reader::from_bytes(data, size, path); }, false);
  for (const bool decode_first : {false, true}) {
    const std::string from_file = listing([&] { return mmnpz::reader(path); }, decode_first);
    require(from_file == in_memory, std::string("a reader of the file") +
                                        (decode_first ? " (decode() first)" : "") + " says '" +
                                        from_file + "', of the bytes in memory '" + in_memory +
                                        "'");
  }
  const std::string visited = visited_listing([&] { return mmnpz::reader(path); });
  require(visited == in_memory, "visit_arrays() of the file says '" + visited +
                                    "', a reader of the bytes in memory '" + in_memory + "'");
}

// gather() of the input as a dataset: by reads and through the mapping, the same outcome,
// and excerpts (3 rows from row 1, padded with zeros) equal to the items' own rows.
void check_gather(const std::uint8_t* data, std::size_t size) {
  const std::string& path = scratch_file();
  write_input(path, data, size);
  mmnpz::dataset_options o;
  o.threads = 1;
  std::optional<mmnpz::dataset> ds;
  try {
    ds.emplace(path, o);
  } catch (const mmnpz::error&) {
    return;
  }
  std::vector<std::int64_t> items;
  for (std::size_t i = 0; i < ds->size() && items.size() < 8; ++i) {
    if (ds->layout_id(i) == ds->layout_id(0)) items.push_back(static_cast<std::int64_t>(i));
  }
  if (items.empty()) return;
  const std::uint64_t row = ds->layout(0).row_bytes;
  constexpr std::uint64_t rows = 3;
  if (row == 0 || row > (1u << 16)) return;
  const std::vector<std::int64_t> starts(items.size(), 1);
  const std::size_t bytes = static_cast<std::size_t>(items.size() * rows * row);
  std::string outcome[2];
  std::vector<std::byte> out[2];
  const mmnpz::io_mode modes[2] = {mmnpz::io_mode::read, mmnpz::io_mode::map};
  for (int k = 0; k < 2; ++k) {
    out[k].assign(bytes, std::byte{0x55});
    mmnpz::excerpt_options e;
    e.length = rows;
    e.pad = mmnpz::pad_mode::fill;
    e.threads = 1;
    e.io = modes[k];
    try {
      mmnpz::gather(*ds, items.data(), starts.data(), items.size(), out[k].data(), bytes, e);
      outcome[k] = "done";
    } catch (const mmnpz::error& err) {
      outcome[k] = err.what();
    }
  }
  require(outcome[0] == outcome[1],
          "gather by reads says '" + outcome[0] + "', through the mapping '" + outcome[1] + "'");
  if (outcome[0] != "done") return;
  require(out[0] == out[1], "gather by reads and through the mapping copied other bytes");
  for (std::size_t k = 0; k < items.size(); ++k) {
    const mmnpz::array_view a = ds->array(static_cast<std::size_t>(items[k]));
    const std::uint64_t length = ds->length(static_cast<std::size_t>(items[k]));
    const std::uint64_t have = length > 1 ? std::min(rows, length - 1) : 0;
    const std::byte* got = out[0].data() + k * rows * row;
    if (!a.fortran_order() || a.shape().size() == 1) {
      require(std::memcmp(got, a.data() + row, static_cast<std::size_t>(have * row)) == 0,
              "gather copied other rows than the item's");
    }
    for (std::uint64_t b = have * row; b < rows * row; ++b) {
      require(got[b] == std::byte{0}, "gather padded with other bytes than zeros");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  volatile std::uint64_t sink = 0;
  fuzz_codec(data, size);
  check_crc_update(data, size);
  const bool opens = opens_whole(data, size);
  check_recover(data, size, opens);
  check_append(data, size, opens);
  check_gather(data, size);
  check_reading_the_file(data, size);
  for (std::uint64_t first : {std::uint64_t{1}, std::uint64_t{64}, std::uint64_t{16384}}) {
    check_opening_by_reads(reinterpret_cast<const std::byte*>(data), size, first);
  }
  try {
    // verify() of a reader that decoded nothing streams deflated members through read().
    const mmnpz::verify_result streamed_verify =
        mmnpz::reader::from_bytes(data, size, "fuzz.npz").verify();
    const mmnpz::reader r = mmnpz::reader::from_bytes(data, size, "fuzz.npz");
    const mmnpz::bytes_view file = r.file_bytes();
    require(file.size == size, "file_bytes() size differs from the input");
    sink = sink + r.comment().size() + r.leading_bytes() + (r.is_zip64() ? 1 : 0);
    const auto names = r.names();
    require(names.size() == r.size(), "names() and size() disagree");
    for (const auto& n : names) require(r.contains(n), "a key from names() does not resolve");
    for (std::size_t i = 0; i < r.size(); ++i) {
      try {
        sink = sink + exercise_member(r, i, file);
      } catch (const mmnpz::error& e) {
        sink = sink + e.detail().size();
      }
    }
    const mmnpz::verify_result v = r.verify();
    require(v.members_checked == r.size(), "verify() skipped members");
    require(streamed_verify.members_checked == v.members_checked &&
                streamed_verify.bytes_checked == v.bytes_checked &&
                streamed_verify.failures.size() == v.failures.size(),
            "verify() streaming and verify() of decoded members disagree");
    for (std::size_t k = 0; k < v.failures.size(); ++k) {
      require(std::string(streamed_verify.failures[k].what()) == v.failures[k].what(),
              "verify() streaming says '" + std::string(streamed_verify.failures[k].what()) +
                  "', verify() of decoded members '" + v.failures[k].what() + "'");
    }
    sink = sink + v.bytes_checked + v.failures.size();
  } catch (const mmnpz::error& e) {
    sink = sink + std::string(e.what()).size();
  }
  return 0;
}
