#include "mmnpz/reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <optional>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/huge_pages.hpp"
#include "detail/mapped_file.hpp"
#include "detail/names.hpp"
#include "detail/prefault.hpp"
#include "detail/sigbus_guard.hpp"
#include "detail/sparse_slots.hpp"
#include "mmnpz/npy.hpp"
#include "npz/directory_reads.hpp"
#include "npz/layout_table.hpp"
#include "npz/view_state.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/inflate.hpp"
#include "zip/records.hpp"

namespace mmnpz {
namespace detail {
namespace {

// Deflate cannot expand data by more than about 1032:1; a directory claiming more is lying,
// and believing it would let a tiny file ask for terabytes.
constexpr std::uint64_t max_deflate_ratio = 1032;

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

// Open addressing over member names, hashed by their stem (the name without ".npy"), so that
// one probe finds a key given either way. Each distinct full name keeps its last index.
//
// A slot holds its name's address and size besides the member's index, so that a lookup in a
// table that outgrew the caches misses twice (the slot, then the name's bytes), not three
// times (the member's entry between them, for the name's address); the entry, which the
// caller reads next, is fetched meanwhile. bench/first_access (2,000 random members of
// 1,000,000) took 1.80 and 1.99 us a first access (medians of 6 runs) against 1.98 and 2.26
// with 8-byte slots on the development VM of 2026-12-03 (the table: 32 MiB, was 16).
class name_table {
 public:
  void build(const std::vector<member_info>& members) {
    std::size_t cap = 16;
    while (cap < members.size() * 2) cap *= 2;
    mask_ = cap - 1;
    // Written whole below: in huge pages where the kernel has them (a fault per 2 MiB instead
    // of per 4 KiB; at 1,000,000 names the table is 32 MiB).
    slots_.clear();
    reserve_huge(slots_, cap);
    {
      // The table's second half is faulted in on another thread while this one writes the
      // first (the same pages written from both ends would collide; see prefault_ahead).
      const std::size_t half = cap / 2;
      const prefault_ahead back_half({{slots_.data() + half, (cap - half) * sizeof(slot)}});
      slots_.assign(cap, slot{});
    }
    // The table outgrows the caches: each name's slot is a cache miss, so the slots of the
    // next names are fetched while this one is placed (a third less time at 100,000 names).
    constexpr std::size_t ahead = 8;
    std::uint64_t hashes[ahead];
    const std::size_t n = members.size();
    const auto hash_ahead = [&](std::size_t i) {
      const std::uint64_t h = fnv1a(stem(members[i].name));
      __builtin_prefetch(&slots_[h & mask_], 1);
      hashes[i % ahead] = h;
    };
    for (std::size_t i = 0; i < std::min(ahead, n); ++i) hash_ahead(i);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string_view name = members[i].name;
      const std::uint64_t h = hashes[i % ahead];
      if (i + ahead < n) hash_ahead(i + ahead);
      const std::uint16_t tag = tag_of(h);
      const std::uint16_t size = size_of(name);
      std::size_t k = h & mask_;
      while (slots_[k].index != 0 &&
             !(slots_[k].tag == tag && slots_[k].size == size &&
               name_of(slots_[k], members) == name)) {
        k = (k + 1) & mask_;
      }
      slots_[k] = {name.data(), static_cast<std::uint32_t>(i + 1), size, tag};
    }
  }

  // numpy's rule: the exact name first, then key + ".npy".
  std::optional<std::size_t> find(std::string_view key,
                                  const std::vector<member_info>& members) const {
    std::optional<std::size_t> with_suffix;
    const auto probe = [&](std::string_view hashed) -> std::optional<std::size_t> {
      const std::uint64_t h = fnv1a(hashed);
      const std::uint16_t tag = tag_of(h);
      const std::uint16_t exact = size_of(key);
      const std::uint16_t suffixed = size_of(key.size() + 4);
      for (std::size_t k = h & mask_; slots_[k].index != 0; k = (k + 1) & mask_) {
        const slot& s = slots_[k];
        if (s.tag != tag || (s.size != exact && s.size != suffixed)) continue;
        __builtin_prefetch(&members[s.index - 1]);  // read by the caller next
        const std::string_view name = name_of(s, members);
        if (name == key) return s.index - 1;
        if (name.size() == key.size() + 4 && name.substr(0, key.size()) == key &&
            name.substr(key.size()) == ".npy") {
          with_suffix = s.index - 1;
        }
      }
      return std::nullopt;
    };
    if (auto exact = probe(stem(key))) return exact;
    // "x.npy" may also name a member "x.npy.npy", whose stem is the whole key.
    if (!with_suffix && stem(key).size() != key.size()) probe(key);
    return with_suffix;
  }

