#include "mmnpz/writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/mapped_file.hpp"
#include "detail/paths.hpp"
#include "mmnpz/npy.hpp"
#include "npz/directory_reads.hpp"
#include "npz/member_names.hpp"
#include "npz/npy_plan.hpp"
#include "npz/writer_files.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {


namespace {

constexpr std::size_t max_alignment = 65536;
// Data is written in pieces this large and each is checksummed right after write(2) copied
// it, while it is still in cache.
constexpr std::size_t write_chunk = std::size_t{1} << 20;
// Arrays up to this size are checksummed first, so that the local header goes out complete
// with the data in one system call.
constexpr std::size_t small_array = std::size_t{1} << 20;
// From this size on, a second thread checksums an array while the caller's thread writes it.
constexpr std::size_t parallel_crc = std::size_t{8} << 20;

}  // namespace

struct writer::impl {
  // Every public method of writer and stream holds this: one writer may be shared by threads.
  std::mutex mu;
  // While a stream is open, other threads' new members wait for it (turn()).
  std::condition_variable idle;
  std::thread::id stream_thread;
  std::string path;
  writer_options opt;
  int fd = -1;
  // Replacing an existing archive (open_mode::truncate): the members go to `temp`, renamed
  // over `target` (the path, symbolic links resolved) by close(). The replaced file stays
  // open as `lock_fd` for the writer lock; otherwise the lock is on `fd`.
  std::string target;
  std::string temp;
  int lock_fd = -1;
  bool created = false;     // the file is new: close() syncs its directory when durable
  std::uint64_t opened_size = 0;  // an appended-to file's size when opened (discard() cuts to it)
  int unwinding = 0;  // std::uncaught_exceptions() when made: ~writer() discards above it
  std::uint64_t pos = 0;    // absolute offset where the next member goes
  std::uint64_t shift = 0;  // bytes before the archive that its offsets do not count
  std::string old_cd;       // the appended-to archive's directory entries, verbatim
  std::uint64_t old_count = 0;
  std::string old_comment;  // the appended-to archive's comment, kept unless replaced
  std::vector<zip::central_entry> entries;
  std::deque<std::string> entry_names;  // what entries' names point to
  std::unordered_set<std::string> names;
  std::uint64_t file_end = 0;  // end of what a write may have reached (set before it)

  // The member being written.
  bool active = false;
  std::uint64_t member_id = 0;  // tells a stream whether it still owns the active member
  zip::central_entry cur;
  std::string cur_name;
  std::uint64_t cur_data = 0;  // absolute offset of the next data byte
  std::uint64_t cur_left = 0;  // array bytes still expected
  std::uint32_t cur_crc = 0;
  std::string head;  // local header + .npy header, until written with the first data
  bool head_written = false;
  bool crc_in_head = false;  // else it is patched into the local header at commit

  [[noreturn]] void refuse(std::string_view name, const std::string& why) const {
    throw errors::invalid_argument(path, name, error::no_offset, why);
  }

  void check_open() const {
    if (fd < 0) throw errors::invalid_argument(path, {}, error::no_offset, "writer is closed");
  }

  // The member's full name: `name` + `suffix`, refused when invalid or taken.
  std::string checked_name(std::string_view name, std::string_view suffix = ".npy") const {
    if (const detail::name_refusal no = detail::refuse_member_name(name); !no.why.empty()) {
      refuse(no.shown, no.why);
    }
    std::string full(name);
    full += suffix;
    if (!opt.allow_duplicate_names && names.count(full)) {
      refuse(full, "the archive already has a member of that name");
    }
    return full;
  }

  void begin(std::string_view name, const dtype& type, const std::vector<std::uint64_t>& shape,
             bool fortran_order) {
    check_open();
    if (active) refuse(name, "another member is still being written");
    std::string full = checked_name(name);
    detail::npy_plan p = detail::plan_npy(type, shape, fortran_order);
    if (!p.refusal.empty()) refuse(full, p.refusal);
    begin_member(std::move(full), std::move(p.header), p.nbytes);
  }

