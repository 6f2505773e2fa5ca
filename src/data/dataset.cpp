#include "mmnpz/data/dataset.hpp"

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "data/dataset_state.hpp"
#include "data/enum_text.hpp"
#include "data/thread_pool.hpp"
#include "detail/errors.hpp"
#include "detail/huge_pages.hpp"
#include "detail/paths.hpp"
#include "detail/names.hpp"
#include "mmnpz/npy.hpp"

namespace mmnpz {
namespace {

using detail::dataset_item;

const detail::enum_text<shard_order, 2> order_text{
    "<dataset>", "order", {"concatenate", "interleave"}};
const detail::enum_text<io_mode, 3> io_text{"<dataset>", "io", {"auto", "read", "map"}};

bool has_pattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// "dir/train@16.npz" -> {"dir/train", 16, ".npz"}; nothing when `spec` is not a shard spec.
struct shard_spec {
  std::string stem;
  std::size_t count = 0;
  std::string ext;
};
std::optional<shard_spec> parse_shard_spec(const std::string& spec) {
  const std::size_t slash = spec.rfind('/');
  const std::size_t at = spec.rfind('@');
  if (at == std::string::npos || (slash != std::string::npos && at < slash) || at == 0) return {};
  std::size_t end = at + 1;
  while (end < spec.size() && spec[end] >= '0' && spec[end] <= '9') ++end;
  if (end == at + 1 || end - at - 1 > 9) return {};
  if (end < spec.size() && (spec[end] != '.' || spec.find('/', end) != std::string::npos))
    return {};
  shard_spec s{spec.substr(0, at), std::stoul(spec.substr(at + 1, end - at - 1)), spec.substr(end)};
  if (s.count == 0) return {};
  return s;
}

std::string shard_name(const shard_spec& s, std::size_t i) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "-%05zu-of-%05zu", i, s.count);
  return s.stem + digits + s.ext;
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (out.empty()) throw errors::os(pattern, "find any file matching", ENOENT);
  std::sort(out.begin(), out.end());
  return out;
}

bool is_c_contiguous(const std::vector<std::uint64_t>& shape,
                     const std::vector<std::int64_t>& strides, std::uint64_t itemsize) {
  std::int64_t expected = static_cast<std::int64_t>(itemsize);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 1 && strides[d] != expected) return false;
    expected *= static_cast<std::int64_t>(shape[d]);
  }
  return true;
}

// One archive's items, their layouts numbered within the archive (merged afterwards).
struct shard_items {
  std::vector<dataset_item> items;
  std::vector<item_layout> layouts;
  std::size_t name_bytes = 0;  ///< of the items' member names
};

std::uint32_t intern(std::vector<item_layout>& layouts, const dtype& type,
                     std::vector<std::uint64_t> trailing) {
  for (std::size_t l = layouts.size(); l-- > 0;) {  // the last one is nearly always it
    if (layouts[l].type == type && layouts[l].trailing == trailing) {
      return static_cast<std::uint32_t>(l);
    }
  }
  std::uint64_t row = type.itemsize();
  for (auto d : trailing) row *= d;  // cannot overflow: the whole array's size was checked
  layouts.push_back({type, std::move(trailing), row});
  return static_cast<std::uint32_t>(layouts.size() - 1);
}

// The members of `r` that are items, in directory order.
std::vector<std::size_t> item_members(const reader& r, const std::string& select) {
  std::vector<std::size_t> out;
  detail::reserve_huge(out, r.size());
  for (std::size_t m = 0; m < r.size(); ++m) {
    const member_info& info = r.member(m);
    if (r.find(info.name) != m) continue;  // shadowed by a later member of the same name
    const std::string_view key = detail::stem(info.name);
    if (select.empty()) {
      // Without a select, sidecar members (a clip's "<name>.json", say) are no items.
      if (key.size() == info.name.size()) continue;
    } else if (::fnmatch(select.c_str(), std::string(key).c_str(), 0) != 0) {
      continue;
    }
    out.push_back(m);
  }
  return out;
}

// The items' headers, decoded in parts of this many members at a time on the pool, each part
// in the order of its members in the file (one small read each).
constexpr std::size_t decode_part = 256;

// What opening learned of one stored item from its headers (reader::visit_arrays, which
// keeps no decoded state in the reader): its item with `layout` numbered within its part, or
// the error its array() would throw.
struct decoded_item {
  dataset_item item;
  bool zero_d = false;
  std::exception_ptr failure;
};