 private:
  // Sizes from long_name up are looked up in the member's entry.
  static constexpr std::uint16_t long_name = 0xFFFF;
  struct slot {
    const char* name = nullptr;  // the member's name (its bytes; the size below)
    std::uint32_t index = 0;     // member index + 1; 0 is empty
    std::uint16_t size = 0;      // the name's size, or long_name
    std::uint16_t tag = 0;       // bits of the stem's hash that do not pick the slot
  };
  static_assert(sizeof(slot) == 16, "a slot is 16 bytes: four to a cache line");
  static std::uint16_t tag_of(std::uint64_t h) { return static_cast<std::uint16_t>(h >> 48); }
  static std::uint16_t size_of(std::size_t n) {
    return n < long_name ? static_cast<std::uint16_t>(n) : long_name;
  }
  static std::uint16_t size_of(std::string_view name) { return size_of(name.size()); }
  static std::string_view name_of(const slot& s, const std::vector<member_info>& members) {
    return s.size != long_name ? std::string_view(s.name, s.size) : members[s.index - 1].name;
  }
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
};

std::uint32_t crc32_of(const std::byte* p, std::uint64_t n) { return crc32(0, p, n); }

// Work on bytes of the file mapping done by detail::run_guarded (plain data: a page the file
// no longer has leaves it by siglongjmp). Copies and CRC-32s are detail::mapped_copy and
// detail::mapped_crc32.
struct zlib_step {
  z_stream* z;
  int rc = Z_OK;
  static void run(void* self) {
    auto& j = *static_cast<zlib_step*>(self);
    j.rc = ::inflate(j.z, Z_NO_FLUSH);
  }
};
struct libdeflate_whole {
  const std::byte* in;
  std::size_t in_size;
  std::byte* out;
  std::size_t out_size;
  inflate_status status = inflate_status::corrupt;
  static void run(void* self) {
    auto& j = *static_cast<libdeflate_whole*>(self);
    j.status = inflate_whole(j.in, j.in_size, j.out, j.out_size);
  }
};

std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// A raw deflate (RFC 1951) decompressor that is always released, also when a sink throws.
struct inflater {
  z_stream z{};
  inflater() {
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;
  ~inflater() { inflateEnd(&z); }
};

// How much of a deflated member verify() inflates at a time (the memory it needs per member).
constexpr std::size_t verify_piece = std::size_t{1} << 20;

// How much of a deflated member array_header() inflates at a time (the header is the first
// 64 to 128 bytes in practice).
constexpr std::size_t header_piece = 4096;

// What a first access reads at a member's local header: the local header (30 bytes, a name,
// an alignment record of up to 64 bytes by default) and the .npy header (128 bytes in
// practice) fit, so one read does; a longer header costs a second read.
constexpr std::size_t first_read = 1024;

// How many of a member's first bytes a first access reads for its .npy header when the read
// can stop sooner than first_read: numpy pads headers to 64 or 128 bytes (more for long shapes
// or structured dtypes, which take a second read).
constexpr std::size_t npy_guess = 256;

}  // namespace

// Where a member's bytes lie, as its local header says, and their first bytes, read with it.
// File bytes [offset, offset + bytes.size()) read once for the first accesses of several
// members whose headers lie close together (reader::decode in file order).
struct header_window {
  std::uint64_t offset = 0;
  std::vector<std::byte> bytes;
  bool covers(std::uint64_t at, std::uint64_t n) const {
    return at >= offset && at - offset + n <= bytes.size();
  }
};

// How far apart members' headers may lie for decode() to read them with one read: small
// members share reads, large ones (whose headers are further apart) are read one by one.
constexpr std::uint64_t header_window_max = 64 * 1024;

struct located {
  std::uint64_t offset = 0;    // absolute offset of the member's bytes in the file
  std::vector<std::byte> buf;  // what was read at the local header
  std::size_t head_at = 0;     // where in buf the member's bytes begin
  std::size_t head_size = 0;   // and how many of them buf holds
  const std::byte* head() const { return buf.data() + head_at; }
};

// What first access to a member found, cached for every later access.
// Kept small (152 bytes): a member's first access in a fresh process allocates it, and new
// memory costs a page fault per 4 KiB (2 to 19 us on some virtual machines); the array's
// dtype and shape are the archive's, shared (layout_table).
struct decoded {
  std::exception_ptr contents_error;  // local header, method, inflation
  std::exception_ptr array_error;     // .npy header, object arrays
  std::uint64_t contents_size = 0;
  std::uint64_t contents_offset = 0;  // absolute offset of the member's bytes in the file
  std::shared_ptr<std::vector<std::byte>> inflated;
  std::unique_ptr<const array_layout> own_layout;  // when the archive's table is full
  bool mapped = true;  // stored: the contents are in the file (mapped when first needed)
  bool is_array = false;
  array_view::state view;
};
static_assert(sizeof(decoded) <= 152, "a decoded member's state grew: see the comment above");

class archive {
 public:
  archive(std::string path, std::shared_ptr<const file_source> source)
      : path_(std::move(path)), source_(std::move(source)) {
    open_directory();
    names_.build(dir_.members);
    slots_.emplace(dir_.members.size());
  }
  archive(const archive&) = delete;
  archive& operator=(const archive&) = delete;

  const std::string& path() const { return path_; }
  const zip::directory& dir() const { return dir_; }
  const file_source& file() const { return *source_; }
  /// What keeps the file's mapping alive (views share it).
  std::shared_ptr<const void> keepalive() const { return source_; }
  bool interrupted() const { return interrupted_; }

  /// Where the decoded contents are: in the mapping (made now when it is not yet) or in the
  /// inflated buffer.
  const std::byte* contents(const decoded& d) const {
    return d.mapped ? source_->data() + d.contents_offset : d.inflated->data();
  }

  /// Decodes the members at `indices` that are stored and not decoded yet, in the order of
  /// their local headers (see in_file_order).
  void decode_many(std::vector<std::size_t> indices) const {
    for (std::size_t i : indices) member(i);
    std::vector<const member_info*> todo;
    for (std::size_t i : indices) {
      const member_info& m = dir_.members[i];
      if (m.method == zip::method_stored && !slots_->get(i)) todo.push_back(&m);
    }
    in_file_order(std::move(todo),
                  [this](const member_info& m, const header_window& w) { get(index_of(m), &w); });
  }