  // Starts a member of `nbytes` data bytes after `npy` (a .npy header, or nothing), whose
  // data lands at an aligned offset.
  void begin_member(std::string full, std::string npy, std::uint64_t nbytes) {
    drop_abandoned();
    std::uint64_t member_size = 0;
    if (!detail::checked_add(npy.size(), nbytes, member_size)) {
      refuse(full, "the array's size overflows");
    }

    // Local header extra field: zip64 sizes when needed, then padding that puts the array
    // data at a multiple of the alignment in the file.
    zip::local_header_spec h;
    h.name = full;
    h.zip64 = member_size >= zip::zip64_limit;
    h.alignment = opt.alignment;
    h.flags = zip::name_flags(full);
    h.compressed_size = h.uncompressed_size = member_size;  // CRC-32: once the data is complete
    zip::dos_now(h.dos_time, h.dos_date);
    const std::uint64_t align = opt.alignment;
    while (true) {
      const std::uint64_t fixed = pos + zip::local_header_size_of(h) - h.align_pad;
      std::uint64_t pad = (align - (fixed + npy.size()) % align) % align;
      while (pad != 0 && pad < zip::align_record_min) pad += align;
      h.align_pad = pad;
      if (zip::local_header_size_of(h) - zip::local_header_size - full.size() <=
          zip::max_extra_len) {
        break;
      }
      if (npy.empty()) {  // raw bytes near 64 KiB alignment: settle for 32 KiB less
        h.align_pad -= std::uint64_t{1} << 15;
        break;
      }
      h.align_pad = 0;
      grow_npy_header(npy);  // only for alignments near 64 KiB
    }
    std::string local;
    zip::emit_local_header(local, h);
    cur = zip::central_entry{};
    cur_name = std::move(full);
    cur.flags = h.flags;
    cur.method = h.method;
    cur.dos_time = h.dos_time;
    cur.dos_date = h.dos_date;
    cur.compressed_size = cur.uncompressed_size = member_size;
    cur.local_header_offset = pos - shift;
    local += npy;
    cur_crc = detail::crc32(0, npy.data(), npy.size());
    head = std::move(local);
    head_written = crc_in_head = false;
    cur_data = pos + head.size();
    cur_left = nbytes;
    active = true;
    ++member_id;
  }

  void write_data(const void* data, std::size_t n) {
    if (!active) refuse({}, "no member is being written");
    if (n > cur_left) {
      abandon();
      refuse(cur_name, std::to_string(n) + " bytes given, " + std::to_string(cur_left) +
                           " expected; the member was abandoned");
    }
    const auto* p = static_cast<const unsigned char*>(data);
    if (n >= parallel_crc) {
      // Checksumming is about as fast as write(2): doing both at once nearly halves the time.
      // Without a second thread (a process or address-space limit), the pieces below do both.
      std::uint32_t crc = cur_crc;
      std::thread checksum;
      try {
        checksum = std::thread([&crc, p, n] { crc = detail::crc32(crc, p, n); });
      } catch (const std::system_error&) {
      }
      if (checksum.joinable()) {
        try {
          for (std::size_t done = 0; done < n; done += write_chunk) {
            write_piece(p + done, std::min(write_chunk, n - done));
            cur_data += std::min(write_chunk, n - done);
          }
        } catch (...) {
          checksum.join();
          abandon();
          throw;
        }
        checksum.join();
        cur_crc = crc;
        cur_left -= n;
        return;
      }
    }
    while (n > 0) {
      const std::size_t k = n < write_chunk ? n : write_chunk;
      try {
        write_piece(p, k);
      } catch (...) {
        abandon();
        throw;
      }
      cur_crc = detail::crc32(cur_crc, p, k);
      cur_data += k;
      cur_left -= k;
      p += k;
      n -= k;
    }
  }

  // A whole small array: checksummed first, then header and data in one system call.
  void write_small(const void* data, std::size_t n) {
    cur_crc = detail::crc32(cur_crc, data, n);
    set_head_crc(cur_crc);
    try {
      write_piece(data, n);
    } catch (...) {
      abandon();
      throw;
    }
    cur_data += n;
    cur_left = 0;
  }

