#include "mmnpz/data/gather.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "data/dataset_state.hpp"
#include "data/enum_text.hpp"
#include "data/io.hpp"
#include "data/thread_pool.hpp"
#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/sigbus_guard.hpp"
#include "npz/py_literal.hpp"

namespace mmnpz {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of two 64-bit values

// Batches that gather_async reads ahead of time after one found its pieces out of memory.
constexpr int cold_batches_ahead = 8;

using detail::dataset_item;

const detail::enum_text<pad_mode, 3> pad_text{"<gather>", "pad", {"none", "fill", "wrap"}};
const detail::enum_text<io_mode, 3> io_text{"<gather>", "io", {"auto", "read", "map"}};

// An error about item i, naming its archive and member.
template <class Helper>
error item_error(const Helper& make, const dataset::state& st, std::size_t i,
                 const std::string& detail) {
  const dataset_item& it = st.items[i];
  const reader& r = st.readers[it.shard];
  return make(r.path(), r.member(it.member).name, error::no_offset, detail);
}

std::size_t checked_index(const dataset::state& st, std::int64_t index, std::size_t k) {
  if (index < 0 || static_cast<std::uint64_t>(index) >= st.items.size()) {
    throw errors::out_of_range(st.where(), "index " + std::to_string(index) + " (batch entry " +
                                               std::to_string(k) +
                                               ") is out of range for a dataset of " +
                                               std::to_string(st.items.size()) + " items");
  }
  return static_cast<std::size_t>(index);
}

void check_layout(const dataset::state& st, std::size_t i, const item_layout& want) {
  const item_layout& l = st.layouts[st.items[i].layout];
  if (l.type != want.type) {
    throw item_error(errors::type_mismatch, st, i,
                     "has dtype " + l.type.str() + " but the batch has " + want.type.str());
  }
  if (l.trailing != want.trailing) {
    throw item_error(errors::invalid_argument, st, i,
                     "has trailing shape " + detail::shape_literal(l.trailing) +
                         " but the batch has " + detail::shape_literal(want.trailing));
  }
}

// Rows [row, row + n) of a member whose rows are not contiguous (Fortran order, or another
// stride pattern), to copy element by element into C order at `dst`; `idx` has a place for
// each dimension. Plain data: run() is left by siglongjmp when a page of the file is gone.
struct strided_copy {
  const array_view* v;
  std::uint64_t row;
  std::uint64_t n;
  std::byte* dst;
  std::uint64_t* idx;

  static void run(void* self) {
    const strided_copy& c = *static_cast<const strided_copy*>(self);
    const array_view& v = *c.v;
    const std::size_t nd = v.ndim();
    const std::uint64_t item = v.type().itemsize();
    std::byte* dst = c.dst;
    std::fill(c.idx, c.idx + nd, 0);
    std::uint64_t total = c.n;
    for (std::size_t d = 1; d < nd; ++d) total *= v.shape()[d];
    for (std::uint64_t e = 0; e < total; ++e) {
      std::int64_t off = static_cast<std::int64_t>(c.row + c.idx[0]) * v.strides()[0];
      for (std::size_t d = 1; d < nd; ++d) {
        off += static_cast<std::int64_t>(c.idx[d]) * v.strides()[d];
      }
      std::memcpy(dst, v.data() + off, item);
      dst += item;
      for (std::size_t d = nd; d-- > 0;) {
        const std::uint64_t extent = d == 0 ? c.n : v.shape()[d];
        if (++c.idx[d] < extent) break;
        c.idx[d] = 0;
      }
    }
  }
};

// The bytes of the mapping that `v`'s elements span: [first, first + size).
std::pair<const std::byte*, std::uint64_t> span_of(const array_view& v) {
  std::int64_t low = 0;
  std::int64_t high = static_cast<std::int64_t>(v.type().itemsize());
  for (std::size_t d = 0; d < v.ndim(); ++d) {
    if (v.shape()[d] == 0) return {v.data(), 0};
    const std::int64_t reach = static_cast<std::int64_t>(v.shape()[d] - 1) * v.strides()[d];
    (reach < 0 ? low : high) += reach;
  }
  return {v.data() + low, static_cast<std::uint64_t>(high - low)};
}

void fill_rows(std::byte* dst, std::uint64_t bytes, const std::vector<std::byte>& element) {
  if (bytes == 0) return;
  if (element.empty() ||
      std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; })) {
    std::memset(dst, 0, bytes);
    return;
  }
  const std::uint64_t e = element.size();
  std::uint64_t done = std::min(e, bytes);
  std::memcpy(dst, element.data(), done);
  while (done < bytes) {  // double what is filled each time
    const std::uint64_t n = std::min(done, bytes - done);
    std::memcpy(dst + done, dst, n);
    done += n;
  }
}