  /// Calls fn(index, decoded) for each member at `indices` that is not deflated (stored, or of
  /// a method that decoding refuses) in the order of their local headers. Members not decoded
  /// yet are decoded (with shared reads, as decode_many()) into a fresh `decoded` kept alive
  /// with `self` (this archive's owner) and cached nowhere.
  template <class Fn>
  void visit_not_deflated(const std::vector<std::size_t>& indices,
                          const std::shared_ptr<const archive>& self, Fn&& fn) const {
    for (std::size_t i : indices) member(i);
    std::vector<const member_info*> todo;
    for (std::size_t i : indices) {
      if (dir_.members[i].method != zip::method_deflated) todo.push_back(&dir_.members[i]);
    }
    struct held {
      std::shared_ptr<const archive> owner;
      decoded d;
    };
    in_file_order(std::move(todo), [&](const member_info& m, const header_window& w) {
      const std::size_t i = index_of(m);
      if (const decoded* cached = slots_->get(i)) {
        fn(i, std::shared_ptr<const decoded>(self, cached));
        return;
      }
      auto fresh = std::make_shared<held>();
      fresh->owner = self;
      decode(m, fresh->d, &w);
      fn(i, std::shared_ptr<const decoded>(fresh, &fresh->d));
    });
  }

  // What a first access reads at member m's local header: first_read bytes, or fewer when
  // the headers end sooner: the local header ends where the next local header in the file
  // less the member's bytes begins, and npy_guess bytes of those hold a usual .npy header (a
  // small member's read then copies its headers, not its neighbours').
  std::uint64_t first_bytes(const member_info& m) const {
    return first_bytes(m, zip::limit_of(dir_, index_of(m)));
  }
  std::uint64_t first_bytes(const member_info& m, const zip::member_limit& end) const {
    const std::uint64_t start = m.local_header_offset;
    const std::uint64_t limit = end.offset;
    std::uint64_t want = first_read;
    if (limit > start && limit - start > m.compressed_size) {
      const std::uint64_t headers = limit - start - m.compressed_size;
      want = std::min<std::uint64_t>(
          want, headers + std::min<std::uint64_t>(m.compressed_size, npy_guess));
    }
    want = std::max<std::uint64_t>(want, zip::local_header_size + m.name.size());
    return std::min<std::uint64_t>(dir_.cd_offset - start, want);
  }

  std::size_t index_of(const member_info& m) const {
    return static_cast<std::size_t>(&m - dir_.members.data());  // m is in dir_.members
  }

  // Calls fn(m, window) for the members in `todo`, in the order of their local headers, with
  // `window` holding the first bytes (first_bytes()) of each member and of the ones after it
  // within header_window_max, read with one read (a page fault of the mapping used to bring
  // 64 KiB of small members' headers at once; a read per member cost more). A member far from
  // the next gets an empty window (its own read then).
  template <class Fn>
  void in_file_order(std::vector<const member_info*> todo, Fn&& fn) const {
    std::sort(todo.begin(), todo.end(), [](const member_info* a, const member_info* b) {
      return a->local_header_offset < b->local_header_offset;
    });
    header_window w;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const member_info& m = *todo[k];
      if (!w.covers(m.local_header_offset, first_bytes(m))) {
        const std::uint64_t begin = m.local_header_offset;
        std::uint64_t end = begin + first_bytes(m);
        std::size_t j = k + 1;
        for (; j < todo.size(); ++j) {
          const std::uint64_t e = todo[j]->local_header_offset + first_bytes(*todo[j]);
          if (e - begin > header_window_max) break;
          end = std::max(end, e);
        }
        w.offset = begin;
        w.bytes.resize(j > k + 1 ? static_cast<std::size_t>(end - begin) : 0);
        // A short read (the file cut since it was opened) leaves the members past the cut to
        // their own reads, which say what is missing.
        w.bytes.resize(w.bytes.empty() ? 0
                                       : source_->read_at(w.bytes.data(), w.bytes.size(), begin));
      }
      fn(m, static_cast<const header_window&>(w));
    }
  }

  const member_info& member(std::size_t index) const {
    if (index >= dir_.members.size()) {
      throw errors::not_found(path_, {}, error::no_offset,
                              "no member at index " + std::to_string(index) + " (the archive has " +
                                  std::to_string(dir_.members.size()) + ")");
    }
    return dir_.members[index];
  }

  std::optional<std::size_t> find(std::string_view key) const {
    return names_.find(key, dir_.members);
  }

  /// The member's decoded state, decoding it on first access (once, under a lock).
  /// `window` may hold the member's first bytes, read already.
  const decoded& get(std::size_t index, const header_window* window = nullptr) const {
    const member_info& m = member(index);
    if (const decoded* d = slots_->get(index)) return *d;
    std::lock_guard<std::mutex> lock(locks_[index % locks_.size()]);
    if (const decoded* d = slots_->get(index)) return *d;
    auto d = std::make_unique<decoded>();
    decode(m, *d, window);
    return slots_->set(index, std::move(d));
  }

  void check_contents(const decoded& d) const {
    if (d.contents_error) std::rethrow_exception(d.contents_error);
  }

  /// Recomputes the CRC-32 of stored members (inflated ones were checked when inflated). A
  /// deflated member not yet decoded is inflated by read(), uncached: verifying an archive
  /// must not keep each of its members in memory, which fails once they outgrow it.
  void verify(std::size_t index) const {
    if (member(index).method == zip::method_deflated && !slots_->get(index)) {
      read(
          index, [](const std::byte*, std::size_t) {}, verify_piece);
      return;
    }
    const decoded& d = get(index);
    check_contents(d);
    if (!d.mapped) return;
    const member_info& m = dir_.members[index];
    detail::mapped_crc32 job{contents(d), d.contents_size};
    detail::guard_sigbus();
    guarded(m, d.contents_offset, job.p, job.n, &detail::mapped_crc32::run, &job);
    const std::uint32_t actual = job.crc;
    if (actual != m.crc32) {
      fail_if_cut(m, d.contents_offset, d.contents_size);
      throw errors::checksum(
          path_, m.name, d.contents_offset,
          "CRC-32 is " + hex32(actual) + ", the central directory says " + hex32(m.crc32));
    }
  }