  // Writes the pending headers together with the first piece of data, or the piece alone.
  void write_piece(const void* p, std::size_t k) {
    if (head_written) {
      write_at(p, k, cur_data);
      return;
    }
    const iovec parts[2] = {{head.data(), head.size()}, {const_cast<void*>(p), k}};
    file_end = std::max(file_end, pos + head.size() + k);
    detail::pwritev_all(fd, parts, k ? 2 : 1, pos, path);
    head_written = true;
  }

  void set_head_crc(std::uint32_t crc) {
    crc_in_head = true;
    head.replace(zip::local_crc_offset, 4, zip::crc_field(crc));
  }

  void commit() {
    if (!active) refuse({}, "no member is being written");
    if (cur_left != 0) {
      const std::string name = cur_name;
      const std::uint64_t left = cur_left;
      abandon();
      refuse(name, std::to_string(left) +
                       " bytes of the array are missing; the member was "
                       "abandoned");
    }
    try {
      if (!head_written) {  // an empty array, or a small one
        set_head_crc(cur_crc);
        write_piece(nullptr, 0);
      } else if (!crc_in_head) {
        const std::string crc = zip::crc_field(cur_crc);
        write_at(crc.data(), crc.size(), pos + zip::local_crc_offset);
      }
    } catch (...) {
      abandon();
      throw;
    }
    cur.crc32 = cur_crc;
    pos = cur_data;
    if (!opt.allow_duplicate_names) names.insert(cur_name);  // only the check reads them
    entry_names.push_back(std::move(cur_name));
    cur.name = entry_names.back();
    entries.push_back(cur);
    abandon();  // done with it
  }

  void abandon() {
    active = false;
    idle.notify_all();
  }

