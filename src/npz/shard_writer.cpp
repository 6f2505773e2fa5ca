#include "mmnpz/shard_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <limits>
#include <optional>
#include <unordered_set>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "mmnpz/npy.hpp"
#include "mmnpz/writer.hpp"
#include "npz/member_names.hpp"
#include "npz/npy_plan.hpp"
#include "npz/writer_files.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {

namespace {

constexpr std::string_view npz_ext = ".npz";
constexpr std::string_view partial_ext = ".partial";

// What a member's ZIP records and padding may add to its payload (its .npy header and data,
// or its raw bytes): the local header with a zip64 record and the alignment padding, the
// central-directory entry with a zip64 record (three 8-byte values), and, for alignments near
// 64 KiB, the .npy header growth that replaces padding the extra field cannot hold.
std::uint64_t member_overhead(std::size_t name_len, std::size_t alignment) {
  constexpr std::uint64_t central_zip64_size = 4 + 3 * 8;
  constexpr std::uint64_t npy_growth = 128;
  return zip::local_header_size + zip::local_zip64_size + alignment + zip::align_record_min +
         npy_growth + zip::central_header_size + central_zip64_size + 2 * std::uint64_t{name_len};
}

// The end records every shard has (a zip64 one included, to be safe).
constexpr std::uint64_t end_records_size =
    zip::end_size + zip::end64_size + zip::end64_locator_size;

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return detail::checked_add(a, b, out) ? out : std::numeric_limits<std::uint64_t>::max();
}

// "-00003" or "-00003-of-00012": five digits or more, as expand_paths reads them.
std::string shard_suffix(std::size_t index, std::optional<std::size_t> count) {
  char digits[64];
  if (count) {
    std::snprintf(digits, sizeof digits, "-%05zu-of-%05zu", index, *count);
  } else {
    std::snprintf(digits, sizeof digits, "-%05zu", index);
  }
  return digits;
}

}  // namespace

void validate(const shard_writer_options& options, const std::string& path) {
  const std::size_t n = npz_ext.size();
  const std::size_t slash = path.rfind('/');
  const std::size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  if (path.size() <= n || path.compare(path.size() - n, n, npz_ext) != 0 ||
      path.size() - n == name_start) {
    throw errors::invalid_argument(
        path,
        "a shard writer's path must be a file name ending in .npz (\"out/train.npz\" "
        "gives out/train-00000-of-00012.npz ...)");
  }
  if (options.max_bytes && *options.max_bytes == 0) {
    throw errors::invalid_argument(path, "max_bytes must be positive, not 0");
  }
  if (options.max_items && *options.max_items == 0) {
    throw errors::invalid_argument(path, "max_items must be positive, not 0");
  }
  const std::size_t a = options.alignment;
  if (a == 0 || a > 65536 || (a & (a - 1)) != 0) {
    throw errors::invalid_argument(
        path, "alignment " + std::to_string(a) + " is not a power of two from 1 to 65536");
  }
}

struct shard_writer::impl {
  std::string path;
  std::string stem;  // path without ".npz"
  shard_writer_options opt;
  std::optional<writer> current;
  std::vector<std::string> partial_paths;  // every shard begun, in order
  std::uint64_t shard_items = 0;           // items in the current shard
  std::uint64_t shard_bytes = 0;           // upper bound of the current shard's file size
  std::uint64_t items = 0;
  std::uint64_t together = 0;  // members still to write into the current shard, whatever fits
  std::unordered_set<std::string> names;  // full names written, across shards
  std::vector<std::string> final_paths;
  bool closed = false;
  int unwinding = 0;  // std::uncaught_exceptions() when made: see ~shard_writer()
  // The run's lock: a hidden file ".NAME.mmnpz-shards.lock" next to the shards, locked as a
  // writer locks an archive, from opening to close(). Each shard's writer locks only its own
  // .partial, and a second run of one job would replace the shards the first had closed.
  std::string lock_path;
  int lock_fd = -1;