// One excerpt to copy, checked.
struct task {
  const gather_field* field;
  const dataset_item* item;
  std::size_t index;  // the item's dataset index
  std::uint64_t start;
  std::uint64_t length;
  std::uint64_t row_bytes;
  std::byte* dst;
  std::int64_t* valid;
  const std::byte* data;  // the item's data (the mapping, or its inflated copy)
  const std::byte* key;   // where the read begins, for ordering by file offset
  int fd;                 // read from this descriptor (io_mode::read), or -1: copy from data
  // io_mode::automatic (with fd): the item's archive's granules, which say for each piece
  // whether to read it or copy it through the mapping; null otherwise.
  detail::granule_map* granules;
  std::size_t probe = 0;  // with granules: its archive's entry in plan::probes (make_plan)
};

struct plan;

// What the tasks of one chunk share while one thread copies them: whether reads may still
// expect the page cache to hold their pieces, and whether automatic pieces may be copied
// through the mapping.
struct chunk_reader {
  const plan& work;
  bool cached = true;  // try RWF_NOWAIT first; cleared once the batch is taken for cold
  enum class gate { unknown, open, closed } mapping = gate::unknown;
  const detail::granule_map* mapping_of = nullptr;  // the archive `mapping` was decided for

  // Automatic pieces of the last archive's dataset copied so far, not yet counted in its
  // first_touch_costs (counted once per chunk, or when the dataset changes: atomics shared by
  // the threads cost warm copies time when updated per piece).
  detail::first_touch_costs* touched = nullptr;
  std::uint64_t first = 0;  // pieces of granules never touched before
  std::uint64_t again = 0;  // pieces of granules touched before

  chunk_reader(const chunk_reader&) = delete;
  chunk_reader& operator=(const chunk_reader&) = delete;
  explicit chunk_reader(const plan& p) : work(p) {}
  ~chunk_reader() { count(nullptr); }

  // Counts what was touched in `costs` when the next piece is of another dataset's
  // (nullptr: at the chunk's end).
  void count(detail::first_touch_costs* costs) {
    if (costs == touched) return;
    if (touched) touched->count_touches(first, again);
    touched = costs;
    first = again = 0;
  }
};

void read_ahead(const plan& p);     // below: starts reading every piece of the plan
bool reading_ahead(const plan& p);  // below: whether read_ahead(p) ran
bool count_miss(const plan& p);     // below: counts a piece out of memory; true: p is cold
// Below: whether the plan's pieces of t's archive may be copied through the mapping, as
// may_map's first probe of that archive found: 0 before it, 1 yes, 2 no.
std::atomic<int>& mapping_probe(const plan& p, const task& t);