  // The lock, once no other thread's stream is open.
  std::unique_lock<std::mutex> turn() {
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [this] { return !active || stream_thread == std::this_thread::get_id(); });
    return lock;
  }

  void write_at(const void* data, std::size_t n, std::uint64_t offset) {
    if (offset + n > file_end) file_end = offset + n;
    detail::pwrite_all(fd, data, n, offset, path);
  }

  // Cuts what an abandoned or failed member left after the last committed one, before the
  // next member is written over it: a shorter member committed there would leave its stale
  // tail after it, which recover() (after a crash) would refuse to cut.
  void drop_abandoned() {
    if (file_end <= pos) return;
    if (::ftruncate(fd, static_cast<off_t>(pos)) != 0) throw errors::os(path, "truncate", errno);
    file_end = pos;
  }

  void close() {
    if (fd < 0) return;
    abandon();
    std::string cd = old_cd;
    for (const auto& e : entries) zip::emit_central_entry(cd, e);
    const std::uint64_t cd_size = cd.size();
    zip::emit_end_records(cd, old_count + entries.size(), cd_size, pos - shift,
                          opt.comment ? *opt.comment : old_comment);
    const int f = fd;
    fd = -1;
    const std::uint64_t end = pos + cd.size();
    try {
      detail::pwrite_all(f, cd.data(), cd.size(), pos, path);
      // Drop what an abandoned or failed member left beyond the end record.
      struct stat st {};
      if (::fstat(f, &st) != 0) throw errors::os(path, "stat", errno);
      if (static_cast<std::uint64_t>(st.st_size) > end &&
          ::ftruncate(f, static_cast<off_t>(end)) != 0) {
        throw errors::os(path, "truncate", errno);
      }
      if (opt.durable && ::fsync(f) != 0) throw errors::os(path, "sync", errno);
    } catch (const error& e) {
      fail_close(f, e.sys_errno());
    }
    if (::close(f) != 0) fail_close(-1, errno);
    const std::string& final_path = temp.empty() ? path : target;
    if (!temp.empty()) {
      if (::rename(temp.c_str(), target.c_str()) != 0) fail_close(-1, errno);
      temp.clear();
    }
    try {
      if (opt.durable && (created || lock_fd >= 0)) detail::sync_directory_of(final_path);
    } catch (...) {
      release_lock();
      throw;
    }
    detail::remove_stale_temps(final_path);
    release_lock();
  }

  void release_lock() {
    if (lock_fd >= 0) ::close(lock_fd);
    lock_fd = -1;
  }

  // Ends the writer leaving the path as it was before it: a replacement's temporary file is
  // removed (the replaced archive was never touched), a file it created is removed (when the
  // path still names it), an appended-to file is cut back to its size when opened (bytes no
  // reader could see). Best effort: errors are ignored.
  void discard() {
    if (fd < 0) return;
    abandon();
    const int f = fd;
    fd = -1;
    if (!temp.empty()) {
      ::unlink(temp.c_str());
      temp.clear();
    } else if (created) {
      const std::string& made = target.empty() ? path : target;
      struct stat mine {}, now {};
      if (::fstat(f, &mine) == 0 && ::stat(made.c_str(), &now) == 0 &&
          mine.st_dev == now.st_dev && mine.st_ino == now.st_ino) {
        ::unlink(made.c_str());
      }
    } else if (opt.mode == open_mode::append) {
      (void)!::ftruncate(f, static_cast<off_t>(opened_size));
    }
    ::close(f);
    release_lock();
  }

  // close() could not finish: says what the path holds now, which is either the archive it
  // replaced or every member committed before the failure.
  [[noreturn]] void fail_close(int f, int err) {
    if (!temp.empty()) {
      if (f >= 0) ::close(f);
      ::unlink(temp.c_str());
      temp.clear();
      release_lock();
      throw errors::os(path, "write the new archive (the old one is kept unchanged) over", err);
    }
    if (f >= 0) {
      // Without the partial directory, the file reads as before this writer and recover()
      // finds every committed member.
      (void)!::ftruncate(f, static_cast<off_t>(pos));
      ::close(f);
    }
    const auto members = [](std::uint64_t n) {
      return std::to_string(n) + (n == 1 ? " member" : " members");
    };
    const std::string recover = "`mmnpz recover " + path + "` restores";
    if (old_count == 0 && old_cd.empty()) {
      if (entries.empty()) {  // nothing for recover to find
        throw errors::os(path, "write the directory of an archive with no member committed to",
                         err);
      }
      throw errors::os(path,
                       "write the directory of " + members(entries.size()) + " (" + recover +
                           (entries.size() == 1 ? " it" : " them") + ") to",
                       err);
    }
    if (entries.empty()) {
      throw errors::os(path,
                       "write the directory of an append with no member committed (the archive "
                       "is as it was, with " +
                           members(old_count) + ") to",
                       err);
    }
    throw errors::os(path,
                     "write the directory of " + members(entries.size()) +
                         " appended (the archive opens as it was, with " + members(old_count) +
                         "; " + recover + " the appended ones) to",
                     err);
  }

  // Adds 64 spaces of padding to a .npy header (numpy accepts any header length).
  static void grow_npy_header(std::string& npy) {
    const bool v1 = npy[6] == 1;
    const std::size_t prefix = v1 ? 10 : 12;
    npy.insert(npy.size() - 1, 64, ' ');
    const std::uint64_t len = npy.size() - prefix;
    for (std::size_t k = 0; k < prefix - 8; ++k)
      npy[8 + k] = static_cast<char>((len >> (8 * k)) & 0xFF);
  }

  void open_file() {
    if (opt.mode == open_mode::truncate) {
      open_replace();
      return;
    }
    for (int attempt = 0;; ++attempt) {
      bool made = opt.mode == open_mode::create;
      for (int tries = 0; opt.mode == open_mode::append; ++tries) {
        fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT) break;
        // Appending to no file creates it (and discard() removes it again).
        fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
        made = fd >= 0;
        if (fd >= 0 || errno != EEXIST || tries == 3) break;  // else created meanwhile
      }
      if (opt.mode == open_mode::create) {
        fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
      }
      if (fd < 0) throw errors::os(path, "create", errno);
      try {
        detail::lock_for_writing(fd, path);
        if (detail::names_file(path, fd)) {
          if (opt.mode == open_mode::append) open_append();
          created = made;
          return;
        }
      } catch (...) {
        ::close(fd);
        fd = -1;
        throw;
      }
      // Replaced between open and lock: start again with the file the path names now.
      ::close(fd);
      fd = -1;
      if (attempt + 1 == detail::replaced_attempts) throw detail::replaced_while_opening(path);
    }
  }

  // open_mode::truncate: a new file when there is none, else a temporary one next to it that
  // close() renames over it, so that readers of the old archive keep it whole and a writer
  // that dies leaves it as it was.
  void open_replace() {
    target = path;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      if (char* real = ::realpath(path.c_str(), nullptr)) {
        target = real;
        std::free(real);
      }
    }
    for (int attempt = 0;; ++attempt) {
      const int old = ::open(target.c_str(), O_RDWR | O_CLOEXEC);
      if (old < 0 && errno == ENOENT) {
        fd = ::open(target.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
        if (fd < 0 && errno == EEXIST && attempt < 3) continue;  // created meanwhile
        if (fd < 0) throw errors::os(path, "create", errno);
        try {
          detail::lock_for_writing(fd, path);
        } catch (...) {
          ::close(fd);
          fd = -1;
          throw;
        }
        created = true;
        return;
      }
      if (old < 0) throw errors::os(path, "create", errno);
      if (::fstat(old, &st) != 0 || !S_ISREG(st.st_mode)) {
        // A device or a pipe cannot be replaced: it is written as it is.
        fd = old;
        return;
      }
      try {
        detail::lock_for_writing(old, path);
      } catch (...) {
        ::close(old);
        throw;
      }
      if (!detail::names_file(target, old)) {
        // Another writer renamed its replacement over it before letting go: replace that.
        ::close(old);
        if (attempt + 1 >= detail::replaced_attempts) throw detail::replaced_while_opening(path);
        continue;
      }
      lock_fd = old;
      break;
    }
    temp = detail::temp_path_for(target);
    fd = ::open(temp.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      const int err = errno;
      temp.clear();
      release_lock();
      throw errors::os(path, "create a temporary file next to", err);
    }
    // Locked too: a writer or recover() given the temporary file's name (it ends in no
    // directory while written) is refused, where it cut it short or replaced it in place.
    try {
      detail::lock_for_writing(fd, temp);
    } catch (...) {
      ::close(fd);
      fd = -1;
      ::unlink(temp.c_str());
      temp.clear();
      release_lock();
      throw;
    }
    // The new archive keeps the old one's permissions and, where allowed, its owner.
    (void)::fchmod(fd, st.st_mode & 07777);
    if (st.st_uid != ::geteuid() || st.st_gid != ::getegid()) {
      (void)::fchown(fd, st.st_uid, st.st_gid);
    }
  }

  void open_append() {
    // The directory by positional reads, as the reader opens it (a file cut meanwhile gives an
    // error, not SIGBUS), also for a file that must be searched from its start (an
    // interrupted append, bytes before the archive).
    const std::shared_ptr<const detail::file_source> file =
        detail::file_source::from_descriptor(fd, path);
    const std::uint64_t size = file->size();
    if (size == 0) return;
    std::unique_ptr<std::byte[]> tail;
    const std::byte* held = nullptr;  // [tail_offset, size) of the file
    std::uint64_t tail_offset = 0;
    const zip::directory d = detail::read_directory_of(*file, path, tail, held, tail_offset);
    if (d.append_interrupted) {
      throw errors::corrupt_zip(path, {}, d.archive_end,
                                "an earlier append was interrupted here, leaving " +
                                    std::to_string(size - d.archive_end) +
                                    " bytes after the archive; run `mmnpz recover " + path +
                                    "` first, or its members would be lost");
    }
    if (d.archive_end < size) {
      // New members after those bytes, if never given a directory, would look like more of
      // them: readers would not see an interrupted append, and the next append would orphan
      // its members.
      const std::uint64_t n = size - d.archive_end;
      throw errors::unsupported(
          path, {}, d.archive_end,
          std::to_string(n) +
              (n == 1 ? " byte that is not part of the archive follows"
                      : " bytes that are not part of the archive follow") +
              " its end record; appending after them could lose the new members if "
              "interrupted: remove them first (truncate the file to " +
              std::to_string(d.archive_end) + " bytes)");
    }
    old_cd.resize(static_cast<std::size_t>(d.cd_size));
    if (d.cd_offset >= tail_offset) {
      std::memcpy(old_cd.data(), held + (d.cd_offset - tail_offset), old_cd.size());
    } else if (file->read_at(old_cd.data(), old_cd.size(), d.cd_offset) < old_cd.size()) {
      throw errors::cut_since_opened(path, {}, d.cd_offset, detail::size_now(fd));
    }
    old_count = d.members.size();
    old_comment.assign(d.comment);
    if (!opt.allow_duplicate_names) {
      for (const auto& m : d.members) names.insert(std::string(m.name));
    }
    // The old members' offsets do not count bytes before the archive; nor do the new ones'.
    // An archive without members has no offsets to keep: the new ones count every byte, as
    // the reader, seeing bytes before the archive that hold a local header of their own,
    // would take an archive with shifted offsets for one stored in an interrupted append's
    // member, and open the file as another archive.
    shift = d.members.empty() ? 0 : d.shift;
    // New members go after everything that is there: no byte a reader may have mapped changes.
    opened_size = size;
    pos = size;
    file_end = size;
  }
};

