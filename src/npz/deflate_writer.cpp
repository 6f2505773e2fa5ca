// writer::write_deflated and write_bytes_deflated: members compressed with zlib's deflate in
// memory, then written whole by writer::write_encoded (writer.cpp). Kept apart from the
// stored-member path, which streams and aligns, because a deflated member does neither.
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>

#include "detail/errors.hpp"
#include "mmnpz/npy.hpp"
#include "mmnpz/writer.hpp"
#include "npz/npy_plan.hpp"
#include "zip/crc32.hpp"
#include "zip/format.hpp"

namespace mmnpz {

namespace {

// zlib takes at most UINT_MAX bytes per call: larger inputs are fed in pieces of this size.
constexpr std::size_t deflate_piece = std::size_t{1} << 30;

// Raw deflate (no zlib header, as ZIP wants) of the concatenation of `parts`, with the CRC-32
// of the uncompressed bytes.
struct deflated {
  std::string bytes;
  std::uint32_t crc = 0;
  std::uint64_t size = 0;
};

struct input {
  const unsigned char* data;
  std::size_t n;
};

deflated deflate_parts(const std::string& path, std::string_view name, int level,
                       std::initializer_list<input> parts) {
  if (level < -1 || level > 9) {
    throw errors::invalid_argument(path, name, error::no_offset,
                                   "compression level " + std::to_string(level) +
                                       " is not from 0 to 9 (or -1 for zlib's default)");
  }
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw errors::invalid_argument(path, name, error::no_offset, "zlib cannot start deflating");
  }
  deflated out;
  std::uint64_t total = 0;
  for (const input& p : parts) total += p.n;
  // deflateBound is exact enough to make one allocation in the common case.
  out.bytes.resize(static_cast<std::size_t>(std::min<std::uint64_t>(
      deflateBound(&z, static_cast<uLong>(std::min<std::uint64_t>(total, ULONG_MAX))),
      total + (total >> 10) + 1024)));
  std::size_t produced = 0;
  const auto run = [&](int flush) {
    int rc = Z_OK;
    do {
      if (produced == out.bytes.size()) out.bytes.resize(out.bytes.size() * 2 + 4096);
      const std::size_t room = std::min(out.bytes.size() - produced, deflate_piece);
      z.next_out = reinterpret_cast<Bytef*>(&out.bytes[produced]);
      z.avail_out = static_cast<uInt>(room);
      rc = deflate(&z, flush);
      produced += room - z.avail_out;
      // Again while output room ran out, or input or the end is pending; never after an
      // error (returned, and refused by the caller at the end).
    } while ((rc == Z_OK || rc == Z_BUF_ERROR) &&
             (z.avail_out == 0 || (rc == Z_OK && (z.avail_in != 0 || flush == Z_FINISH))));
    return rc;
  };
  int rc = Z_OK;
  for (const input& p : parts) {
    out.crc = detail::crc32(out.crc, p.data, p.n);
    for (std::size_t done = 0; done < p.n && rc != Z_STREAM_ERROR;) {
      const std::size_t k = std::min(deflate_piece, p.n - done);
      z.next_in = const_cast<Bytef*>(p.data + done);
      z.avail_in = static_cast<uInt>(k);
      rc = run(Z_NO_FLUSH);
      done += k;
    }
  }
  z.next_in = nullptr;
  z.avail_in = 0;
  if (rc != Z_STREAM_ERROR) rc = run(Z_FINISH);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    throw errors::invalid_argument(path, name, error::no_offset, "zlib could not deflate the data");
  }
  out.bytes.resize(produced);
  out.bytes.shrink_to_fit();
  out.size = total;
  return out;
}

}  // namespace

void writer::write_deflated(std::string_view name, const void* data, const dtype& type,
                            const std::vector<std::uint64_t>& shape, bool fortran_order,
                            int level) {
  // The checks of write() that need no writer state, before any work; write_encoded() checks
  // the name.
  const auto refuse = [&](const std::string& why) {
    throw errors::invalid_argument(path(), std::string(name) + ".npy", error::no_offset, why);
  };
  const detail::npy_plan p = detail::plan_npy(type, shape, fortran_order);
  if (!p.refusal.empty()) refuse(p.refusal);
  if (p.nbytes > SIZE_MAX) refuse("the array's size overflows");  // compressed in memory
  const std::uint64_t nbytes = p.nbytes;
  if (nbytes > 0 && data == nullptr) refuse("no data given for a non-empty array");
  const std::string& header = p.header;
  const deflated d =
      deflate_parts(path(), name, level,
                    {{reinterpret_cast<const unsigned char*>(header.data()), header.size()},
                     {static_cast<const unsigned char*>(data), static_cast<std::size_t>(nbytes)}});
  write_encoded(name, ".npy", zip::method_deflated, d.bytes, d.crc, d.size);
}

void writer::write_bytes_deflated(std::string_view name, const void* data, std::size_t n,
                                  int level) {
  if (n > 0 && data == nullptr) {
    throw errors::invalid_argument(path(), name, error::no_offset,
                                   "no data given for a non-empty member");
  }
  const deflated d =
      deflate_parts(path(), name, level, {{static_cast<const unsigned char*>(data), n}});
  write_encoded(name, "", zip::method_deflated, d.bytes, d.crc, d.size);
}

}  // namespace mmnpz