// Reads the rows; true when the page cache held them all (an RWF_NOWAIT read got them).
bool read_rows(const task& t, std::uint64_t row, std::uint64_t n, std::byte* dst,
               chunk_reader& cr) {
  const dataset::state& st = state_of(*t.field->source);
  const std::string& path = st.paths[t.item->shard];
  const std::uint64_t offset = t.item->offset + row * t.row_bytes;
  const std::uint64_t bytes = n * t.row_bytes;
  std::uint64_t done = 0;
  if (cr.cached) {
    done = detail::read_at(t.fd, offset, dst, bytes, /*nowait=*/true, path);
    if (done == bytes) return true;
    // A piece that is not in memory. A few of them are pages dropped here and there (a
    // virtual machine's host, a neighbour's reclaim): they are read where they are. Once
    // a batch meets enough of them, its data is taken for out of memory: the disk
    // works on every piece of the batch at once rather than on one piece per thread, the
    // next batches are read ahead too, and the rest of this chunk is read blocking (see
    // count_miss).
    if (count_miss(cr.work)) {
      cr.cached = false;
      read_ahead(cr.work);
      st.cold_batches.store(cold_batches_ahead, std::memory_order_relaxed);
    }
  }
  done = detail::read_at(t.fd, offset, dst, bytes, /*nowait=*/false, path, done);
  if (done < bytes) {
    throw errors::corrupt_zip(path, st.member_name(t.index), offset,
                              "read " + std::to_string(done) + " of " + std::to_string(bytes) +
                                  " bytes: the archive was truncated after it was opened");
  }
  return false;
}

// Whether the chunk may copy an automatic piece [src, src + bytes) through the mapping.
// Decided at the gather's first such piece of each archive, as before granules were kept: not
// while its dataset's recent batches had pieces out of memory (pages are arriving, or partly
// there, and a fault on a missing page is a synchronous read of the 128 KiB around it: a chunk
// of such faults made a Loader over evicted data 3x slower than reads), and only when mincore finds
// the piece's pages in the page cache (pages the kernel evicted lost their page-table entries:
// a granule marked mapped is then stale, and its read below marks it unseen). One probe per
// archive and gather, which every chunk follows for that archive's pieces: probing every
// piece cost warm gathers a third, probing at each chunk's first (8 a batch on 2 threads)
// 4-8% (a system call each). Per archive: one archive may be evicted while another is not.
// Closed too once any chunk of the gather found a piece out of memory.
bool may_map(const task& t, const std::byte* src, std::uint64_t bytes, chunk_reader& cr) {
  using gate = chunk_reader::gate;
  if (cr.mapping == gate::unknown || cr.mapping_of != t.granules) {
    cr.mapping_of = t.granules;
    std::atomic<int>& probe = mapping_probe(cr.work, t);
    int found = probe.load(std::memory_order_relaxed);
    if (found == 0) {  // chunks racing here each probe: the same answer, or a later one
      found = state_of(*t.field->source).cold_batches.load(std::memory_order_relaxed) == 0 &&
                      detail::resident(src, bytes)
                  ? 1
                  : 2;
      probe.store(found, std::memory_order_relaxed);
    }
    cr.mapping = found == 1 ? gate::open : gate::closed;
  }
  if (cr.mapping == gate::open && reading_ahead(cr.work)) {
    cr.mapping = gate::closed;
  }
  return cr.mapping == gate::open;
}