writer::writer(const std::string& path, writer_options options) : p_(std::make_unique<impl>()) {
  detail::check_path(path);
  p_->path = path;
  p_->opt = options;
  const std::size_t a = options.alignment;
  if (a == 0 || a > max_alignment || (a & (a - 1)) != 0) {
    throw errors::invalid_argument(path, {}, error::no_offset,
                "alignment " + std::to_string(a) + " is not a power of two from 1 to 65536");
  }
  if (options.comment && options.comment->size() > 0xFFFF) {
    throw errors::invalid_argument(path, {}, error::no_offset,
                                   "the archive comment is " +
                                       std::to_string(options.comment->size()) +
                                       " bytes; a ZIP comment holds at most 65,535");
  }
  if (options.comment) {
    // Readers find the end record by searching back from the end of the file for its
    // signature (Python's zipfile takes the last one): one inside the comment would be taken
    // for it, and the archive read with other members or none (appending to it then wrote a
    // directory without the members before).
    const std::size_t at = options.comment->find("PK\x05\x06");
    if (at != std::string::npos) {
      throw errors::invalid_argument(
          path, {}, error::no_offset,
          "the archive comment holds the end-of-directory signature PK\\x05\\x06 (at its byte " +
              std::to_string(at) + "): ZIP readers, numpy's among them, would take it for the "
              "archive's end record");
    }
  }
  p_->unwinding = std::uncaught_exceptions();
  p_->open_file();
}

