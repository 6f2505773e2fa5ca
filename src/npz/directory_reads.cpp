// read_directory_by_reads(): the directory of an archive by positional reads.
#include "npz/directory_reads.hpp"

#include <fcntl.h>

#include <algorithm>

#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/huge_pages.hpp"

namespace mmnpz::detail {

zip::directory read_directory_by_pieces(std::uint64_t size, const std::string& path,
                                       const zip::piece_reader& read,
                                       std::unique_ptr<std::byte[]>& tail,
                                       std::uint64_t& tail_offset) {
  const auto read_tail = [&](std::uint64_t from) {
    tail_offset = from;
    tail.reset(new std::byte[static_cast<std::size_t>(size - from)]);
    advise_huge_pages(tail.get(), static_cast<std::size_t>(size - from));
    read(tail.get(), size - from, from);
  };
  if (!tail) read_tail(size - std::min<std::uint64_t>(size, first_tail_read));
  while (true) {
    std::uint64_t need = 0;
    if (auto d = zip::read_directory_tail(tail.get(), tail_offset, size, path, need, read)) {
      return std::move(*d);
    }
    // At least twice as much each time, however little more was asked for (only the end
    // record's search asks, for at most its last 64 KiB).
    const std::uint64_t n = size - tail_offset;
    read_tail(std::min(need, tail_offset - std::min(tail_offset, n)));
  }
}

zip::directory read_directory_by_reads(const file_source& file, const std::string& path,
                                      std::unique_ptr<std::byte[]>& tail,
                                      std::uint64_t& tail_offset) {
  const std::uint64_t size = file.size();
  std::uint64_t last_read = size;
  const auto read = [&](std::byte* dst, std::uint64_t n, std::uint64_t at) {
    // A search for an interrupted append reads large pieces backwards, where the kernel's
    // readahead does not help: the piece before this one is asked for while this one is
    // read and searched.
    if (n >= (std::uint64_t{1} << 20) && at < last_read && at > 0) {
      const std::uint64_t before = std::min(at, n);
      ::posix_fadvise(file.descriptor(), static_cast<off_t>(at - before),
                      static_cast<off_t>(before), POSIX_FADV_WILLNEED);
    }
    last_read = at;
    const std::size_t done = file.read_at(dst, static_cast<std::size_t>(n), at);
    if (done < n) {
      throw errors::cut_since_opened(path, {}, at + done, size_now(file.descriptor()));
    }
  };
  return read_directory_by_pieces(size, path, read, tail, tail_offset);
}

zip::directory read_directory_of(const file_source& file, const std::string& path,
                                 std::unique_ptr<std::byte[]>& tail, const std::byte*& held,
                                 std::uint64_t& held_offset) {
  held_offset = 0;
  if (!file.is_mapped() && file.size() != 0) {
    zip::directory d = read_directory_by_reads(file, path, tail, held_offset);
    held = tail.get();
    return d;
  }
  held = file.data();
  return zip::read_directory(held, file.size(), path);
}

}  // namespace mmnpz::detail