  /// Copies bytes [from, from + n) of the member's contents into `out`, guarded: see
  /// reader::copy_bytes.
  void copy_contents(std::size_t index, std::byte* out, std::uint64_t from, std::uint64_t n) const {
    const decoded& d = get(index);
    check_contents(d);
    const member_info& m = dir_.members[index];
    if (from > d.contents_size || n > d.contents_size - from) {
      throw errors::invalid_argument(path_, m.name, error::no_offset,
                                     "copy_bytes: " + std::to_string(n) + " bytes from byte " +
                                         std::to_string(from) + " are not within its " +
                                         std::to_string(d.contents_size));
    }
    if (n > 0 && out == nullptr) {
      throw errors::invalid_argument(path_, m.name, error::no_offset,
                                     "copy_bytes: no output given for " + std::to_string(n) +
                                         " bytes (a null pointer)");
    }
    detail::mapped_copy job{contents(d) + from, n, out};
    if (!d.mapped) {
      detail::mapped_copy::run(&job);
      return;
    }
    detail::guard_sigbus();
    guarded(m, d.contents_offset + from, job.from, job.n, &detail::mapped_copy::run, &job);
    fail_if_cut(m, d.contents_offset + from, n);  // zeros read past a cut in the last page
  }

  /// Hands the member's contents to `sink` in pieces of `piece` bytes (the last one shorter),
  /// caching nothing. A member already decoded is handed out from the cache.
  void read(std::size_t index, const std::function<void(const std::byte*, std::size_t)>& sink,
            std::size_t piece) const {
    const member_info& m = member(index);
    if (piece == 0) {
      throw errors::invalid_argument(path_, m.name, error::no_offset,
                                     "read() needs pieces of at least one byte");
    }
    const decoded* d = slots_->get(index);
    if (d) check_contents(*d);
    if (m.method == zip::method_stored && source_->descriptor() >= 0) {
      // Read into one buffer, not handed out from the mapping: the file needs no mapping,
      // and one cut meanwhile gives an error naming the byte, not SIGBUS in the sink.
      std::uint64_t offset = 0;
      std::uint64_t n = m.compressed_size;
      if (d) {
        offset = d->contents_offset;
        n = d->contents_size;
      } else {
        offset = locate(m, context{path_, m.name}).offset;
      }
      std::vector<std::byte> buf;
      for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t k = std::min<std::uint64_t>(piece, n - done);
        read_some(m, buf, k, k, offset + done);
        sink(buf.data(), static_cast<std::size_t>(k));
        done += k;
      }
      return;
    }
    const std::byte* p = nullptr;
    std::uint64_t n = 0;
    if (d) {
      p = contents(*d);
      n = d->contents_size;
    } else {
      const context ctx{path_, m.name};
      const located at = locate(m, ctx);
      if (m.method == zip::method_deflated) {
        std::vector<std::byte> buf;
        inflate_pieces(m, mapped_data(at), ctx, buf, piece,
                       [&sink](const std::byte* q, std::size_t k) {
                         sink(q, k);
                         return true;
                       });
        return;
      }
      p = source_->data() + at.offset;  // bytes in memory
      n = m.compressed_size;
    }
    for (std::uint64_t done = 0; done < n; done += piece) {
      sink(p + done, static_cast<std::size_t>(std::min<std::uint64_t>(piece, n - done)));
    }
  }

  /// The member's data as stored, whatever its method, read into a new buffer.
  std::vector<std::byte> stored_bytes(std::size_t index) const {
    const member_info& m = member(index);
    const located at = locate(m, context{path_, m.name}, nullptr, /*any_method=*/true);
    std::vector<std::byte> out;
    read_some(m, out, m.compressed_size, m.compressed_size, at.offset);
    return out;
  }

  /// The .npy header from the member's first bytes, caching nothing: a deflated member is
  /// inflated only until its header is complete.
  npy_header array_header(std::size_t index) const {
    const member_info& m = member(index);
    const context ctx{path_, m.name};
    located at = locate(m, ctx);
    const std::uint64_t size = m.uncompressed_size;
    const bool mapped = m.method == zip::method_stored;
    const std::byte* p = nullptr;
    std::uint64_t available = 0;
    std::vector<std::byte> head;
    if (mapped) {
      read_npy_head(m, at);
      p = at.head();
      available = at.head_size;
    } else {
      // The preamble says how long the header is; a bad one stops at the preamble, and the
      // parser then says what is wrong with it.
      const auto wanted = [&] {
        const std::uint64_t n = npy_header_size(head.data(), head.size());
        return std::min<std::uint64_t>(size, n != 0 ? n : npy_preamble_len);
      };
      std::vector<std::byte> buf;
      inflate_pieces(m, mapped_data(at), ctx, buf, header_piece,
                     [&](const std::byte* q, std::size_t k) {
                       head.insert(head.end(), q, q + k);
                       return head.size() < wanted();
                     });
      p = head.data();
      available = head.size();
    }
    if (available < npy_magic_len || std::memcmp(p, npy_magic, npy_magic_len) != 0) {
      fail_not_an_array(m, at.offset);
    }
    return header_of(m, p, available, mapped, at.offset);
  }

  [[noreturn]] void fail_not_an_array(const member_info& m, std::uint64_t contents_offset) const {
    throw errors::not_an_array(path_, m.name, contents_offset,
                               "not a .npy array (no .npy magic); read it with bytes()");
  }