  void lock_run() {
    std::string dir, name;
    detail::split_path(path, dir, name);
    lock_path = dir + "." + name + ".mmnpz-shards.lock";
    for (int attempt = 0;; ++attempt) {
      lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock_fd < 0) throw errors::os(lock_path, "create", errno);
      try {
        detail::lock_for_writing(lock_fd, lock_path);
      } catch (const error& e) {
        ::close(lock_fd);
        lock_fd = -1;
        if (e.code() != errc::invalid_argument) throw;
        throw errors::invalid_argument(path, "another shard writer is writing these shards; "
                                             "two would lose items, so wait until it is closed");
      }
      if (detail::names_file(lock_path, lock_fd)) return;
      // The run before removed it as this one locked it: lock the one the path names now.
      ::close(lock_fd);
      lock_fd = -1;
      if (attempt + 1 == detail::replaced_attempts) {
        throw detail::replaced_while_opening(lock_path);
      }
    }
  }

  void unlock_run() {
    if (lock_fd < 0) return;
    ::unlink(lock_path.c_str());  // before letting go: a run waiting for it then starts again
    ::close(lock_fd);
    lock_fd = -1;
  }

  void check_open() const {
    if (closed) {
      throw errors::invalid_argument(path,
                                     "the shard writer is closed; nothing more can be written");
    }
  }

  void begin_shard() {
    std::string partial = stem + shard_suffix(partial_paths.size(), {}) + std::string(npz_ext) +
                          std::string(partial_ext);
    // This run holds the lock and has not made it: a run that died left it, holding the items
    // it committed (recover rebuilds its directory). It was replaced, and they were lost.
    struct stat st {};
    if (::lstat(partial.c_str(), &st) == 0) {
      throw errors::invalid_argument(
          path, "'" + partial + "' is a shard of a run that died, which may hold items (`mmnpz "
                "recover` rebuilds its directory): rename or remove the .partial files of "
                "that run before writing these shards again");
    }
    writer_options w;
    w.mode = open_mode::truncate;
    w.alignment = opt.alignment;
    w.allow_duplicate_names = opt.allow_duplicate_names;
    current.emplace(partial, w);
    partial_paths.push_back(std::move(partial));
    shard_items = 0;
    shard_bytes = end_records_size;
  }

  bool fits(std::uint64_t more_items, std::uint64_t bytes) const {
    if (shard_items == 0) return true;  // whatever it is, it gets this shard
    const bool too_many = opt.max_items && saturating_add(shard_items, more_items) > *opt.max_items;
    const bool too_big = opt.max_bytes && saturating_add(shard_bytes, bytes) > *opt.max_bytes;
    return !too_many && !too_big;
  }

  void next_shard() {
    writer done = std::move(*current);
    current.reset();
    done.close();
    begin_shard();
  }

  // Makes room for an item of `bytes` (an upper bound of what it adds to a shard's file) named
  // `full`: refuses a duplicate name, then begins a new shard when the item does not fit.
  void prepare(const std::string& full, std::uint64_t bytes) {
    check_open();
    if (!current) begin_shard();  // closing the previous shard failed
    if (!opt.allow_duplicate_names && names.count(full)) {
      throw errors::invalid_argument(path, full, error::no_offset,
                                     "a shard already has a member of that name");
    }
    if (together > 0) {
      --together;
    } else if (!fits(1, bytes)) {
      next_shard();
    }
  }

  void committed(std::string full, std::uint64_t bytes) {
    shard_bytes = saturating_add(shard_bytes, bytes);
    ++shard_items;
    ++items;
    if (!opt.allow_duplicate_names) names.insert(std::move(full));
  }

  // Removes every shard begun and renames none: the final paths stay as they were before
  // this writer. A .partial of a run that died was never begun here (it is refused), and
  // stays as it was.
  void discard() noexcept {
    if (closed) return;
    closed = true;
    std::size_t finished = partial_paths.size();
    if (current) {
      current->discard();
      current.reset();
      --finished;
    }
    for (std::size_t k = 0; k < finished; ++k) ::unlink(partial_paths[k].c_str());
    partial_paths.clear();
    unlock_run();
  }

  void close() {
    if (closed) return;
    closed = true;
    struct unlocker {
      impl* self;
      ~unlocker() { self->unlock_run(); }
    } unlock_at_end{this};
    if (current) {
      writer last = std::move(*current);
      current.reset();
      last.close();
    }
    // A last shard begun for an item that was then refused holds nothing: it is no shard.
    if (shard_items == 0 && partial_paths.size() > 1) {
      if (std::remove(partial_paths.back().c_str()) != 0) {
        throw errors::os(partial_paths.back(), "remove", errno);
      }
      partial_paths.pop_back();
    }
    std::vector<std::string> finals;
    for (std::size_t k = 0; k < partial_paths.size(); ++k) {
      finals.push_back(stem + shard_suffix(k, partial_paths.size()) + std::string(npz_ext));
    }
    for (std::size_t k = 0; k < partial_paths.size(); ++k) {
      if (std::rename(partial_paths[k].c_str(), finals[k].c_str()) != 0) {
        throw errors::os(partial_paths[k], "rename to '" + finals[k] + "'", errno);
      }
    }
    final_paths = std::move(finals);
  }
};