void copy_rows(const task& t, std::uint64_t row, std::uint64_t n, std::byte* dst,
               chunk_reader& cr) {
  if (n == 0) return;
  if (t.granules) {  // io_mode::automatic: by what this process did with the granules
    using route = detail::granule_map::route;
    using clock = std::chrono::steady_clock;
    using way = detail::first_touch_costs::way;
    detail::first_touch_costs& costs = state_of(*t.field->source).first_touch;
    const std::byte* base = t.item->data - t.item->offset;  // the mapping's file offset 0
    const std::byte* src = t.data + row * t.row_bytes;
    const std::uint64_t bytes = n * t.row_bytes;
    std::uint32_t reads = 0;
    const route r = t.granules->route_of(base, src, bytes, &reads);
    // Mapped granules are copied; others are read, or faulted in (once, for every later
    // copy), as first_touch_costs says from how often they were read before; timed.
    cr.count(&costs);
    ++(r == route::read ? cr.first : cr.again);
    // Copies of mapped granules are timed one in copy_sampled (their cost is what a fault
    // buys); a thread's count, whatever the dataset.
    thread_local std::uint32_t mapped_copies = 0;
    const bool timed =
        r != route::map || ++mapped_copies % detail::first_touch_costs::copy_sampled == 0;
    const bool map = r == route::map || costs.map_now(reads);
    if (map && may_map(t, src, bytes, cr)) {
      const clock::time_point begin = timed ? clock::now() : clock::time_point();
      if (!detail::copy_from_mapping(dst, src, bytes)) {
        t.granules->forget(base, src, bytes);
        read_rows(t, row, n, dst, cr);  // the file was cut: says where
        return;
      }
      const auto ns =
          timed ? std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - begin).count()
                : 0;
      if (r == route::map) {
        if (timed) costs.record(way::copy, bytes, static_cast<std::uint64_t>(ns));
        return;
      }
      // The fault may have mapped more than the piece's granules (a large folio, whole).
      costs.record_fault(*t.granules, base, src, bytes, static_cast<std::uint64_t>(ns));
      return;
    }
    const clock::time_point begin = clock::now();
    if (!read_rows(t, row, n, dst, cr)) {
      t.granules->forget(base, src, bytes);  // not in the page cache, or not known to be
      return;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - begin);
    costs.record(way::read, bytes, static_cast<std::uint64_t>(ns.count()));
    t.granules->mark_read(base, src, bytes);
  } else if (t.fd >= 0) {
    read_rows(t, row, n, dst, cr);
  } else if (t.item->c_contiguous) {
    if (!detail::copy_from_mapping(dst, t.data + row * t.row_bytes, n * t.row_bytes)) {
      task by_read = t;  // io="map": read where the mapping failed, to say what is missing
      by_read.fd = state_of(*t.field->source).fds[t.item->shard];
      read_rows(by_read, row, n, dst, cr);
    }
  } else {
    // Through the mapping, whatever the io mode: a page the file no longer has is an error.
    const array_view v = t.field->source->array(t.index);
    std::vector<std::uint64_t> idx(v.ndim());
    strided_copy c{&v, row, n, dst, idx.data()};
    const auto [first, size] = span_of(v);
    if (const void* at = detail::copy_guarded(first, size, &strided_copy::run, &c)) {
      const dataset::state& st = state_of(*t.field->source);
      const std::int64_t gone = static_cast<const std::byte*>(at) - v.data();
      throw errors::cut_since_opened(
          st.paths[t.item->shard], st.member_name(t.index),
          static_cast<std::uint64_t>(static_cast<std::int64_t>(t.item->offset) + gone),
          detail::size_now(st.fds[t.item->shard]));
    }
  }
}

void run_task(const task& t, const excerpt_options& o, chunk_reader& cr) {
  const dataset_item& it = *t.item;
  const std::uint64_t len = it.length;
  std::uint64_t copied = 0;
  if (o.pad == pad_mode::wrap) {
    std::uint64_t row = t.start % len;
    while (copied < t.length) {
      const std::uint64_t n = std::min(len - row, t.length - copied);
      copy_rows(t, row, n, t.dst + copied * t.row_bytes, cr);
      copied += n;
      row = 0;
    }
  } else {
    copied = std::min(t.length, len - t.start);  // start <= len was checked
    copy_rows(t, t.start, copied, t.dst, cr);
    fill_rows(t.dst + copied * t.row_bytes, (t.length - copied) * t.row_bytes,
              t.field->fill.empty() ? o.fill : t.field->fill);
  }
  if (t.valid) *t.valid = static_cast<std::int64_t>(copied);
}

}  // namespace

std::string_view to_string(pad_mode pad) { return pad_text.name(pad); }
pad_mode parse_pad_mode(std::string_view text) { return pad_text.parse(text); }
void validate(const excerpt_options& options) {
  pad_text.check(options.pad);
  io_text.check(options.io);
}