writer::writer(writer&&) noexcept = default;
writer& writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    try {
      if (p_) {
        std::lock_guard<std::mutex> lock(p_->mu);
        p_->close();
      }
    } catch (...) {
    }
    p_ = std::move(other.p_);
  }
  return *this;
}

writer::~writer() {
  try {
    if (p_) {
      std::lock_guard<std::mutex> lock(p_->mu);
      if (p_->opt.mode == open_mode::truncate && std::uncaught_exceptions() > p_->unwinding) {
        p_->discard();  // a replacement is all or nothing
      } else {
        p_->close();
      }
    }
  } catch (...) {
  }
}

void writer::discard() {
  if (!p_) return;
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->discard();
}

void writer::write(std::string_view name, const void* data, const dtype& type,
                   const std::vector<std::uint64_t>& shape, bool fortran_order) {
  const auto lock = p_->turn();
  p_->begin(name, type, shape, fortran_order);
  const std::uint64_t n = p_->cur_left;
  if (n > 0 && data == nullptr) {
    p_->abandon();
    p_->refuse(name, "no data given for a non-empty array");
  }
  if (n <= small_array) {
    p_->write_small(data, static_cast<std::size_t>(n));
  } else {
    p_->write_data(data, static_cast<std::size_t>(n));
  }
  p_->commit();
}

void writer::write_bytes(std::string_view name, const void* data, std::size_t n) {
  const auto lock = p_->turn();
  p_->check_open();
  if (p_->active) p_->refuse(name, "another member is still being written");
  if (n > 0 && data == nullptr) p_->refuse(name, "no data given for a non-empty member");
  p_->begin_member(p_->checked_name(name, ""), {}, n);
  if (n <= small_array) {
    p_->write_small(data, n);
  } else {
    p_->write_data(data, n);
  }
  p_->commit();
}

