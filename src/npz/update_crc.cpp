// update_member_crcs(): the CRC-32 fields of stored members edited in place.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/sigbus_guard.hpp"
#include "mmnpz/writer.hpp"
#include "npz/directory_reads.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {
namespace {

// The archive's bytes (a shared mapping of its file, written through numpy's "r+" views),
// reached only through guarded copies: a page the file no longer has (it was cut since it was
// mapped) becomes an error naming its offset instead of SIGBUS.
class guarded_archive {
 public:
  guarded_archive(std::byte* archive, const std::string& name)
      : archive_(archive), name_(name) {
    detail::guard_sigbus();
  }

  // Copies the n bytes at `offset` (within the archive) to `dst`.
  void read(std::byte* dst, std::uint64_t n, std::uint64_t offset,
            std::string_view member = {}) const {
    detail::mapped_copy job{archive_ + offset, n, dst};
    detail::run_guarded(job.from, n, offset, &detail::mapped_copy::run, &job, name_, member, -1);
  }

  // Writes the bytes of `field` at `offset` (within the archive).
  void write(std::uint64_t offset, const std::string& field, std::string_view member) const {
    detail::mapped_copy job{reinterpret_cast<const std::byte*>(field.data()), field.size(),
                            archive_ + offset};
    detail::run_guarded(job.to, job.n, offset, &detail::mapped_copy::run, &job, name_, member,
                        -1);
  }

  // The CRC-32 of the n bytes at `offset`.
  std::uint32_t crc32(std::uint64_t offset, std::uint64_t n, std::string_view member) const {
    detail::mapped_crc32 job{archive_ + offset, n};
    detail::run_guarded(job.p, n, offset, &detail::mapped_crc32::run, &job, name_, member, -1);
    return job.crc;
  }

 private:
  std::byte* archive_;
  const std::string& name_;
};

// The offsets of the central-directory entries `wanted` (sorted, distinct, each below
// d.members.size()): one walk of the directory from its start to the last of them, read in
// pieces.
std::vector<std::uint64_t> entry_offsets(const guarded_archive& bytes, const zip::directory& d,
                                         const std::vector<std::size_t>& wanted,
                                         const detail::context& ctx) {
  std::vector<std::uint64_t> found;
  found.reserve(wanted.size());
  std::vector<std::byte> piece(std::size_t{1} << 16);
  std::uint64_t piece_at = 0, piece_len = 0;  // `piece` holds [piece_at, piece_at + piece_len)
  const std::uint64_t end = d.cd_offset + d.cd_size;
  std::uint64_t at = d.cd_offset;
  for (std::size_t i = 0;; ++i) {
    if (i == wanted[found.size()]) {
      found.push_back(at);
      if (found.size() == wanted.size()) return found;
    }
    if (at + zip::central_header_size > piece_at + piece_len) {
      piece_at = at;
      piece_len = std::min<std::uint64_t>(piece.size(), end - std::min(end, at));
      bytes.read(piece.data(), piece_len, at);
    }
    const std::uint64_t len =
        zip::central_entry_length(piece.data() + (at - piece_at), piece_at + piece_len - at);
    if (len == 0 || len > end - at) {
      // The directory parsed a moment ago: its bytes changed since.
      ctx.fail(errc::corrupt_zip, at,
               "central directory entry " + std::to_string(i) + " does not fit in the directory");
    }
    at += len;
  }
}

// The local header of stored member `index`, read (at most 1 KiB, more when it is longer)
// and parsed, and checked as the reader checks it.
zip::local_header local_header_of(const guarded_archive& bytes, const zip::directory& d,
                                  std::size_t index, const detail::context& ctx) {
  const member_info& m = d.members[index];
  const std::uint64_t room = d.cd_offset - m.local_header_offset;
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(room, 1024)));
  bytes.read(head.data(), head.size(), m.local_header_offset, m.name);
  const std::uint64_t len = zip::local_header_length(head.data(), head.size());
  if (len > head.size()) {
    head.resize(static_cast<std::size_t>(std::min(len, room)));
    bytes.read(head.data(), head.size(), m.local_header_offset, m.name);
  }
  detail::byte_reader local(head.data(), head.size(), m.local_header_offset, ctx,
                            errc::corrupt_zip);
  const zip::local_header h = zip::parse_local_header(local);
  zip::check_local_header(h, d, index, local);
  return h;
}

}  // namespace

std::vector<std::uint32_t> update_member_crcs(std::byte* archive, std::uint64_t size,
                                              const std::vector<std::size_t>& indices,
                                              const std::string& name) {
  if (indices.empty()) return {};
  const guarded_archive bytes(archive, name);
  std::unique_ptr<std::byte[]> tail;
  std::uint64_t tail_offset = 0;
  const zip::directory d = detail::read_directory_by_pieces(
      size, name,
      [&](std::byte* dst, std::uint64_t n, std::uint64_t at) { bytes.read(dst, n, at); }, tail,
      tail_offset);
  // Every index is checked before anything is written.
  for (const std::size_t index : indices) {
    if (index >= d.members.size()) {
      throw errors::not_found(name, {}, error::no_offset,
                              "no member at index " + std::to_string(index) +
                                  " (the archive has " + std::to_string(d.members.size()) + ")");
    }
    const member_info& m = d.members[index];
    if (m.method != zip::method_stored || (m.flags & zip::flag_data_descriptor)) {
      throw errors::unsupported(name, m.name, m.local_header_offset,
                                m.method != zip::method_stored
                                    ? "a deflated member cannot be changed in place"
                                    : "its CRC-32 follows in a data descriptor and cannot be "
                                      "changed in place");
    }
  }
  std::vector<std::size_t> wanted(indices);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const std::vector<std::uint64_t> entries = entry_offsets(bytes, d, wanted, {name});
  // And every local header, as the reader checks it.
  std::vector<std::uint64_t> data_at(wanted.size());
  for (std::size_t k = 0; k < wanted.size(); ++k) {
    const detail::context ctx{name, d.members[wanted[k]].name};
    data_at[k] = local_header_of(bytes, d, wanted[k], ctx).data_offset;
  }
  std::vector<std::uint32_t> crcs(wanted.size());
  for (std::size_t k = 0; k < wanted.size(); ++k) {
    const member_info& m = d.members[wanted[k]];
    crcs[k] = bytes.crc32(data_at[k], m.compressed_size, m.name);
    if (crcs[k] == m.crc32) continue;
    const std::string field = zip::crc_field(crcs[k]);
    bytes.write(m.local_header_offset + zip::local_crc_offset, field, m.name);
    bytes.write(entries[k] + zip::central_crc_offset, field, m.name);
  }
  std::vector<std::uint32_t> out;
  out.reserve(indices.size());
  for (const std::size_t index : indices) {
    out.push_back(crcs[static_cast<std::size_t>(
        std::lower_bound(wanted.begin(), wanted.end(), index) - wanted.begin())]);
  }
  return out;
}

std::uint32_t update_member_crc(std::byte* archive, std::uint64_t size, std::size_t index,
                                const std::string& name) {
  return update_member_crcs(archive, size, {index}, name).front();
}

}  // namespace mmnpz
