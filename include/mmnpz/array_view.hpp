#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/dtype.hpp"

/// \file
/// Views of a member's data: mmnpz::array_view (an array) and mmnpz::bytes_view (raw bytes).
namespace mmnpz {

/// Whether typed access accepts data that is not aligned for its element type.
enum class alignment_check { required, allow_misaligned };


/// A read-only view of one array member: a pointer to its data plus dtype, shape and byte
/// strides. Stored members point straight into the file mapping (no copy); deflated members
/// point into a buffer inflated once and cached by the reader. A view keeps what it points
/// into alive, also after the reader is destroyed. Copying a view is cheap (one shared_ptr).
/// Views are immutable and safe to share between threads.
class array_view {
 public:
  /// What a decoded member is: shared, immutable, owned by the reader's cache and by every
  /// view of it. Opaque: defined by the reader.
  struct state;

  array_view() = default;

  /// False for a default-constructed view, whose other methods throw
  /// errc::invalid_argument.
  explicit operator bool() const noexcept { return s_ != nullptr; }

  /// The element type, as the .npy header states it.
  const dtype& type() const;
  /// The shape (empty for a 0-d array).
  const std::vector<std::uint64_t>& shape() const;
  /// Byte strides, C order unless fortran_order().
  const std::vector<std::int64_t>& strides() const;
  /// Number of axes (0 for a 0-d array).
  std::size_t ndim() const { return shape().size(); }
  /// True when the data is stored in Fortran (column-major) order.
  bool fortran_order() const;
  /// Number of elements (1 for a 0-d array).
  std::uint64_t size() const;
  /// Bytes of the data: size() * the item size.
  std::uint64_t nbytes() const;
  /// The first byte of the data. Never null, also for empty arrays.
  const std::byte* data() const;
  /// True when data() points into the file mapping; false when it owns an inflated copy.
  bool is_mapped() const;
  /// Absolute byte offset of the data in the file (meaningful when is_mapped()).
  std::uint64_t file_offset() const;
  /// The member's full name in the archive, such as "clip_17.npy".
  std::string_view member() const;
  /// True when data() is a multiple of `alignment` bytes in memory (and so, for mapped
  /// data, in the file, since the mapping starts page-aligned). errc::invalid_argument for an
  /// alignment of 0.
  bool is_aligned(std::size_t alignment) const;

  /// The data as T, checked first: T must be the dtype's element type in native byte order
  /// (errc::type_mismatch), and the data must be aligned for T unless allowed
  /// (errc::misaligned). With allow_misaligned, read elements with memcpy only.
  template <class T>
  const T* data_as(alignment_check check = alignment_check::required) const {
    const bool misaligned = !is_aligned(alignof(T));
    if (!type().holds<T>() ||
        (misaligned && check == alignment_check::required && nbytes() != 0)) {
      fail_cast(dtype::of<T>());
    }
    return reinterpret_cast<const T*>(data());
  }

  /// What keeps the data alive; share it to extend the data's lifetime.
  const std::shared_ptr<const void>& keepalive() const;

 private:
  friend class reader;
  explicit array_view(std::shared_ptr<const state> s) : s_(std::move(s)) {}
  /// The state; errc::invalid_argument for a default-constructed view.
  const state& st() const;
  /// Throws the error data_as() gives for `wanted`.
  [[noreturn]] void fail_cast(const dtype& wanted) const;
  std::shared_ptr<const state> s_;
};

/// Raw bytes of a member (any member, .npy or not): mapped for stored members, an inflated
/// and cached copy for deflated ones.
struct bytes_view {
  /// The first byte of the member's contents.
  const std::byte* data = nullptr;
  /// Number of bytes at `data`.
  std::uint64_t size = 0;
  /// True when `data` points into the file mapping; false for an inflated copy.
  bool mapped = true;
  /// What keeps `data` alive; share it to extend the data's lifetime.
  std::shared_ptr<const void> keepalive;
};

}  // namespace mmnpz