// One part of an archive's stored items to decode: `members` (in file order) are at
// `positions` of the archive's item list; the part's layouts are numbered within it.
struct decode_job {
  std::size_t shard;
  std::vector<std::size_t> members;
  std::vector<std::size_t> positions;
  std::vector<item_layout> layouts;
};

// The parts of every archive's stored items, each part in file order (deflated items are
// decoded by read_shard: only their headers are inflated).
std::vector<decode_job> decode_jobs(const std::vector<std::optional<reader>>& readers,
                                    const std::vector<std::vector<std::size_t>>& members) {
  std::vector<decode_job> jobs;
  for (std::size_t sh = 0; sh < readers.size(); ++sh) {
    const reader& r = *readers[sh];
    std::vector<std::size_t> order;  // positions of stored items, in file order
    for (std::size_t k = 0; k < members[sh].size(); ++k) {
      if (!r.member(members[sh][k]).is_deflated()) order.push_back(k);
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return r.member(members[sh][a]).local_header_offset <
             r.member(members[sh][b]).local_header_offset;
    });
    for (std::size_t k = 0; k < order.size(); k += decode_part) {
      decode_job job{sh, {}, {}, {}};
      for (std::size_t j = k; j < std::min(order.size(), k + decode_part); ++j) {
        job.positions.push_back(order[j]);
        job.members.push_back(members[sh][order[j]]);
      }
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

// Decodes the job's members into `out` (an archive's items by position), with no state kept in
// the reader: a dataset of a million members keeps its items, not a million decoded headers.
void run_decode_job(const reader& r, decode_job& job, std::vector<decoded_item>& out) {
  std::vector<std::pair<std::size_t, std::size_t>> position_of;  // (member, position), sorted
  for (std::size_t j = 0; j < job.members.size(); ++j) {
    position_of.emplace_back(job.members[j], job.positions[j]);
  }
  std::sort(position_of.begin(), position_of.end());
  r.visit_arrays(job.members, [&](std::size_t m, const array_view& v, std::exception_ptr failure) {
    const auto at = std::lower_bound(position_of.begin(), position_of.end(),
                                     std::pair<std::size_t, std::size_t>(m, 0));
    decoded_item& d = out[at->second];
    d.item.member = m;
    if (!v) {
      d.failure = std::move(failure);
      return;
    }
    const std::vector<std::uint64_t>& shape = v.shape();
    if (shape.empty()) {
      d.zero_d = true;
      return;
    }
    d.item.data = v.data();
    d.item.offset = v.file_offset();
    d.item.length = shape[0];
    d.item.c_contiguous = is_c_contiguous(shape, v.strides(), v.type().itemsize());
    d.item.layout = intern(job.layouts, v.type(), {shape.begin() + 1, shape.end()});
  });
}

[[noreturn]] void fail_zero_d(const reader& r, const member_info& info) {
  throw errors::invalid_argument(
      r.path(), info.name, error::no_offset,
      "is a 0-d array; dataset items need a first axis (choose members with select)");
}

// The archive's items in directory order, from what the decode jobs found for the stored ones
// (`decoded`, by position; their layouts in `jobs`); the first error in that order is thrown.
shard_items read_shard(const reader& r, std::uint32_t shard,
                       const std::vector<std::size_t>& members,
                       const std::vector<decoded_item>& decoded,
                       const std::vector<const decode_job*>& job_of) {
  shard_items out;
  detail::reserve_huge(out.items, members.size());
  for (std::size_t k = 0; k < members.size(); ++k) {
    const std::size_t m = members[k];
    const member_info& info = r.member(m);
    dataset_item it;
    if (info.is_deflated()) {
      // Only the header is inflated now; gather inflates the data on first use.
      const npy_header h = r.array_header(m);
      if (h.type.has_object()) r.array(m);  // throws errc::object_array, as for stored ones
      if (h.shape.empty()) fail_zero_d(r, info);
      it.length = h.shape[0];
      it.member = m;
      it.c_contiguous = is_c_contiguous(
          h.shape, byte_strides(h.shape, h.type.itemsize(), h.fortran_order), h.type.itemsize());
      it.layout = intern(out.layouts, h.type, {h.shape.begin() + 1, h.shape.end()});
    } else {
      const decoded_item& d = decoded[k];
      if (d.failure) std::rethrow_exception(d.failure);
      if (d.zero_d) fail_zero_d(r, info);
      it = d.item;
      const item_layout& l = job_of[k]->layouts[d.item.layout];
      it.layout = intern(out.layouts, l.type, l.trailing);
    }
    it.shard = shard;
    out.items.push_back(it);
    out.name_bytes += info.name.size();
  }
  return out;
}

std::size_t thread_count(std::size_t wanted) {
  return wanted == 0 ? detail::thread_pool::shared().workers() + 1 : wanted;
}

}  // namespace

namespace detail {
std::function<void()> after_archives_open;
}  // namespace detail

std::string_view to_string(shard_order order) { return order_text.name(order); }
shard_order parse_shard_order(std::string_view text) { return order_text.parse(text); }
std::string_view to_string(io_mode io) { return io_text.name(io); }
io_mode parse_io_mode(std::string_view text) { return io_text.parse(text); }
void validate(const dataset_options& options) {
  order_text.check(options.order);
  io_text.check(options.io);
}

std::vector<std::string> expand_paths(const std::vector<std::string>& specs) {
  std::vector<std::string> out;
  for (const std::string& spec : specs) {
    detail::check_path(spec);  // a pattern cut at a NUL would match other files
    struct stat st {};
    if (::stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      // A folder: every .npz inside it, sorted (escaped: the folder's name is not a pattern).
      std::string escaped;
      for (char c : spec) {
        if (c == '*' || c == '?' || c == '[' || c == '\\') escaped += '\\';
        escaped += c;
      }
      if (escaped.empty() || escaped.back() != '/') escaped += '/';
      for (auto& p : glob_paths(escaped + "*.npz")) out.push_back(std::move(p));
    } else if (::stat(spec.c_str(), &st) == 0) {
      out.push_back(spec);  // an existing file is itself, whatever characters its name has
    } else if (auto s = parse_shard_spec(spec)) {
      for (std::size_t i = 0; i < s->count; ++i) out.push_back(shard_name(*s, i));
    } else if (has_pattern(spec)) {
      for (auto& p : glob_paths(spec)) out.push_back(std::move(p));
    } else {
      out.push_back(spec);
    }
  }
  return out;
}

dataset::dataset(const std::vector<std::string>& specs, dataset_options options) {
  validate(options);
  auto s = std::make_shared<state>();
  s->paths = expand_paths(specs);
  if (s->paths.size() > UINT32_MAX) {
    throw errors::invalid_argument(s->paths.front(), "too many archives for one dataset");
  }
  const std::size_t n = s->paths.size();
  std::vector<std::optional<reader>> readers(n);
  std::vector<std::vector<std::size_t>> members(n);
  std::vector<shard_items> per_shard(n);
  s->io = options.io;
  detail::thread_pool& pool = detail::thread_pool::shared();
  const std::size_t threads = thread_count(options.threads);
  pool.run(n, threads, [&](std::size_t i) {
    readers[i].emplace(s->paths[i]);
    members[i] = item_members(*readers[i], options.select);
  });
  if (detail::after_archives_open) detail::after_archives_open();
  if (!options.select.empty() &&
      std::all_of(members.begin(), members.end(), [](const auto& m) { return m.empty(); })) {
    // A mistyped pattern gave an empty dataset, refused only later ("no items to sample").
    throw errors::invalid_argument(
        s->where(), "select '" + options.select + "' matches no member of " +
                        (n == 1 ? std::string("the archive") :
                                  "any of the " + std::to_string(n) + " archives") +
                        " (names are matched without \".npy\")");
  }
  // Every stored item's local and .npy headers, read on the pool in file order and kept as
  // items only (errors are kept for read_shard, which meets them in directory order).
  std::vector<decode_job> jobs = decode_jobs(readers, members);
  std::vector<std::vector<decoded_item>> decoded(n);
  std::vector<std::vector<const decode_job*>> job_of(n);
  for (std::size_t i = 0; i < n; ++i) {
    detail::reserve_huge(decoded[i], members[i].size());
    decoded[i].resize(members[i].size());
    detail::reserve_huge(job_of[i], members[i].size());
    job_of[i].resize(members[i].size());
  }
  for (const decode_job& job : jobs) {
    for (std::size_t k : job.positions) job_of[job.shard][k] = &job;
  }
  pool.run(jobs.size(), threads, [&](std::size_t j) {
    run_decode_job(*readers[jobs[j].shard], jobs[j], decoded[jobs[j].shard]);
  });
  pool.run(n, threads, [&](std::size_t i) {
    per_shard[i] = read_shard(*readers[i], static_cast<std::uint32_t>(i), members[i], decoded[i],
                              job_of[i]);
    decoded[i] = {};
  });
  s->readers.reserve(n);
  s->fds.reserve(n);
  for (auto& r : readers) {
    s->readers.push_back(std::move(*r));
    s->fds.push_back(s->readers.back().descriptor());
    // After the headers were read (in file order, where read-ahead helps a cold open).
    detail::advise_random(s->fds.back());
  }

  // Number the items, and the archives' layouts in one table.
  std::vector<std::vector<std::uint32_t>> global_layout(n);  // per archive: local -> global
  for (std::size_t sh = 0; sh < n; ++sh) {
    for (const item_layout& l : per_shard[sh].layouts) {
      global_layout[sh].push_back(intern(s->layouts, l.type, l.trailing));
    }
  }
  std::size_t total = 0, longest = 0, name_bytes = 0;
  for (const auto& p : per_shard) {
    total += p.items.size();
    name_bytes += p.name_bytes;
    longest = std::max(longest, p.items.size());
  }
  // Every table below is written whole: in huge pages where the kernel has them (opening
  // 1,000,000 members wrote some 360 MB of fresh memory: 89,236 page faults).
  detail::reserve_huge(s->items, total);
  detail::reserve_huge(s->name_ends, total);
  detail::reserve_huge(s->lengths, total);
  detail::reserve_huge(s->member_names, name_bytes);
  auto add = [&](std::size_t sh, std::size_t k) {
    dataset_item it = per_shard[sh].items[k];
    it.layout = global_layout[sh][it.layout];
    s->items.push_back(it);
    s->lengths.push_back(it.length);
    s->member_names += s->readers[sh].member(it.member).name;
    s->name_ends.push_back(s->member_names.size());
  };
  if (options.order == shard_order::concatenate) {
    for (std::size_t sh = 0; sh < n; ++sh) {
      for (std::size_t k = 0; k < per_shard[sh].items.size(); ++k) add(sh, k);
    }
  } else {
    for (std::size_t k = 0; k < longest; ++k) {
      for (std::size_t sh = 0; sh < n; ++sh) {
        if (k < per_shard[sh].items.size()) add(sh, k);
      }
    }
  }
  s_ = std::move(s);
}

std::size_t dataset::size() const { return s_->items.size(); }
const std::vector<std::string>& dataset::paths() const { return s_->paths; }
std::size_t dataset::shards() const { return s_->readers.size(); }
const std::vector<std::uint64_t>& dataset::lengths() const { return s_->lengths; }
const std::vector<item_layout>& dataset::layouts() const { return s_->layouts; }

const reader& dataset::shard(std::size_t sh) const {
  if (sh >= s_->readers.size()) {
    throw errors::out_of_range("<dataset>", "no archive " + std::to_string(sh) +
                                                " (the dataset has " +
                                                std::to_string(s_->readers.size()) + ")");
  }
  return s_->readers[sh];
}

const dataset_item& dataset::state::item(std::size_t i) const {
  if (i >= items.size()) {
    throw errors::out_of_range("<dataset>", "index " + std::to_string(i) +
                                                " is out of range for a dataset of " +
                                                std::to_string(items.size()) + " items");
  }
  return items[i];
}

const dataset::state& state_of(const dataset& d) { return *d.s_; }

std::uint64_t dataset::length(std::size_t i) const { return s_->item(i).length; }
std::size_t dataset::layout_id(std::size_t i) const { return s_->item(i).layout; }
std::size_t dataset::shard_of(std::size_t i) const { return s_->item(i).shard; }
std::size_t dataset::member_of(std::size_t i) const { return s_->item(i).member; }

array_view dataset::array(std::size_t i) const {
  const auto& it = s_->item(i);
  return s_->readers[it.shard].array(it.member);
}

std::string_view dataset::name(std::size_t i) const {
  const auto& it = s_->item(i);
  return detail::stem(s_->readers[it.shard].member(it.member).name);
}

std::optional<std::size_t> dataset::find(std::string_view key) const {
  std::call_once(s_->names_built, [this] {
    s_->names.reserve(s_->items.size());
    for (std::size_t i = 0; i < s_->items.size(); ++i) s_->names.emplace(name(i), i);
  });
  auto it = s_->names.find(key);
  if (it == s_->names.end() && detail::stem(key) != key) it = s_->names.find(detail::stem(key));
  if (it == s_->names.end()) return std::nullopt;
  return it->second;
}

std::size_t dataset::index_of(std::string_view key) const {
  if (auto i = find(key)) return *i;
  throw errors::not_found(s_->where(), "no item named '" + std::string(key) + "'");
}

}  // namespace mmnpz
