#include "mmnpz/data/gather.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "npz/py_literal.hpp"
#include "data/thread_pool.hpp"

namespace mmnpz {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of two 64-bit values

using detail::dataset_item;

error item_error(const dataset& ds, std::size_t i, errc code, const std::string& detail) {
  const reader& r = ds.shard(ds.shard_of(i));
  return error(code, r.path(), std::string(r.member(ds.member_of(i)).name), error::no_offset,
               detail);
}

std::size_t checked_index(const dataset& ds, std::int64_t index, std::size_t k) {
  if (index < 0 || static_cast<std::uint64_t>(index) >= ds.size()) {
    throw error(errc::out_of_range, ds.paths().size() == 1 ? ds.paths()[0] : "<dataset>", {},
                error::no_offset,
                "index " + std::to_string(index) + " (batch entry " + std::to_string(k) +
                    ") is out of range for a dataset of " + std::to_string(ds.size()) + " items");
  }
  return static_cast<std::size_t>(index);
}

void check_layout(const dataset& ds, std::size_t i, const item_layout& want) {
  const item_layout& l = ds.layout(i);
  if (l.type != want.type) {
    throw item_error(ds, i, errc::type_mismatch,
                     "has dtype " + l.type.str() + " but the batch has " + want.type.str());
  }
  if (l.trailing != want.trailing) {
    throw item_error(ds, i, errc::invalid_argument,
                     "has trailing shape " + detail::shape_literal(l.trailing) +
                         " but the batch has " + detail::shape_literal(want.trailing));
  }
}

// Copies rows [row, row + n) of a member whose rows are not contiguous (Fortran order, or
// another stride pattern) element by element into C order.
void copy_strided(const array_view& v, std::uint64_t row, std::uint64_t n, std::byte* dst) {
  const std::size_t nd = v.ndim();
  const std::uint64_t item = v.type().itemsize();
  std::vector<std::uint64_t> idx(nd, 0);
  std::uint64_t total = n;
  for (std::size_t d = 1; d < nd; ++d) total *= v.shape()[d];
  for (std::uint64_t e = 0; e < total; ++e) {
    std::int64_t off = static_cast<std::int64_t>(row + idx[0]) * v.strides()[0];
    for (std::size_t d = 1; d < nd; ++d) off += static_cast<std::int64_t>(idx[d]) * v.strides()[d];
    std::memcpy(dst, v.data() + off, item);
    dst += item;
    for (std::size_t d = nd; d-- > 0;) {
      const std::uint64_t extent = d == 0 ? n : v.shape()[d];
      if (++idx[d] < extent) break;
      idx[d] = 0;
    }
  }
}

void copy_rows(const dataset& ds, std::size_t i, const dataset_item& it, const std::byte* data,
               std::uint64_t row, std::uint64_t n, std::uint64_t row_bytes, std::byte* dst) {
  if (n == 0) return;
  if (it.c_contiguous) {
    std::memcpy(dst, data + row * row_bytes, n * row_bytes);
  } else {
    copy_strided(ds.array(i), row, n, dst);
  }
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
  std::size_t item;  // dataset index
  std::uint64_t start;
  std::uint64_t length;
  std::uint64_t row_bytes;
  std::byte* dst;
  std::int64_t* valid;
  const std::byte* data;  // the item's data (the mapping, or its inflated copy)
  const std::byte* key;   // where the read begins, for ordering by file offset
};

void run_task(const task& t, const excerpt_options& o) {
  const dataset& ds = *t.field->source;
  const dataset_item& it = ds.item(t.item);
  const std::uint64_t len = it.length;
  std::uint64_t copied = 0;
  if (o.pad == pad_mode::wrap) {
    std::uint64_t row = t.start % len;
    while (copied < t.length) {
      const std::uint64_t n = std::min(len - row, t.length - copied);
      copy_rows(ds, t.item, it, t.data, row, n, t.row_bytes, t.dst + copied * t.row_bytes);
      copied += n;
      row = 0;
    }
  } else {
    copied = std::min(t.length, len - t.start);  // start <= len was checked
    copy_rows(ds, t.item, it, t.data, t.start, copied, t.row_bytes, t.dst);
    fill_rows(t.dst + copied * t.row_bytes, (t.length - copied) * t.row_bytes,
              t.field->fill.empty() ? o.fill : t.field->fill);
  }
  if (t.valid) *t.valid = static_cast<std::int64_t>(copied);
}

}  // namespace