 private:
  // The first access: a stored member's local header and .npy header are read from the file
  // (one read, two for a long header); a deflated member is inflated whole from the mapping.
  void decode(const member_info& m, decoded& d, const header_window* window) const {
    located at;
    try {
      at = read_contents(m, d, window);
    } catch (const error&) {
      d.contents_error = std::current_exception();
      return;
    }
    const std::byte* head = d.mapped ? at.head() : d.inflated->data();
    const std::uint64_t available = d.mapped ? at.head_size : d.contents_size;
    d.is_array = available >= npy_magic_len && std::memcmp(head, npy_magic, npy_magic_len) == 0;
    if (!d.is_array) return;
    try {
      make_view(m, d, head, available);
    } catch (const error&) {
      d.array_error = std::current_exception();
    }
  }

  located read_contents(const member_info& m, decoded& d, const header_window* window) const {
    const context ctx{path_, m.name};
    located at = locate(m, ctx, window);
    d.contents_offset = at.offset;
    if (m.method == zip::method_stored) {
      d.contents_size = m.compressed_size;
      read_npy_head(m, at);
      return at;
    }
    d.mapped = false;
    d.inflated = std::make_shared<std::vector<std::byte>>();
    inflate_whole_member(m, mapped_data(at), ctx, *d.inflated);
    d.contents_size = d.inflated->size();
    return at;
  }

  // Where a located member's bytes are in the mapping (made now when it is not yet).
  struct in_mapping {
    const std::byte* data;
    std::uint64_t offset;
  };
  in_mapping mapped_data(const located& at) const {
    return {source_->data() + at.offset, at.offset};
  }

  // Runs work(job), which reads the mapped bytes [p, p + n) of member `m` (at file offset
  // `offset`), and throws an error naming the byte where it met a page the file no longer
  // has (it was cut since it was mapped) instead of SIGBUS. detail::guard_sigbus() must have
  // been called (once per member: it is a system call).
  void guarded(const member_info& m, std::uint64_t offset, const std::byte* p, std::uint64_t n,
               void (*work)(void*), void* job) const {
    detail::run_guarded(p, n, offset, work, job, path_, m.name, source_->descriptor());
  }

  // Throws the error of a file cut since it was opened when the file now ends before
  // [offset, offset + n) of member `m` does. A cut inside a page leaves the rest of that page
  // reading as zeros, without SIGBUS: bytes copied, summed or inflated from the mapping there
  // are checked with this before they are handed out or blamed for a bad checksum or stream.
  void fail_if_cut(const member_info& m, std::uint64_t offset, std::uint64_t n) const {
    const int fd = source_->descriptor();
    if (fd < 0) return;  // bytes in memory
    const std::uint64_t now = detail::size_now(fd);
    if (now != error::no_offset && now < offset + n) {
      throw errors::cut_since_opened(path_, m.name, std::max(now, offset), now);
    }
  }

  // Reads up to `n` bytes at `offset` of member `m` into `out` (resized to what was read);
  // fewer than `needed` mean that the file was cut since it was opened (the directory placed
  // them before it).
  void read_some(const member_info& m, std::vector<std::byte>& out, std::uint64_t n,
                 std::uint64_t needed, std::uint64_t offset) const {
    out.resize(static_cast<std::size_t>(n));
    const std::size_t got = source_->read_at(out.data(), out.size(), offset);
    out.resize(got);
    if (got < needed) {
      throw errors::cut_since_opened(path_, m.name, offset,
                                     detail::size_now(source_->descriptor()));
    }
  }

  // Makes `at` hold the stored member's .npy header whole (as far as the member goes), with
  // at most two more reads when the first one stopped inside it: one for the preamble (which
  // says how long the header is) when that was missing too, one for the rest. Bytes still
  // missing after that (a file changing under the reader) are header_of()'s to report.
  void read_npy_head(const member_info& m, located& at) const {
    for (int reads = 0; reads < 2; ++reads) {
      const std::uint64_t n = npy_header_size(at.head(), at.head_size);
      const std::uint64_t wanted =
          std::min<std::uint64_t>(m.compressed_size, n != 0 ? n : npy_preamble_len);
      if (at.head_size >= wanted) return;
      const std::uint64_t ask =
          n != 0 ? wanted : std::min<std::uint64_t>(m.compressed_size, npy_guess);
      read_some(m, at.buf, ask, wanted, at.offset);
      at.head_at = 0;
      at.head_size = at.buf.size();
    }
  }

  // Inflates the deflated member at `at` into `out`, in one piece, and checks its size and
  // CRC-32 against the directory. libdeflate does it, faster than zlib; when the size is not
  // credible, or libdeflate finds the stream bad or its output fails the CRC-32, zlib's
  // inflate_pieces inflates it again and says what is wrong: libdeflate decodes some invalid
  // streams (an incomplete Huffman code) that zlib refuses, and read() and verify(), which
  // inflate with zlib, must give the same error.
  void inflate_whole_member(const member_info& m, const in_mapping& at, const context& ctx,
                            std::vector<std::byte>& out) const {
    if (m.uncompressed_size / max_deflate_ratio <= m.compressed_size + 1) {
      out.resize(static_cast<std::size_t>(m.uncompressed_size));
      libdeflate_whole job{at.data, static_cast<std::size_t>(m.compressed_size), out.data(),
                           out.size()};
      detail::guard_sigbus();
      guarded(m, at.offset, at.data, m.compressed_size, &libdeflate_whole::run, &job);
      if (job.status == inflate_status::ok && crc32_of(out.data(), out.size()) == m.crc32) {
        return;
      }
    }
    // In place: a piece of the whole size is inflated into `out`, in one piece.
    inflate_pieces(m, at, ctx, out, m.uncompressed_size,
                   [](const std::byte*, std::size_t) { return true; });
  }