shard_writer::shard_writer(const std::string& path, shard_writer_options options)
    : p_(std::make_unique<impl>()) {
  p_->path = path;
  p_->opt = options;
  validate(options, path);
  p_->unwinding = std::uncaught_exceptions();
  p_->stem = path.substr(0, path.size() - npz_ext.size());
  p_->lock_run();
  try {
    p_->begin_shard();
  } catch (...) {
    p_->unlock_run();
    throw;
  }
}

shard_writer::shard_writer(shard_writer&&) noexcept = default;
shard_writer& shard_writer::operator=(shard_writer&& other) noexcept {
  if (this != &other) {
    try {
      if (p_) p_->close();
    } catch (...) {
    }
    p_ = std::move(other.p_);
  }
  return *this;
}

shard_writer::~shard_writer() {
  if (!p_) return;
  if (p_->items == 0 && std::uncaught_exceptions() > p_->unwinding) {
    p_->discard();  // nothing to keep: no empty shard replaces an earlier run's
    return;
  }
  try {
    p_->close();
  } catch (...) {
  }
}

void shard_writer::discard() {
  if (p_) p_->discard();
}

std::uint64_t shard_writer::bound(std::string_view name, const dtype& type,
                                  const std::vector<std::uint64_t>& shape,
                                  bool fortran_order) const {
  // An array that write() refuses counts as unbounded.
  const detail::npy_plan p = detail::plan_npy(type, shape, fortran_order);
  const std::uint64_t bytes = p.refusal.empty() ? saturating_add(p.nbytes, p.header.size())
                                                : std::numeric_limits<std::uint64_t>::max();
  return saturating_add(bytes, member_overhead(name.size() + 4, p_->opt.alignment));
}

std::uint64_t shard_writer::bound_bytes(std::string_view name, std::uint64_t n) const {
  return saturating_add(n, member_overhead(name.size(), p_->opt.alignment));
}

void shard_writer::check_names(const std::vector<std::pair<std::string, bool>>& members) const {
  p_->check_open();
  std::unordered_set<std::string> listed;
  for (const auto& [name, array] : members) {
    if (const detail::name_refusal no = detail::refuse_member_name(name); !no.why.empty()) {
      throw errors::invalid_argument(p_->path, no.shown, error::no_offset, no.why);
    }
    if (p_->opt.allow_duplicate_names) continue;
    std::string full = array ? name + ".npy" : name;
    if (p_->names.count(full)) {
      throw errors::invalid_argument(p_->path, full, error::no_offset,
                                     "a shard already has a member of that name");
    }
    if (!listed.insert(full).second) {
      throw errors::invalid_argument(p_->path, full, error::no_offset,
                                     "the group names it twice");
    }
  }
}

void shard_writer::keep_together(std::uint64_t items, std::uint64_t bytes) {
  p_->check_open();
  if (!p_->current) p_->begin_shard();
  if (!p_->fits(items, bytes)) p_->next_shard();
  p_->together = items;
}

void shard_writer::write(std::string_view name, const void* data, const dtype& type,
                         const std::vector<std::uint64_t>& shape, bool fortran_order) {
  std::string full(name);
  full += ".npy";
  const std::uint64_t bytes = bound(name, type, shape, fortran_order);
  p_->prepare(full, bytes);
  p_->current->write(name, data, type, shape, fortran_order);
  p_->committed(std::move(full), bytes);
}

void shard_writer::write_bytes(std::string_view name, const void* data, std::size_t n) {
  std::string full(name);
  const std::uint64_t bytes = bound_bytes(name, n);
  p_->prepare(full, bytes);
  p_->current->write_bytes(name, data, n);
  p_->committed(std::move(full), bytes);
}

void shard_writer::close() { p_->close(); }
bool shard_writer::closed() const { return p_->closed; }
const std::vector<std::string>& shard_writer::paths() const { return p_->final_paths; }
std::string shard_writer::spec() const {
  if (p_->final_paths.empty()) return {};
  return p_->stem + "@" + std::to_string(p_->final_paths.size()) + std::string(npz_ext);
}
std::size_t shard_writer::shards() const { return p_->partial_paths.size(); }
std::uint64_t shard_writer::items_written() const { return p_->items; }
const std::string& shard_writer::path() const { return p_->path; }

}  // namespace mmnpz