std::uint64_t field_length(std::uint64_t length, std::uint64_t num, std::uint64_t den) {
  if (num == 0 || den == 0) {
    throw error(
        errc::invalid_argument, "<gather>", {}, error::no_offset,
        "a field's rate must be positive, not " + std::to_string(num) + "/" + std::to_string(den));
  }
  const u128 rows = static_cast<u128>(length) * num;
  if (rows % den != 0 || rows / den > UINT64_MAX) {
    throw error(errc::invalid_argument, "<gather>", {}, error::no_offset,
                "an excerpt of " + std::to_string(length) + " rows at rate " + std::to_string(num) +
                    "/" + std::to_string(den) + " is not a whole number of rows");
  }
  return static_cast<std::uint64_t>(rows / den);
}

item_layout batch_layout(const dataset& ds, const std::int64_t* indices, std::size_t count) {
  if (count == 0) {
    throw error(errc::invalid_argument, "<gather>", {}, error::no_offset,
                "an empty batch has no layout");
  }
  const item_layout want = ds.layout(checked_index(ds, indices[0], 0));
  for (std::size_t k = 1; k < count; ++k) check_layout(ds, checked_index(ds, indices[k], k), want);
  return want;
}

namespace {

// A checked gather, ready to copy: its tasks in read order cut into chunks of about equal
// bytes. It owns copies of the fields and options that its tasks point to.
struct plan {
  std::vector<gather_field> fields;
  excerpt_options options;
  std::vector<task> tasks;
  std::vector<std::size_t> bounds;  // chunk c is tasks [bounds[c], bounds[c + 1])
  std::size_t threads = 1;