  // Checks the member's method (unless `any_method`: stored_bytes()), flags and local header;
  // finds its bytes.
  located locate(const member_info& m, const context& ctx, const header_window* window = nullptr,
                 bool any_method = false) const {
    if (m.flags & (zip::flag_encrypted | zip::flag_strong_encryption)) {
      ctx.fail(errc::unsupported, m.local_header_offset, "encrypted members are not supported");
    }
    if (m.flags & zip::flag_patched) {
      ctx.fail(errc::unsupported, m.local_header_offset,
               "compressed patched data (flag bit 5) is not supported");
    }
    if (!any_method && m.method != zip::method_stored && m.method != zip::method_deflated) {
      ctx.fail(errc::unsupported, m.local_header_offset,
               "compression method " + std::to_string(m.method) +
                   " is not supported (only 0, stored, and 8, deflated)");
    }
    // Members precede the central directory: the local header is read within that bound, in
    // one read that takes the first bytes of the member's contents too (a second one when
    // the local header is longer).
    const std::uint64_t room = dir_.cd_offset - m.local_header_offset;
    // A read that the file's end cuts short (it was truncated since it was opened) is an error
    // only when it misses bytes that are needed.
    located at;
    const std::uint64_t fixed = std::min<std::uint64_t>(room, zip::local_header_size);
    const std::size_t index = index_of(m);  // m is an element of dir_.members
    const zip::member_limit end = zip::limit_of(dir_, index);
    const std::uint64_t first = first_bytes(m, end);
    if (window && window->covers(m.local_header_offset, first)) {
      const std::byte* p = window->bytes.data() + (m.local_header_offset - window->offset);
      at.buf.assign(p, p + first);
    } else {
      read_some(m, at.buf, first, fixed, m.local_header_offset);
    }
    const std::uint64_t header_len = zip::local_header_length(at.buf.data(), at.buf.size());
    if (header_len > at.buf.size()) {
      const std::uint64_t whole = std::min<std::uint64_t>(room, header_len);
      read_some(m, at.buf, std::min<std::uint64_t>(room, header_len + first_read), whole,
                m.local_header_offset);
    }
    byte_reader r(at.buf.data(), at.buf.size(), m.local_header_offset, ctx, errc::corrupt_zip);
    const zip::local_header h = zip::parse_local_header(r);
    zip::check_local_header(h, dir_, index, end, r);
    at.offset = h.data_offset;
    at.head_at = static_cast<std::size_t>(h.data_offset - m.local_header_offset);
    at.head_size =
        static_cast<std::size_t>(std::min<std::uint64_t>(r.remaining(), m.compressed_size));
    if (m.method == zip::method_stored && m.compressed_size != m.uncompressed_size) {
      ctx.fail(errc::corrupt_zip, at.offset,
               "stored member has compressed size " + std::to_string(m.compressed_size) +
                   " but uncompressed size " + std::to_string(m.uncompressed_size));
    }
    return at;
  }

  // Inflates the deflated member at `at` piece by piece into `buf`, which is sized to
  // min(piece, the directory's size) once that size is found credible, and hands `buf` to
  // `sink(data, n)` each time it is full and once more at the end: pieces of `piece` bytes,
  // the last one shorter, none for an empty member. `sink` returns false to stop early; then
  // nothing more is checked and false is returned. Otherwise the size and the CRC-32 are
  // checked against the directory before the last piece is handed out, and true is returned.
  // With a piece of the whole size, the member is inflated in place and handed out once.
  template <class Sink>
  bool inflate_pieces(const member_info& m, const in_mapping& at, const context& ctx,
                      std::vector<std::byte>& buf, std::uint64_t piece, Sink&& sink) const {
    const std::uint64_t cap = m.uncompressed_size;
    if (cap / max_deflate_ratio > m.compressed_size + 1) {
      ctx.fail(errc::corrupt_zip, at.offset,
               "claims to inflate " + std::to_string(m.compressed_size) + " bytes to " +
                   std::to_string(cap) + ", more than deflate can");
    }
    buf.resize(static_cast<std::size_t>(std::min(cap, piece)));
    inflater inf;
    detail::guard_sigbus();  // before the inflate calls below read the mapping
    z_stream& z = inf.z;
    std::uint64_t in_left = m.compressed_size;
    std::uint64_t out_done = 0;  // bytes inflated
    std::size_t fill = 0;        // of them, those in buf not yet handed out
    std::uint32_t crc = 0;
    unsigned char spare = 0;  // where output beyond the directory's size would go
    std::string failure;
    while (true) {
      if (z.avail_in == 0 && in_left > 0) {
        z.avail_in = static_cast<uInt>(std::min<std::uint64_t>(in_left, 1u << 30));
        z.next_in = reinterpret_cast<Bytef*>(
            const_cast<std::byte*>(at.data + (m.compressed_size - in_left)));
        in_left -= z.avail_in;
      }
      const bool full = out_done == cap;
      if (!full && fill == buf.size()) {
        crc = detail::crc32(crc, buf.data(), fill);
        if (!sink(static_cast<const std::byte*>(buf.data()), fill)) return false;
        fill = 0;
      }
      z.avail_out =
          full ? 1
               : static_cast<uInt>(std::min<std::uint64_t>(
                     std::min<std::uint64_t>(cap - out_done, buf.size() - fill), 1u << 30));
      z.next_out = full ? &spare : reinterpret_cast<Bytef*>(buf.data() + fill);
      const uInt room = z.avail_out;
      zlib_step step{&z};
      guarded(m, at.offset, at.data, m.compressed_size, &zlib_step::run, &step);
      const int rc = step.rc;
      const uInt produced = room - z.avail_out;
      if (full && produced > 0) {
        failure = "inflates to more than the " + std::to_string(cap) +
                  " bytes the central directory states";
        break;
      }
      out_done += produced;
      fill += produced;
      if (rc == Z_STREAM_END) break;
      if (rc == Z_BUF_ERROR && z.avail_in == 0 && in_left == 0) {
        failure = "deflate stream is truncated";
        break;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        failure =
            std::string("deflate stream is corrupt") + (z.msg ? std::string(": ") + z.msg : "");
        break;
      }
    }
    if (!failure.empty() || out_done != cap) fail_if_cut(m, at.offset, m.compressed_size);
    if (!failure.empty()) ctx.fail(errc::corrupt_zip, at.offset, failure);
    if (out_done != cap) {
      ctx.fail(errc::corrupt_zip, at.offset,
               "inflates to " + std::to_string(out_done) + " bytes, the central directory says " +
                   std::to_string(cap));
    }
    crc = detail::crc32(crc, buf.data(), fill);
    if (crc != m.crc32) {
      fail_if_cut(m, at.offset, m.compressed_size);
      ctx.fail(errc::checksum, at.offset,
               "CRC-32 is " + hex32(crc) + ", the central directory says " + hex32(m.crc32));
    }
    if (fill > 0) sink(static_cast<const std::byte*>(buf.data()), fill);
    return true;
  }

