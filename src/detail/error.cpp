#include "mmnpz/error.hpp"

#include <cstring>

namespace mmnpz {
namespace {

// The one place every message is built: "cannot <detail> '<path>': <strerror>" for OS errors,
// "<path>: member '<m>' at offset <o>: <detail>" otherwise, leaving out what is not known.
std::string make_message(errc code, const std::string& path, const std::string& member,
                         std::uint64_t offset, const std::string& detail, int sys_errno) {
  if (code == errc::io) {
    std::string msg = "cannot " + detail + " '" + path + "'";
    if (sys_errno != 0) msg += std::string(": ") + std::strerror(sys_errno);
    return msg;
  }
  // Without a path (a header parsed from memory, say), the message starts with what is known:
  // it began with a blank (" at offset 20: ...") or a colon.
  std::string where = path;
  if (!member.empty()) where += (where.empty() ? "member '" : ": member '") + member + "'";
  if (offset != error::no_offset) {
    where += (where.empty() ? "at offset " : " at offset ") + std::to_string(offset);
  }
  return where.empty() ? detail : where + ": " + detail;
}

}  // namespace

error::error(errc code, std::string path, std::string member, std::uint64_t offset,
             const std::string& detail, int sys_errno)
    : std::runtime_error(make_message(code, path, member, offset, detail, sys_errno)),
      code_(code),
      path_(std::move(path)),
      member_(std::move(member)),
      offset_(offset),
      errno_(sys_errno),
      detail_(detail) {}

}  // namespace mmnpz