std::uint64_t field_length(std::uint64_t length, std::uint64_t num, std::uint64_t den) {
  if (num == 0 || den == 0) {
    throw errors::invalid_argument("<gather>", "a field's rate must be positive, not " +
                                                   std::to_string(num) + "/" + std::to_string(den));
  }
  const u128 rows = static_cast<u128>(length) * num;
  if (rows % den != 0 || rows / den > UINT64_MAX) {
    throw errors::invalid_argument("<gather>", "an excerpt of " + std::to_string(length) +
                                                   " rows at rate " + std::to_string(num) + "/" +
                                                   std::to_string(den) +
                                                   " is not a whole number of rows");
  }
  return static_cast<std::uint64_t>(rows / den);
}

item_layout batch_layout(const dataset& ds, const std::int64_t* indices, std::size_t count) {
  if (count == 0) throw errors::invalid_argument("<gather>", "an empty batch has no layout");
  const dataset::state& st = state_of(ds);
  const item_layout want = st.layouts[st.items[checked_index(st, indices[0], 0)].layout];
  for (std::size_t k = 1; k < count; ++k) check_layout(st, checked_index(st, indices[k], k), want);
  return want;
}

namespace {

// A checked gather, ready to copy: its tasks in read order cut into chunks of about equal
// bytes. It owns copies of the fields and options that its tasks point to.
struct plan {
  std::vector<gather_field> fields;
  excerpt_options options;
  std::vector<task> tasks;
  std::vector<std::size_t> bounds{0, 0};  // chunk c is tasks [bounds[c], bounds[c + 1])
  std::size_t threads = 1;
  bool reads = false;                                   // some task reads from a descriptor
  mutable std::atomic<bool> read_ahead_started{false};  // read_ahead() ran (once is enough)
  mutable std::atomic<std::size_t> misses{0};           // pieces found out of the page cache
  // may_map's probes, one per archive gathered automatically (task::probe): what it found
  // (0 not yet, 1 may map, 2 read).
  std::unique_ptr<std::atomic<int>[]> probes;