writer::stream writer::begin(std::string_view name, const dtype& type,
                             const std::vector<std::uint64_t>& shape, bool fortran_order) {
  const auto lock = p_->turn();
  p_->begin(name, type, shape, fortran_order);
  p_->stream_thread = std::this_thread::get_id();
  return stream(p_.get(), p_->member_id);
}

writer::stream writer::begin_bytes(std::string_view name, std::uint64_t n) {
  const auto lock = p_->turn();
  p_->check_open();
  if (p_->active) p_->refuse(name, "another member is still being written");
  p_->begin_member(p_->checked_name(name, ""), {}, n);
  p_->stream_thread = std::this_thread::get_id();
  return stream(p_.get(), p_->member_id);
}

void writer::write_encoded(std::string_view name, std::string_view suffix, std::uint16_t method,
                           const std::string& payload, std::uint32_t crc,
                           std::uint64_t uncompressed) {
  const auto lock = p_->turn();
  impl& w = *p_;
  w.check_open();
  if (w.active) w.refuse(name, "another member is still being written");
  std::string full = w.checked_name(name, suffix);
  zip::local_header_spec h;
  h.name = full;
  h.flags = zip::name_flags(full);
  h.method = method;
  h.crc32 = crc;
  h.compressed_size = payload.size();
  h.uncompressed_size = uncompressed;
  h.zip64 = std::max<std::uint64_t>(payload.size(), uncompressed) >= zip::zip64_limit;
  zip::dos_now(h.dos_time, h.dos_date);
  std::string local;
  zip::emit_local_header(local, h);
  const iovec parts[2] = {{local.data(), local.size()},
                          {const_cast<char*>(payload.data()), payload.size()}};
  w.drop_abandoned();
  w.file_end = std::max(w.file_end, w.pos + local.size() + payload.size());
  detail::pwritev_all(w.fd, parts, 2, w.pos, w.path);
  zip::central_entry e;
  e.flags = h.flags;
  e.method = method;
  e.dos_time = h.dos_time;
  e.dos_date = h.dos_date;
  e.crc32 = crc;
  e.compressed_size = payload.size();
  e.uncompressed_size = uncompressed;
  e.local_header_offset = w.pos - w.shift;
  w.pos += local.size() + payload.size();
  if (!w.opt.allow_duplicate_names) w.names.insert(full);
  w.entry_names.push_back(std::move(full));
  e.name = w.entry_names.back();
  w.entries.push_back(e);
}

void writer::close() {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->close();
}
std::size_t writer::members_written() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->entries.size();
}
const std::string& writer::path() const { return p_->path; }

writer::stream::stream(stream&& other) noexcept : w_(other.w_), id_(other.id_) {
  other.w_ = nullptr;
}
writer::stream::~stream() {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu);
  if (owns()) w_->abandon();
}
bool writer::stream::owns() const { return w_ && w_->active && w_->member_id == id_; }
void writer::stream::write(const void* data, std::size_t n) {
  std::unique_lock<std::mutex> lock;
  if (w_) lock = std::unique_lock<std::mutex>(w_->mu);
  if (!owns())
    throw errors::invalid_argument(w_ ? w_->path : std::string(), {}, error::no_offset,
                "the stream's member was committed or abandoned");
  if (n > 0 && data == nullptr) {
    w_->refuse(w_->cur_name, "no data given for " + std::to_string(n) +
                                 " bytes (nothing was written; the member is still open)");
  }
  w_->write_data(data, n);
}
std::uint64_t writer::stream::remaining() const {
  if (!w_) return 0;
  std::lock_guard<std::mutex> lock(w_->mu);
  return owns() ? w_->cur_left : 0;
}
void writer::stream::commit() {
  std::unique_lock<std::mutex> lock;
  if (w_) lock = std::unique_lock<std::mutex>(w_->mu);
  if (!owns())
    throw errors::invalid_argument(w_ ? w_->path : std::string(), {}, error::no_offset,
                "the stream's member was committed or abandoned");
  w_->commit();
}

}  // namespace mmnpz