  // The .npy header from the member's first `available` bytes at `p`. An error in an inflated
  // member's header names the member's data, and says where in the inflated bytes: that byte
  // has no offset in the file.
  npy_header header_of(const member_info& m, const std::byte* p, std::uint64_t available,
                       bool mapped, std::uint64_t contents_offset) const {
    if (mapped) {
      return read_npy_header_prefix(p, available, m.uncompressed_size, path_, m.name,
                                    contents_offset);
    }
    try {
      return read_npy_header_prefix(p, available, m.uncompressed_size, path_, m.name, 0);
    } catch (const error& e) {
      throw error(
          e.code(), path_, std::string(m.name), contents_offset,
          e.detail() + " (at byte " + std::to_string(e.offset()) + " of the inflated member)");
    }
  }

  // The view of an array member, from its first `available` bytes at `head` (enough to hold
  // the .npy header). A header whose bytes were seen before is not parsed again: its layout
  // is the archive's, and only whether this member holds the data is checked (the parser
  // says what is wrong when it does not).
  void make_view(const member_info& m, decoded& d, const std::byte* head,
                 std::uint64_t available) const {
    const auto key = [head](std::uint64_t header_size) {
      return std::string_view(reinterpret_cast<const char*>(head) + npy_magic_len,
                              static_cast<std::size_t>(header_size - npy_magic_len));
    };
    std::uint64_t data_offset = npy_header_size(head, available);
    const detail::array_layout* layout =
        data_offset != 0 && data_offset <= available ? layouts_.find(key(data_offset)) : nullptr;
    if (layout && !layout->type.has_object() && layout->nbytes > d.contents_size - data_offset) {
      layout = nullptr;
    }
    if (!layout) {
      npy_header h = header_of(m, head, available, d.mapped, d.contents_offset);
      data_offset = h.data_offset;  // the header was at hand: the parser checked
      layout = layouts_.add(key(data_offset), h);
      if (!layout) {
        d.own_layout = std::make_unique<const array_layout>(layout_of(std::move(h)));
        layout = d.own_layout.get();
      }
    }
    if (layout->type.has_object()) {
      throw errors::object_array(path_, m.name, error::no_offset,
                                 "pickled object arrays cannot be memory-mapped");
    }
    array_view::state& v = d.view;
    v.path = path_;
    v.member = m.name;
    v.layout = layout;
    v.mapped = d.mapped;
    v.file_offset = d.contents_offset + data_offset;
    if (d.mapped) {
      v.source = source_.get();  // data() maps the file when first asked
      v.keepalive = source_;
    } else {
      v.data = d.inflated->data() + data_offset;
      v.keepalive = d.inflated;
    }
  }

  // The directory by positional reads into dir_bytes_ (kept: the comment lies there), a file
  // that must be searched from its start (an interrupted append, bytes before the archive, no
  // end record) in pieces; bytes in memory are parsed as they are. See
  // detail::read_directory_of.
  void open_directory() {
    const std::byte* held = nullptr;
    std::uint64_t held_offset = 0;
    dir_ = detail::read_directory_of(*source_, path_, dir_bytes_, held, held_offset);
    interrupted_ = dir_.append_interrupted;
  }

  std::string path_;
  std::shared_ptr<const file_source> source_;
  std::unique_ptr<std::byte[]> dir_bytes_;  // the file's last bytes, which dir_ points into
  bool interrupted_ = false;
  zip::directory dir_;
  name_table names_;
  mutable layout_table layouts_;  // the arrays' dtypes and shapes, shared by members alike
  // Each member's decoded state once first accessed. Not a flat array: see sparse_slots.
  mutable std::optional<sparse_slots<decoded>> slots_;  // made once the directory is known
  mutable std::array<std::mutex, 64> locks_;
};

}  // namespace detail

class reader::archive : public detail::archive {
  using detail::archive::archive;
};

reader::reader(std::shared_ptr<const archive> a) : a_(std::move(a)) {}

reader::reader(const std::string& path) : reader(path, reader_options{}) {}

reader::reader(const std::string& path, const reader_options& options) {
  try {
    a_ = std::make_shared<const archive>(path, detail::file_source::open(path));
  } catch (const error& e) {
    if (!options.recover || e.code() != errc::corrupt_zip) throw;
    // No directory to open (a first write killed): what recover() would make of it.
    a_ = std::make_shared<const archive>(
        path, detail::file_source::in_memory(detail::recovered_copy(path)));
    return;
  }
  if (options.recover && was_interrupted()) {
    a_ = std::make_shared<const archive>(
        path, detail::file_source::in_memory(detail::recovered_copy(path)));
    return;
  }
  if (options.on_interrupted_append && was_interrupted()) {
    options.on_interrupted_append(path, bytes_after_archive());
  }
}