  std::size_t chunks() const { return bounds.size() - 1; }
  void run_chunk(std::size_t c) const {
    chunk_reader cr{*this};
    for (std::size_t t = bounds[c]; t < bounds[c + 1]; ++t) {
      // Start loading the next excerpt while this one is copied: random reads are latency
      // bound, and the hardware prefetcher only follows a stream once it has begun. Only
      // from pages the process maps already (a prefetch of any other page is dropped).
      if (t + 1 < bounds[c + 1]) {
        const task& next = tasks[t + 1];
        const std::uint64_t n = std::min<std::uint64_t>(next.length * next.row_bytes, 4096);
        if (next.fd < 0 || (next.granules && cr.mapping != chunk_reader::gate::closed &&
                            next.granules->route_of(next.item->data - next.item->offset, next.key,
                                                    n) == detail::granule_map::route::map)) {
          for (std::uint64_t off = 0; off < n; off += 64) __builtin_prefetch(next.key + off, 0, 3);
        }
      }
      run_task(tasks[t], options, cr);
    }
  }
};

void read_ahead(const plan& p) {
  if (p.read_ahead_started.exchange(true)) return;
  for (const task& t : p.tasks) {
    if (t.fd < 0) continue;
    const std::uint64_t len = t.item->length;
    const std::uint64_t first = p.options.pad == pad_mode::wrap ? t.start % len : t.start;
    // A wrapped excerpt of more rows than the member needs the whole member.
    const std::uint64_t rows = std::min(t.length, len - std::min(first, len));
    const bool whole = p.options.pad == pad_mode::wrap && rows < t.length;
    const std::uint64_t begin = whole ? 0 : first;
    const std::uint64_t end = whole ? len : first + rows;
    detail::will_need(t.fd, t.item->offset + begin * t.row_bytes, (end - begin) * t.row_bytes);
  }
}

std::atomic<int>& mapping_probe(const plan& p, const task& t) { return p.probes[t.probe]; }

bool reading_ahead(const plan& p) { return p.read_ahead_started.load(std::memory_order_relaxed); }

// One piece in 32 of the batch, and at least one: a batch of 256 excerpts turns cold at its
// 9th piece out of memory. On the development VM about 100 pages a second of a cached
// archive left the page cache with no reclaim counted; turning cold at the first of them
// sent most batches of a long run to reads (and fadvise calls) for the 8 after it.
bool count_miss(const plan& p) {
  const std::size_t cold = 1 + p.tasks.size() / 32;
  return p.misses.fetch_add(1, std::memory_order_relaxed) + std::size_t{1} >= cold;
}

// What every excerpt of one field shares.
struct field_shape {
  const dataset::state* source;
  item_layout want;       // the layout each item must have
  std::uint32_t want_id;  // its id among the dataset's layouts (UINT32_MAX: compare each)
  std::uint64_t length;   // rows per excerpt
};

// Checks what a field asks for as a whole: its layout, its fill element and its output size.
field_shape check_field(const gather_field& f, std::uint64_t length, std::size_t count,
                        const excerpt_options& o) {
  if (!f.source || !f.indices || !f.out) {
    const char* missing = !f.source ? "source dataset" : !f.indices ? "indices" : "output";
    throw errors::invalid_argument("<gather>",
                                   std::string("a field has no ") + missing + " (a null pointer)");
  }
  const dataset::state& st = state_of(*f.source);
  field_shape fs{&st, f.expect, UINT32_MAX, length};
  if (f.expect.row_bytes == 0) {
    // Items of the same dataset layout as the first need no comparison of dtypes and shapes.
    fs.want_id = st.items[checked_index(st, f.indices[0], 0)].layout;
    fs.want = st.layouts[fs.want_id];
  }
  const std::vector<std::byte>& fill = f.fill.empty() ? o.fill : f.fill;
  if (!fill.empty() && o.pad == pad_mode::fill && fill.size() != fs.want.type.itemsize()) {
    throw errors::invalid_argument("<gather>", "the fill value has " + std::to_string(fill.size()) +
                                                   " bytes but the batch's dtype " +
                                                   fs.want.type.str() + " has " +
                                                   std::to_string(fs.want.type.itemsize()));
  }
  const u128 need = static_cast<u128>(count) * length * fs.want.row_bytes;
  if (need != f.out_bytes) {
    throw errors::invalid_argument(
        "<gather>", "the output has " + std::to_string(f.out_bytes) + " bytes but " +
                        std::to_string(count) + " excerpts of " + std::to_string(length) +
                        " rows of " + std::to_string(fs.want.row_bytes) + " bytes need " +
                        std::to_string(static_cast<std::uint64_t>(need)));
  }
  return fs;
}

// Checks that rows [start, start + length) of item i may be taken with `pad`.
void check_window(const dataset::state& st, std::size_t i, std::uint64_t start,
                  std::uint64_t length, pad_mode pad) {
  const std::uint64_t rows = st.items[i].length;
  auto window = [&] {  // only built for an error: nothing is allocated per item
    const u128 end = static_cast<u128>(start) + length;
    return "excerpt [" + std::to_string(start) + ", " +
           (end > UINT64_MAX ? std::string("...") : std::to_string(start + length)) + ")";
  };
  if (pad == pad_mode::none && (start > rows || length > rows - start)) {
    throw item_error(errors::invalid_argument, st, i,
                     window() + " runs past the end of the member (" + std::to_string(rows) +
                         " rows); pad or wrap to allow it");
  }
  if (pad == pad_mode::fill && start > rows) {
    throw item_error(
        errors::invalid_argument, st, i,
        window() + " starts past the end of the member (" + std::to_string(rows) + " rows)");
  }
  if (pad == pad_mode::wrap && rows == 0 && length > 0) {
    throw item_error(errors::invalid_argument, st, i, "an empty member cannot be wrapped");
  }
}

// The dataset's granule maps (io_mode::automatic), made at the first call, every granule
// unseen again in a child process after fork().
std::vector<detail::granule_map>& granules_of(const dataset::state& st) {
  std::call_once(st.granules_made, [&st] {
    st.granules = std::vector<detail::granule_map>(st.readers.size());
    for (std::size_t sh = 0; sh < st.readers.size(); ++sh) {
      st.granules[sh].cover(st.readers[sh].file_size());
    }
  });
  for (detail::granule_map& g : st.granules) g.forget_after_fork();
  return st.granules;
}

// Checks every excerpt of field `f` and adds a task for each.
void plan_field(const gather_field& f, const field_shape& fs, const std::int64_t* starts,
                std::size_t count, pad_mode pad, io_mode io, std::vector<task>& tasks) {
  const dataset::state& st = *fs.source;
  const std::uint64_t row_bytes = fs.want.row_bytes;
  const io_mode asked = io != io_mode::automatic ? io : st.io;
  const bool by_read = asked != io_mode::map;
  std::vector<detail::granule_map>* granules =
      asked == io_mode::automatic ? &granules_of(st) : nullptr;
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t i = checked_index(st, f.indices[k], k);
    const dataset_item& it = st.items[i];
    if (it.layout != fs.want_id) check_layout(st, i, fs.want);
    if (starts[k] < 0) {
      throw item_error(errors::invalid_argument, st, i,
                       "excerpt start " + std::to_string(starts[k]) + " is negative");
    }
    const u128 scaled = static_cast<u128>(starts[k]) * f.rate_num;
    const std::uint64_t start = static_cast<std::uint64_t>(scaled / f.rate_den);
    check_window(st, i, start, fs.length, pad);
    // A deflated member is inflated here, on its first gather (once; its reader keeps it).
    const std::byte* data = it.data ? it.data : f.source->array(i).data();
    const std::uint64_t offset = std::min(start, it.length) * row_bytes;
    const bool read = by_read && it.data && it.c_contiguous;
    tasks.push_back({&f, &it, i, start, fs.length, row_bytes,
                     f.out + static_cast<std::uint64_t>(k) * fs.length * row_bytes,
                     f.valid ? f.valid + k : nullptr, data, data + offset,
                     read ? st.fds[it.shard] : -1,
                     read && granules ? &(*granules)[it.shard] : nullptr});
  }
}