  std::size_t chunks() const { return bounds.size() - 1; }
  void run_chunk(std::size_t c) const {
    for (std::size_t t = bounds[c]; t < bounds[c + 1]; ++t) {
      // Start loading the next excerpt while this one is copied: random reads are latency
      // bound, and the hardware prefetcher only follows a stream once it has begun.
      if (t + 1 < bounds[c + 1]) {
        const task& next = tasks[t + 1];
        const std::uint64_t n = std::min<std::uint64_t>(next.length * next.row_bytes, 4096);
        for (std::uint64_t off = 0; off < n; off += 64) __builtin_prefetch(next.key + off, 0, 3);
      }
      run_task(tasks[t], options);
    }
  }
};

std::unique_ptr<plan> make_plan(const std::vector<gather_field>& given, const std::int64_t* starts,
                                std::size_t count, const excerpt_options& o) {
  auto p = std::make_unique<plan>();
  p->fields = given;
  p->options = o;
  const std::vector<gather_field>& fields = p->fields;
  std::vector<task>& tasks = p->tasks;
  p->bounds = {0, 0};
  if (fields.empty() || count == 0) return p;
  tasks.reserve(fields.size() * count);
  std::uint64_t total_bytes = 0;
  std::vector<std::uint64_t> lengths;  // each field's rows, all checked before anything else
  for (const gather_field& f : fields)
    lengths.push_back(field_length(o.length, f.rate_num, f.rate_den));
  for (std::size_t fi = 0; fi < fields.size(); ++fi) {
    const gather_field& f = fields[fi];
    const dataset& ds = *f.source;
    const std::uint64_t flen = lengths[fi];
    const item_layout& want =
        f.expect.row_bytes != 0 ? f.expect : ds.layout(checked_index(ds, f.indices[0], 0));
    // Items of the same dataset layout as `want` need no comparison of dtypes and shapes.
    const std::uint32_t want_id =
        f.expect.row_bytes != 0 ? UINT32_MAX : ds.item(f.indices[0]).layout;
    const std::vector<std::byte>& fill = f.fill.empty() ? o.fill : f.fill;
    if (!fill.empty() && o.pad == pad_mode::fill && fill.size() != want.type.itemsize()) {
      throw error(errc::invalid_argument, "<gather>", {}, error::no_offset,
                  "the fill value has " + std::to_string(fill.size()) +
                      " bytes but the batch's dtype " + want.type.str() + " has " +
                      std::to_string(want.type.itemsize()));
    }
    const u128 need = static_cast<u128>(count) * flen * want.row_bytes;
    if (need != f.out_bytes) {
      throw error(errc::invalid_argument, "<gather>", {}, error::no_offset,
                  "the output has " + std::to_string(f.out_bytes) + " bytes but " +
                      std::to_string(count) + " excerpts of " + std::to_string(flen) + " rows of " +
                      std::to_string(want.row_bytes) + " bytes need " +
                      std::to_string(static_cast<std::uint64_t>(need)));
    }
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = checked_index(ds, f.indices[k], k);
      const dataset_item& it = ds.item(i);
      if (it.layout != want_id) check_layout(ds, i, want);
      if (starts[k] < 0) {
        throw item_error(ds, i, errc::invalid_argument,
                         "excerpt start " + std::to_string(starts[k]) + " is negative");
      }
      const u128 scaled = static_cast<u128>(starts[k]) * f.rate_num;
      const std::uint64_t start = static_cast<std::uint64_t>(scaled / f.rate_den);
      auto window = [&] {  // only built for an error: nothing is allocated per item
        const u128 end = static_cast<u128>(start) + flen;
        return "excerpt [" + std::to_string(start) + ", " +
               (end > UINT64_MAX ? std::string("...") : std::to_string(start + flen)) + ")";
      };
      if (o.pad == pad_mode::none && (start > it.length || flen > it.length - start)) {
        throw item_error(ds, i, errc::invalid_argument,
                         window() + " runs past the end of the member (" +
                             std::to_string(it.length) + " rows); pad or wrap to allow it");
      }
      if (o.pad == pad_mode::fill && start > it.length) {
        throw item_error(ds, i, errc::invalid_argument,
                         window() + " starts past the end of the member (" +
                             std::to_string(it.length) + " rows)");
      }
      if (o.pad == pad_mode::wrap && it.length == 0 && flen > 0) {
        throw item_error(ds, i, errc::invalid_argument, "an empty member cannot be wrapped");
      }
      // A deflated member is inflated here, on its first gather (once; its reader keeps it).
      const std::byte* data = it.data ? it.data : ds.array(i).data();
      const std::uint64_t offset = std::min(start, it.length) * want.row_bytes;
      tasks.push_back({&f, i, start, flen, want.row_bytes,
                       f.out + static_cast<std::uint64_t>(k) * flen * want.row_bytes,
                       f.valid ? f.valid + k : nullptr, data, data + offset});
      total_bytes += flen * want.row_bytes;
    }
  }

  // Read in address order (file order within an archive), in chunks of about equal bytes.
  std::sort(tasks.begin(), tasks.end(), [](const task& a, const task& b) { return a.key < b.key; });
  p->threads = o.threads == 0 ? detail::thread_pool::shared().workers() + 1 : o.threads;
  const std::size_t chunks = std::min(tasks.size(), p->threads == 1 ? 1 : p->threads * 4);
  p->bounds = {0};
  const std::uint64_t per_chunk = total_bytes / chunks + 1;
  std::uint64_t acc = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    acc += tasks[t].length * tasks[t].row_bytes;
    if (acc >= per_chunk * p->bounds.size() && t + 1 < tasks.size()) p->bounds.push_back(t + 1);
  }
  p->bounds.push_back(tasks.size());
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

void gather(const std::vector<gather_field>& fields, const std::int64_t* starts, std::size_t count,
            const excerpt_options& o) {
  const std::unique_ptr<plan> p = make_plan(fields, starts, count, o);
  detail::thread_pool::shared().run(p->chunks(), p->threads,
                                    [&](std::size_t c) { p->run_chunk(c); });
}

pending_gather gather_async(const std::vector<gather_field>& fields, const std::int64_t* starts,
                            std::size_t count, const excerpt_options& o) {
  std::shared_ptr<const plan> p = make_plan(fields, starts, count, o);
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