reader reader::from_bytes(const void* data, std::size_t size, std::string display_name) {
  if (!data && size != 0) {
    throw errors::invalid_argument(display_name, "from_bytes: the data is null but its size is " +
                                                     std::to_string(size));
  }
  return reader(std::make_shared<const archive>(
      std::move(display_name), detail::file_source::in_memory(detail::copy_bytes(data, size))));
}

reader reader::from_descriptor(int fd, std::string display_name) {
  auto source = detail::file_source::from_descriptor(fd, display_name);
  return reader(std::make_shared<const archive>(std::move(display_name), std::move(source)));
}

const reader::archive& reader::arc() const {
  if (!a_) {
    throw errors::invalid_argument(
        "<reader>", "this reader was moved from: it reads no archive (assign one to it)");
  }
  return *a_;
}

const std::string& reader::path() const { return arc().path(); }
std::size_t reader::size() const { return arc().dir().members.size(); }

std::vector<std::string> reader::names() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (const auto& m : arc().dir().members) {
    out.emplace_back(detail::stem(m.name));
  }
  return out;
}

const member_info& reader::member(std::size_t index) const { return arc().member(index); }

std::optional<std::size_t> reader::find(std::string_view key) const { return arc().find(key); }

std::size_t reader::index_of(std::string_view key) const {
  if (auto i = arc().find(key)) return *i;
  throw errors::not_found(arc().path(), key, error::no_offset, "no such member in the archive");
}

namespace {

// Throws what array() throws for the decoded member `d` at `index` when it is no array view.
void check_array(const detail::archive& a, const detail::decoded& d, std::size_t index) {
  a.check_contents(d);
  if (!d.is_array) a.fail_not_an_array(a.dir().members[index], d.contents_offset);
  if (d.array_error) std::rethrow_exception(d.array_error);
}

}  // namespace

array_view reader::array(std::size_t index) const {
  const detail::decoded& d = arc().get(index);
  check_array(arc(), d, index);
  // Aliasing: the view shares ownership of the archive, which owns the decoded state.
  return array_view(std::shared_ptr<const array_view::state>(a_, &d.view));
}

void reader::visit_arrays(std::vector<std::size_t> indices, const array_visitor& visit) const {
  if (!visit) {
    throw errors::invalid_argument(path(), {}, error::no_offset,
                                   "visit_arrays: no visitor given (an empty std::function)");
  }
  arc().visit_not_deflated(
      indices, a_, [&](std::size_t i, std::shared_ptr<const detail::decoded> d) {
        array_view view;
        std::exception_ptr failure;
        try {
          check_array(arc(), *d, i);
          view = array_view(std::shared_ptr<const array_view::state>(d, &d->view));
        } catch (const error&) {
          failure = std::current_exception();
        }
        visit(i, view, failure);
      });
}

bool reader::is_array(std::size_t index) const {
  const detail::decoded& d = arc().get(index);
  arc().check_contents(d);
  return d.is_array;
}

bytes_view reader::bytes(std::size_t index) const {
  const detail::decoded& d = arc().get(index);
  arc().check_contents(d);
  bytes_view b;
  b.data = arc().contents(d);
  b.size = d.contents_size;
  b.mapped = d.mapped;
  b.keepalive = std::shared_ptr<const void>(a_, b.data);
  return b;
}

void reader::copy_bytes(std::size_t index, std::byte* out) const {
  const detail::decoded& d = arc().get(index);
  arc().check_contents(d);
  arc().copy_contents(index, out, 0, d.contents_size);
}

void reader::copy_bytes(std::size_t index, std::byte* out, std::uint64_t from,
                        std::uint64_t n) const {
  arc().copy_contents(index, out, from, n);
}

void reader::read(std::size_t index, const std::function<void(const std::byte*, std::size_t)>& sink,
                  std::size_t chunk) const {
  if (!sink) {
    throw errors::invalid_argument(path(), {}, error::no_offset,
                                   "read: no sink given (an empty std::function)");
  }
  arc().read(index, sink, chunk);
}

npy_header reader::array_header(std::size_t index) const { return arc().array_header(index); }

std::vector<std::byte> reader::stored_bytes(std::size_t index) const {
  return arc().stored_bytes(index);
}

verify_result reader::verify() const {
  verify_result out;
  for (std::size_t i = 0; i < size(); ++i) {
    ++out.members_checked;
    try {
      arc().verify(i);
      out.bytes_checked += arc().dir().members[i].uncompressed_size;
    } catch (const error& e) {
      out.failures.push_back(e);
    }
  }
  return out;
}

void reader::verify(std::size_t index) const { arc().verify(index); }

bytes_view reader::file_bytes() const {
  return {arc().file().data(), arc().file().size(), true, arc().keepalive()};
}

void reader::decode(std::vector<std::size_t> indices) const {
  arc().decode_many(std::move(indices));
}

std::uint64_t reader::file_size() const { return arc().file().size(); }

int reader::descriptor() const noexcept { return a_ ? a_->file().descriptor() : -1; }
std::uint64_t reader::leading_bytes() const { return arc().dir().leading_bytes; }
std::string_view reader::comment() const { return arc().dir().comment; }
bool reader::is_zip64() const { return arc().dir().zip64; }
std::uint64_t reader::bytes_after_archive() const {
  return arc().file().size() - arc().dir().archive_end;
}
bool reader::was_interrupted() const { return arc().interrupted(); }

bool looks_like_zip(const void* data, std::size_t size) {
  const zip::record_kind k = zip::record_at(static_cast<const std::byte*>(data), size);
  return k == zip::record_kind::local_header || k == zip::record_kind::end;
}

}  // namespace mmnpz