// Cuts the tasks, sorted in read order, into chunks of about equal bytes for `threads`.
std::vector<std::size_t> chunk_bounds(const std::vector<task>& tasks, std::size_t threads) {
  std::uint64_t total_bytes = 0;
  for (const task& t : tasks) total_bytes += t.length * t.row_bytes;
  // threads * 4 wrapped to 0 for a multiple of 2^62 threads (a division by zero below).
  const std::size_t chunks = std::max<std::size_t>(
      1, threads == 1 || tasks.size() <= 1 ? 1
         : threads > tasks.size() / 4      ? tasks.size()
                                           : threads * 4);
  const std::uint64_t per_chunk = total_bytes / chunks + 1;
  std::vector<std::size_t> bounds{0};
  std::uint64_t acc = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    acc += tasks[t].length * tasks[t].row_bytes;
    if (acc >= per_chunk * bounds.size() && t + 1 < tasks.size()) bounds.push_back(t + 1);
  }
  bounds.push_back(tasks.size());
  return bounds;
}

std::unique_ptr<plan> make_plan(const std::vector<gather_field>& given, const std::int64_t* starts,
                                std::size_t count, const excerpt_options& o) {
  validate(o);
  detail::guard_sigbus();  // before any copy through a mapping, every gather
  auto p = std::make_unique<plan>();
  p->fields = given;
  p->options = o;
  if (given.empty() || count == 0) return p;
  if (!starts) throw errors::invalid_argument("<gather>", "no starts given (a null pointer)");
  // Every field's length is checked before anything else.
  std::vector<std::uint64_t> lengths;
  for (const gather_field& f : p->fields) {
    lengths.push_back(field_length(o.length, f.rate_num, f.rate_den));
  }
  p->tasks.reserve(p->fields.size() * count);
  for (std::size_t fi = 0; fi < p->fields.size(); ++fi) {
    const gather_field& f = p->fields[fi];
    plan_field(f, check_field(f, lengths[fi], count, o), starts, count, o.pad, o.io, p->tasks);
  }
  // Read in address order: file order within an archive.
  std::sort(p->tasks.begin(), p->tasks.end(),
            [](const task& a, const task& b) { return a.key < b.key; });
  p->threads = o.threads == 0 ? detail::thread_pool::shared().workers() + 1 : o.threads;
  p->bounds = chunk_bounds(p->tasks, p->threads);
  for (const task& t : p->tasks) p->reads = p->reads || t.fd >= 0;
  // One probe per run of an archive's tasks (in address order, an archive's tasks are
  // together; were they not, the archive would only be probed once more).
  std::size_t archives = 0;
  const detail::granule_map* last = nullptr;
  for (task& t : p->tasks) {
    if (!t.granules) continue;
    if (t.granules != last) ++archives;
    last = t.granules;
    t.probe = archives - 1;
  }
  p->probes = std::make_unique<std::atomic<int>[]>(archives);
  return p;
}

}  // namespace

