#pragma once

// What the writer and recover() do to files besides writing them: the advisory lock that keeps
// two writers off one archive, and the temporary files that replacing an archive goes through.

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "detail/errors.hpp"

namespace mmnpz::detail {

// The lock is an open-file-description lock (Linux's F_OFD_SETLK): unlike POSIX record locks
// it conflicts between two descriptors of one process (two writers in one process) and is not
// dropped when some other descriptor of the file is closed (a reader opening the archive). It
// lies far beyond any real file's end, so that it never covers data: one byte that every
// writer locks, and one byte at lock_base + 1 + pid that says which process holds it (OFD
// locks do not report a pid themselves).
constexpr off_t lock_base = off_t{1} << 60;

inline bool lock_range(int fd, int cmd, off_t start, off_t len, struct flock& l) {
  l = {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = start;
  l.l_len = len;
  return ::fcntl(fd, cmd, &l) == 0;
}

/// Called by lock_for_writing() before it locks, when set: lets tests replace the file between
/// a writer's open and its lock (see names_file). Set it while no writer is being opened.
inline void (*before_lock_for_testing)(const std::string& path) = nullptr;

/// Takes the writer lock on the open file `fd` (held until it is closed), or throws
/// errc::invalid_argument naming the process that holds it, when the system tells.
inline void lock_for_writing(int fd, const std::string& path) {
  if (before_lock_for_testing) before_lock_for_testing(path);
#ifdef F_OFD_SETLK
  const int set = F_OFD_SETLK;
  const int get = F_OFD_GETLK;
#else
  const int set = F_SETLK;  // per process: two writers in one process are not told apart
  const int get = F_GETLK;
#endif
  struct flock l {};
  if (lock_range(fd, set, lock_base, 1, l)) {
    lock_range(fd, set, lock_base + 1 + ::getpid(), 1, l);  // the name tag: best effort
    return;
  }
  const int err = errno;
  if (err != EAGAIN && err != EACCES) throw errors::os(path, "lock", err);
  std::string who;
  if (lock_range(fd, get, lock_base + 1, off_t{1} << 32, l) && l.l_type != F_UNLCK) {
    const long pid = static_cast<long>(l.l_start - lock_base - 1);
    who = pid == ::getpid() ? " (in this process)" : " (process " + std::to_string(pid) + ")";
  }
  throw errors::invalid_argument(path, "another writer" + who +
                                           " has the archive open; two writers would lose "
                                           "members, so wait until it is closed");
}

/// True when `path` (symbolic links followed) still names the open file `fd`. A writer that
/// opened an archive just before another one renamed a replacement over it, and locked it
/// just after that one let go, holds a file no reader will open again: what it wrote there
/// would be lost.
inline bool names_file(const std::string& path, int fd) {
  struct stat held {}, now {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 &&
         held.st_dev == now.st_dev && held.st_ino == now.st_ino;
}

/// How many times opening for writing starts again when the path was replaced meanwhile.
constexpr int replaced_attempts = 8;

/// The error when the path was replaced each of those times.
inline error replaced_while_opening(const std::string& path) {
  return errors::invalid_argument(path, "the archive was replaced " +
                                            std::to_string(replaced_attempts) +
                                            " times while it was being opened; try again");
}

/// `path` up to and including its last '/' (empty when it has none), and its last component.
inline void split_path(const std::string& path, std::string& dir, std::string& name) {
  const auto slash = path.rfind('/');
  dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  name = slash == std::string::npos ? path : path.substr(slash + 1);
}
inline std::string dir_or_dot(const std::string& dir) { return dir.empty() ? "." : dir; }

/// Temporary files that replace `name` are called ".NAME.mmnpz-tmp-PID-N".
inline std::string temp_prefix(const std::string& name) { return "." + name + ".mmnpz-tmp-"; }

/// A fresh temporary path next to `path`, for this process.
inline std::string temp_path_for(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  std::string dir, name;
  split_path(path, dir, name);
  return dir + temp_prefix(name) + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

/// Removes the temporary files that writers of `path` left when their process died (those
/// whose process no longer exists); best effort, errors are ignored. Returns how many.
inline std::size_t remove_stale_temps(const std::string& path) {
  std::string dir, name;
  split_path(path, dir, name);
  const std::string prefix = temp_prefix(name);
  DIR* d = ::opendir(dir_or_dot(dir).c_str());
  if (!d) return 0;
  std::size_t removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    const char* digits = entry.c_str() + prefix.size();
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '-' || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
    const std::string full = dir + entry;
    if (::unlink(full.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

/// fsync(2) of the directory holding `path`.
inline void sync_directory_of(const std::string& path) {
  std::string dir, name;
  split_path(path, dir, name);
  dir = dir_or_dot(dir);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw errors::os(dir, "open", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw errors::os(dir, "sync", err);
}

}  // namespace mmnpz::detail
