#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mmnpz/dtype.hpp"
#include "mmnpz/error.hpp"

/// \file
/// Writing a sequence of items as sharded aligned archives: mmnpz::shard_writer.
namespace mmnpz {

/// Limits and layout of a shard_writer's shards; validate() says which are refused.
struct shard_writer_options {
  /// A shard's file never grows past this many bytes, except a shard holding a single item
  /// that alone needs more. Each item is counted with an upper bound of its ZIP records and
  /// alignment padding (a few hundred bytes beyond its .npy header and data), so a shard may
  /// end that much short of the limit. Empty: no limit. Must be positive.
  std::optional<std::uint64_t> max_bytes;
  /// At most this many items (members) per shard. Empty: no limit. Must be positive.
  std::optional<std::uint64_t> max_items;
  /// As writer_options::alignment: every array's data starts at a multiple of this in its shard.
  std::size_t alignment = 64;
  /// Allow a name already written (to this shard or an earlier one).
  bool allow_duplicate_names = false;
};

/// Checks the options for `path` (the path given to shard_writer), and that `path` is a file
/// name ending in ".npz"; throws errc::invalid_argument with one message per mistake. Touches
/// no file.
void validate(const shard_writer_options& options, const std::string& path);

/// Writes a sequence of items as sharded aligned archives: for "out/train.npz", the shards
/// out/train-00000-of-00012.npz ... out/train-00011-of-00012.npz, which
/// mmnpz::dataset("out/train@12.npz") opens (see expand_paths). The count is known at close().
///
/// While writing, shard k is "out/train-0000k.npz.partial", a name that no pattern for the
/// final names matches. Each shard is an mmnpz::writer (aligned, stored members; a member is
/// committed when write() returns) and is closed, central directory written, before the next
/// one begins. close() closes the last shard and renames every shard to its final name; when
/// the process dies before, the .partial files hold every committed item and mmnpz::recover()
/// rebuilds the last one's directory. Existing final files of the same names are replaced;
/// shards of an earlier run with another count are left as they are. A .partial that a run
/// which died left is refused (errc::invalid_argument, when the shard of its name would
/// begin): it may hold that run's items. One shard writer per path at a
/// time: from opening to close() it holds a lock (the file ".train.npz.mmnpz-shards.lock" next
/// to the shards, removed by close()), and a second one is refused (errc::invalid_argument).
///
/// A new shard begins when adding an item would pass max_bytes or max_items; an item that
/// alone passes max_bytes gets a shard of its own. Names are those of writer (".npy" is
/// appended to arrays' names, not to write_bytes() members') and must be unique across all
/// shards unless allow_duplicate_names.
///
/// Not thread-safe: one thread writes at a time.
class shard_writer {
 public:
  /// Validates the options, then creates the first shard. Throws errc::invalid_argument for a
  /// path that does not end in ".npz" or bad options, errc::io for OS errors.
  explicit shard_writer(const std::string& path, shard_writer_options options = {});
  /// Moves the shards being written into a new shard_writer; the moved-from one must not be
  /// used except to be destroyed or assigned to.
  shard_writer(shard_writer&&) noexcept;
  /// Closes this writer's shards (errors swallowed, as in the destructor), then takes the other's.
  shard_writer& operator=(shard_writer&&) noexcept;
  /// Closes (and renames) the shards if close() was not called; errors are swallowed here, so
  /// call close() to see them. While an exception propagates (std::uncaught_exceptions() grew
  /// since the writer was made) and no item was written, discards instead: no empty shard
  /// replaces a shard of an earlier run.
  ~shard_writer();

  /// Writes a whole array, as writer::write(), to the current shard or a new one. Refused
  /// (errc::invalid_argument) after close(), and as writer::write() refuses.
  void write(std::string_view name, const void* data, const dtype& type,
             const std::vector<std::uint64_t>& shape, bool fortran_order = false);

  template <class T>
  /// Writes a whole array of the C++ element type T (dtype::of<T>()), as write(name, data,
  /// type, shape, fortran_order).
  void write(std::string_view name, const T* data, const std::vector<std::uint64_t>& shape,
             bool fortran_order = false) {
    write(name, static_cast<const void*>(data), dtype::of<T>(), shape, fortran_order);
  }

  /// Writes a member that is not an array under exactly `name`, as writer::write_bytes().
  void write_bytes(std::string_view name, const void* data, std::size_t n);

  /// The most that write() of such an array adds to a shard's file: what max_bytes counts.
  std::uint64_t bound(std::string_view name, const dtype& type,
                      const std::vector<std::uint64_t>& shape, bool fortran_order = false) const;
  /// The most that write_bytes() of `n` bytes under `name` adds to a shard's file.
  std::uint64_t bound_bytes(std::string_view name, std::uint64_t n) const;

  /// For writing a group all or nothing, before its first write: refuses
  /// (errc::invalid_argument, naming the member) the first of `members`, each (name, true)
  /// for write() or (name, false) for write_bytes(), whose name write() or write_bytes() would
  /// refuse: an invalid name, or unless allow_duplicate_names, one written before or named
  /// earlier in the group. Refused after close().
  void check_names(const std::vector<std::pair<std::string, bool>>& members) const;

  /// Keeps the next `items` members in one shard (an array and its metadata, say): begins a
  /// new shard now unless the current one is empty or has room for `items` more members of
  /// `bytes` (the sum of their bound() and bound_bytes()), and then begins none before those
  /// `items` writes were made (refused ones count). Members that together pass the limits
  /// thus get a shard of their own. Refused after close().
  void keep_together(std::uint64_t items, std::uint64_t bytes);

  /// Closes the current shard and renames every shard to its final name (when nothing was
  /// written: one empty shard, NAME-00000-of-00001.npz). Idempotent. A shard left empty
  /// because the item that began it was refused is removed.
  void close();
  /// Closes the writer leaving the final paths as they were before it: removes every shard it
  /// began (a .partial left by a run that died stays as it was), renames none and releases
  /// the lock; paths() stays empty. Never throws; a no-op after close() or discard().
  void discard();
  /// True once close() or discard() was called.
  bool closed() const;

  /// The final shard paths, in order: known once close() returned (empty before).
  const std::vector<std::string>& paths() const;
  /// The shard spec of the closed shards, "out/train@12.npz" (empty before close()).
  std::string spec() const;
  /// Shards begun so far (the final count after close()).
  std::size_t shards() const;
  /// Items written to all shards.
  std::uint64_t items_written() const;
  /// The path given to the constructor ("out/train.npz").
  const std::string& path() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace mmnpz
