// update_member_crc(): the CRC-32 fields of a stored member edited in place.
#include <cstring>
#include <string>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "mmnpz/writer.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {

std::uint32_t update_member_crc(std::byte* archive, std::uint64_t size, std::size_t index,
                                const std::string& name) {
  const zip::directory d = zip::read_directory(archive, size, name);
  if (index >= d.members.size()) {
    throw errors::not_found(name, {}, error::no_offset,
                            "no member at index " + std::to_string(index) + " (the archive has " +
                                std::to_string(d.members.size()) + ")");
  }
  const member_info& m = d.members[index];
  if (m.method != zip::method_stored || (m.flags & zip::flag_data_descriptor)) {
    throw errors::unsupported(name, m.name, m.local_header_offset,
                              m.method != zip::method_stored
                                  ? "a deflated member cannot be changed in place"
                                  : "its CRC-32 follows in a data descriptor and cannot be "
                                    "changed in place");
  }
  const detail::context ctx{name, m.name};
  detail::byte_reader local(archive + m.local_header_offset, d.cd_offset - m.local_header_offset,
                            m.local_header_offset, ctx, errc::corrupt_zip);
  const zip::local_header h = zip::parse_local_header(local);
  if (m.compressed_size > local.remaining()) {
    local.fail("data runs into the central directory at " + std::to_string(d.cd_offset));
  }
  const std::uint32_t crc = detail::crc32(0, archive + h.data_offset, m.compressed_size);
  if (crc == m.crc32) return crc;
  // The directory entry: walk the directory to it (this runs once per edited member).
  detail::byte_reader cd(archive + d.cd_offset, d.cd_size, d.cd_offset, ctx, errc::corrupt_zip);
  std::string converted;
  std::uint64_t entry = 0;
  for (std::size_t i = 0; i <= index; ++i) entry = zip::parse_central_entry(cd, i, converted).offset;
  const std::string field = zip::crc_field(crc);
  std::memcpy(archive + h.offset + zip::local_crc_offset, field.data(), field.size());
  std::memcpy(archive + entry + zip::central_crc_offset, field.data(), field.size());
  return crc;
}

}  // namespace mmnpz