struct pending_gather::state {
  std::shared_ptr<const plan> work;
  detail::thread_pool::ticket ticket;
};

pending_gather::pending_gather() = default;
pending_gather::pending_gather(pending_gather&&) noexcept = default;
pending_gather& pending_gather::operator=(pending_gather&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (...) {  // a gather nobody waits for has nobody to report to
    }
    s_ = std::move(other.s_);
  }
  return *this;
}
pending_gather::~pending_gather() {
  try {
    wait();
  } catch (...) {  // as above: the output is never written after this returns
  }
}

void pending_gather::wait() {
  if (!s_) return;
  const std::unique_ptr<state> s = std::move(s_);
  s->ticket.wait();
}

namespace {

// A dataset whose last batches were not in memory: start reading this one at once (while the
// pool may still be busy with earlier batches), and count it as one of them. Every gather
// counts, synchronous or not: otherwise a dataset gathered only synchronously stays "cold"
// forever after one piece was found out of memory, and io_mode::automatic never maps again.
void start_if_cold(const plan& p) {
  if (!p.reads) return;
  bool cold = false;
  for (const gather_field& f : p.fields) {
    std::atomic<int>& left = state_of(*f.source).cold_batches;
    int n = left.load(std::memory_order_relaxed);
    while (n > 0 && !left.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
    cold = cold || n > 0;
  }
  if (cold) read_ahead(p);
}

}  // namespace

void gather(const std::vector<gather_field>& fields, const std::int64_t* starts, std::size_t count,
            const excerpt_options& o) {
  const std::unique_ptr<plan> p = make_plan(fields, starts, count, o);
  start_if_cold(*p);
  detail::thread_pool::shared().run(p->chunks(), p->threads,
                                    [&](std::size_t c) { p->run_chunk(c); });
}

pending_gather gather_async(const std::vector<gather_field>& fields, const std::int64_t* starts,
                            std::size_t count, const excerpt_options& o) {
  std::shared_ptr<const plan> p = make_plan(fields, starts, count, o);
  start_if_cold(*p);
  pending_gather pending;
  pending.s_ = std::make_unique<pending_gather::state>();
  pending.s_->ticket = detail::thread_pool::shared().post(p->chunks(), p->threads,
                                                          [p](std::size_t c) { p->run_chunk(c); });
  pending.s_->work = std::move(p);
  return pending;
}

void gather(const dataset& source, const std::int64_t* indices, const std::int64_t* starts,
            std::size_t count, std::byte* out, std::uint64_t out_bytes,
            const excerpt_options& options, std::int64_t* valid) {
  gather_field f;
  f.source = &source;
  f.indices = indices;
  f.out = out;
  f.out_bytes = out_bytes;
  f.valid = valid;
  gather({f}, starts, count, options);
}

}  // namespace mmnpz
