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
  std::string msg = path;
  if (!member.empty()) msg += ": member '" + member + "'";
  if (offset != error::no_offset) msg += " at offset " + std::to_string(offset);
  return msg + ": " + detail;
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
