// The `mmnpz` command: inspect, check, repair and convert .npz archives.
#include "cli.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"

namespace mmnpz::cli {
namespace {

constexpr const char* usage = R"(usage: mmnpz COMMAND [ARGS...]   (mmnpz COMMAND --help for more)

commands:
  ls FILE...                 one line per member: name, dtype, shape, bytes, method, offset
  info FILE...               a summary of each archive
  verify FILE...             check every member's CRC-32 and headers (exit 1 if any is bad)
  align IN OUT               rewrite an archive as stored, aligned members
  merge OUT IN...            all members of IN... into a new aligned archive OUT
  extract FILE MEMBER...     write members as files (arrays as .npy)
  recover FILE               rebuild the directory after a writer died
)";

const std::map<std::string, const char*> help = {
    {"ls", R"(usage: mmnpz ls [--json] FILE...
One line per member: name, dtype, shape, bytes, stored/deflated, data offset in the file, and
the largest power of two (up to 4096) that the offset is a multiple of. --json prints one JSON
array of objects per file instead.)"},
    {"info", R"(usage: mmnpz info FILE...
A summary: members, bytes, deflated members, how the array data is aligned, zip64, comment,
bytes before the archive, duplicate names.)"},
    {"verify", R"(usage: mmnpz verify [--quick] [--threads N] FILE...
Decodes every member's local header and .npy header and checks its CRC-32, in parallel.
--quick checks the structure and the last member only. Exit status 0 only if all is well;
each bad member is named on stderr.)"},
    {"align", R"(usage: mmnpz align [--align N] [--decompress] IN OUT
Rewrites IN as OUT with stored members whose array data is aligned to N bytes (default 64).
Deflated members are refused unless --decompress is given: they are then stored inflated,
streaming through a buffer of 8 MiB, so members larger than memory convert. OUT must not
exist.)"},
    {"merge", R"(usage: mmnpz merge [--align N] [--decompress] [--allow-duplicates] OUT IN...
Writes every member of IN... into the new archive OUT, aligned. A name in more than one input
is refused unless --allow-duplicates (readers then see the last one). --decompress stores
deflated members inflated, streaming, as align does.)"},
    {"extract", R"(usage: mmnpz extract [-o DIR] FILE MEMBER...
Writes each member's contents to DIR (default .) under its name; an array member is a
complete .npy file. MEMBER may omit ".npy". Existing files are not overwritten. Members are
streamed (deflated ones inflated in pieces of 8 MiB), so members larger than memory extract.)"},
    {"recover", R"(usage: mmnpz recover FILE
Rebuilds the central directory of an archive whose writer died before closing it: keeps
every complete member whose CRC-32 matches, cuts off the rest, and says what it did.)"},
};

struct usage_error {
  std::string message;
};

// Options and operands of one subcommand.
struct args {
  std::vector<std::string> operands;
  std::map<std::string, std::string> options;  // "--align" -> "4096"; flags -> ""

  bool has(const std::string& o) const { return options.count(o) != 0; }
};

args parse(const std::vector<std::string>& argv, const std::set<std::string>& flags,
           const std::set<std::string>& valued) {
  args a;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.size() > 1 && s[0] == '-') {
      if (flags.count(s)) {
        a.options[s] = "";
        continue;
      }
      if (valued.count(s)) {
        if (i + 1 == argv.size()) throw usage_error{s + " needs a value"};
        a.options[s] = argv[++i];
        continue;
      }
      if (s != "-") throw usage_error{"unknown option " + s};
    }
    a.operands.push_back(s);
  }
  return a;
}

std::size_t number(const args& a, const std::string& option, std::size_t fallback) {
  if (!a.has(option)) return fallback;
  const std::string& v = a.options.at(option);
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw usage_error{option + " takes a number, not '" + v + "'"};
  return static_cast<std::size_t>(n);
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string shape_json(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::uint64_t alignment_of(std::uint64_t offset) {
  return offset == 0 ? 4096 : std::min<std::uint64_t>(offset & (~offset + 1), 4096);
}

// A progress line on stderr when it is a terminal; nothing in pipes.
class progress {
 public:
  progress(const char* what, std::uint64_t total) : what_(what), total_(total), on_(isatty(2)) {}
  void add(std::uint64_t bytes) {
    done_ += bytes;
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double mb = static_cast<double>(done_) / 1e6;
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const int bar = static_cast<int>(frac * 30);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3.0f%% %.1f MB %.0f MB/s", what_, bar,
                 "##############################", 30 - bar, "", frac * 100, mb,
                 secs > 0 ? mb / secs : 0.0);
  }
  ~progress() {
    if (on_) std::fputc('\n', stderr);
  }

 private:
  const char* what_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  bool on_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

int cmd_ls(const args& a) {
  if (a.operands.empty()) throw usage_error{"ls needs at least one FILE"};
  const bool json = a.has("--json");
  for (const auto& path : a.operands) {
    const reader r(path);
    if (!json && a.operands.size() > 1) std::printf("%s:\n", path.c_str());
    if (json) std::printf("[");
    for (std::size_t i = 0; i < r.size(); ++i) {
      const member_info& m = r.member(i);
      const char* method = m.is_deflated() ? "deflated" : "stored";
      std::string dtype = "-", shape = "-", shape_js = "null";
      std::string offset = "-", aligned = "-";
      std::uint64_t nbytes = m.uncompressed_size;
      if (m.is_deflated()) {
        // Only the header is inflated: array() would inflate the whole member and keep it.
        try {
          const npy_header h = r.array_header(i);
          if (h.type.has_object()) {
            dtype = "object";
          } else {
            dtype = h.type.str();
            shape = shape_text(h.shape);
            shape_js = shape_json(h.shape);
            nbytes = h.nbytes;
          }
        } catch (const error& e) {
          if (e.code() != errc::not_an_array) throw;
        }
      } else if (r.is_array(i)) {
        try {
          const array_view v = r.array(i);
          dtype = v.type().str();
          shape = shape_text(v.shape());
          shape_js = shape_json(v.shape());
          nbytes = v.nbytes();
          if (v.is_mapped()) {
            offset = std::to_string(v.file_offset());
            aligned = std::to_string(alignment_of(v.file_offset()));
          }
        } catch (const error& e) {
          if (e.code() != errc::object_array) throw;
          dtype = "object";
        }
      }
      if (json) {
        std::printf(
            "%s{\"name\": %s, \"dtype\": %s, \"shape\": %s, \"bytes\": %llu, "
            "\"method\": \"%s\", \"offset\": %s, \"alignment\": %s}",
            i ? ", " : "", json_string(m.name).c_str(),
            dtype == "-" ? "null" : json_string(dtype).c_str(), shape_js.c_str(),
            static_cast<unsigned long long>(nbytes), method,
            offset == "-" ? "null" : offset.c_str(), aligned == "-" ? "null" : aligned.c_str());
      } else {
        std::printf("%-24s %-10s %-16s %12llu %-8s %12s %5s\n", std::string(m.name).c_str(),
                    dtype.c_str(), shape.c_str(), static_cast<unsigned long long>(nbytes), method,
                    offset.c_str(), aligned.c_str());
      }
    }
    if (json) std::printf("]\n");
  }
  return 0;
}

int cmd_info(const args& a) {
  if (a.operands.empty()) throw usage_error{"info needs at least one FILE"};
  for (const auto& path : a.operands) {
    const reader r(path);
    std::uint64_t bytes = 0, deflated = 0, arrays = 0;
    std::map<std::uint64_t, std::size_t> alignments;
    std::map<std::string_view, std::size_t> seen;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const member_info& m = r.member(i);
      bytes += m.uncompressed_size;
      deflated += m.is_deflated();
      ++seen[m.name];
      if (!m.is_deflated() && r.is_array(i)) {
        try {
          ++alignments[alignment_of(r.array(i).file_offset())];
          ++arrays;
        } catch (const error& e) {
          if (e.code() != errc::object_array) throw;
        }
      }
    }
    std::size_t duplicates = 0;
    for (const auto& kv : seen) duplicates += kv.second > 1;
    std::printf("%s: %zu members, %llu bytes (%llu in the file), %llu deflated, zip64 %s\n",
                path.c_str(), r.size(), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(r.file_size()),
                static_cast<unsigned long long>(deflated), r.is_zip64() ? "yes" : "no");
    std::printf("  stored arrays by data alignment (bytes):");
    for (const auto& kv : alignments) {
      std::printf(" %llu: %zu", static_cast<unsigned long long>(kv.first), kv.second);
    }
    std::printf("%s\n", arrays ? "" : " none");
    std::printf("  bytes before the archive: %llu; comment: %zu bytes; duplicate names: %zu\n",
                static_cast<unsigned long long>(r.leading_bytes()), r.comment().size(), duplicates);
  }
  return 0;
}

int cmd_verify(const args& a) {
  if (a.operands.empty()) throw usage_error{"verify needs at least one FILE"};
  const std::size_t threads =
      std::max<std::size_t>(1, number(a, "--threads", std::thread::hardware_concurrency()));
  int status = 0;
  for (const auto& path : a.operands) {
    std::vector<std::string> bad;
    std::size_t checked = 0;
    try {
      const reader r(path);
      std::vector<std::size_t> todo;
      if (a.has("--quick")) {
        if (r.size()) todo.push_back(r.size() - 1);
      } else {
        for (std::size_t i = 0; i < r.size(); ++i) todo.push_back(i);
      }
      std::uint64_t total = 0;
      for (auto i : todo) total += r.member(i).uncompressed_size;
      progress bar("verify", total);
      std::mutex lock;
      std::atomic<std::size_t> next{0};
      const auto work = [&] {
        for (std::size_t k; (k = next++) < todo.size();) {
          const std::size_t i = todo[k];
          std::string problem;
          try {
            // A deflated member is streamed through the CRC-32 in pieces, never kept whole;
            // then only its header is inflated again to be checked.
            r.verify(i);
            if (!r.member(i).is_deflated()) {
              if (r.is_array(i)) r.array(i);
            } else {
              try {
                r.array_header(i);
              } catch (const error& e) {
                if (e.code() != errc::not_an_array) throw;
              }
            }
          } catch (const error& e) {
            if (e.code() != errc::object_array) problem = e.what();
          }
          std::lock_guard<std::mutex> g(lock);
          if (!problem.empty()) bad.push_back(problem);
          bar.add(r.member(i).uncompressed_size);
        }
      };
      std::vector<std::thread> pool;
      for (std::size_t t = 1; t < std::min(threads, todo.size()); ++t) pool.emplace_back(work);
      work();
      for (auto& t : pool) t.join();
      checked = todo.size();
    } catch (const error& e) {
      bad.push_back(e.what());
    }
    std::sort(bad.begin(), bad.end());
    for (const auto& b : bad) std::fprintf(stderr, "%s\n", b.c_str());
    std::printf("%s: %s (%zu members checked%s)\n", path.c_str(), bad.empty() ? "OK" : "BAD",
                checked, bad.empty() ? "" : (", " + std::to_string(bad.size()) + " bad").c_str());
    if (!bad.empty()) status = 1;
  }
  return status;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// How much of a deflated member is inflated at a time: the memory a copy needs, whatever the
// member's size (8 MiB: the writer checksums pieces this large while it writes them).
constexpr std::size_t inflate_piece = std::size_t{8} << 20;

// Copies the deflated member `i` inflated, streaming: arrays as arrays (the writer writes a
// new .npy header, as for stored ones), anything else as bytes. Nothing is inflated whole.
void copy_inflated(const reader& in, std::size_t i, writer& w, progress& bar) {
  const member_info& m = in.member(i);
  const std::string_view name = m.name;
  std::optional<npy_header> h;
  if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") {
    try {
      h = in.array_header(i);
      if (h->type.has_object()) h.reset();  // pickles are copied as bytes
    } catch (const error& e) {
      if (e.code() != errc::not_an_array) throw;
    }
  }
  std::optional<writer::stream> s;
  std::uint64_t from = 0, to = m.uncompressed_size;  // the part of the contents to write
  if (h) {
    s.emplace(w.begin(name.substr(0, name.size() - 4), h->type, h->shape, h->fortran_order));
    from = h->data_offset;
    to = from + h->nbytes;  // bytes after the data, if any, are left out as for stored arrays
  } else {
    s.emplace(w.begin_bytes(name, m.uncompressed_size));
  }
  std::uint64_t at = 0;  // offset in the contents of the piece at hand
  in.read(
      i,
      [&](const std::byte* p, std::size_t n) {
        const std::uint64_t lo = std::max(at, from), hi = std::min(at + n, to);
        if (lo < hi) s->write(p + (lo - at), static_cast<std::size_t>(hi - lo));
        at += n;
        bar.add(n);
      },
      inflate_piece);
  s->commit();
}

// Copies every member of `in` into `w`: arrays as arrays (aligned), anything else as bytes.
void copy_members(const reader& in, writer& w, bool decompress, progress& bar) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const member_info& m = in.member(i);
    if (m.is_deflated()) {
      if (!decompress) {
        throw error(errc::unsupported, in.path(), std::string(m.name), m.local_header_offset,
                    "member is deflated: pass --decompress to store it inflated");
      }
      copy_inflated(in, i, w, bar);
      continue;
    }
    std::string_view name = m.name;
    bool as_array = false;
    array_view v;
    if (in.is_array(i) && name.size() > 4 && name.substr(name.size() - 4) == ".npy") {
      try {
        v = in.array(i);
        as_array = true;
      } catch (const error& e) {
        if (e.code() != errc::object_array) throw;  // pickles are copied as bytes
      }
    }
    if (as_array) {
      auto s = w.begin(name.substr(0, name.size() - 4), v.type(), v.shape(), v.fortran_order());
      constexpr std::uint64_t piece = std::uint64_t{64} << 20;
      for (std::uint64_t done = 0; done < v.nbytes(); done += piece) {
        const std::uint64_t k = std::min(piece, v.nbytes() - done);
        s.write(v.data() + done, static_cast<std::size_t>(k));
        bar.add(k);
      }
      s.commit();
      bar.add(m.uncompressed_size - v.nbytes());  // the .npy header, counted in the total
    } else {
      const bytes_view b = in.bytes(i);
      w.write_bytes(name, b.data, static_cast<std::size_t>(b.size));
      bar.add(b.size);
    }
  }
}

int write_archive(const std::string& out, const std::vector<std::string>& inputs, const args& a) {
  if (exists(out)) throw usage_error{"'" + out + "' exists: choose a new OUT"};
  writer_options o;
  o.alignment = number(a, "--align", 64);
  o.allow_duplicate_names = a.has("--allow-duplicates");
  std::vector<reader> readers;
  std::uint64_t total = 0;
  for (const auto& p : inputs) {
    readers.emplace_back(p);
    for (std::size_t i = 0; i < readers.back().size(); ++i) {
      total += readers.back().member(i).uncompressed_size;
    }
  }
  std::optional<writer> w;
  w.emplace(out, o);
  try {
    progress bar("write", total);
    for (const auto& r : readers) copy_members(r, *w, a.has("--decompress"), bar);
    w->close();
  } catch (...) {
    w.reset();  // a half-written OUT is not left behind
    std::remove(out.c_str());
    throw;
  }
  std::size_t members = 0;
  for (const auto& r : readers) members += r.size();
  std::printf("wrote %s: %zu members, data aligned to %zu bytes\n", out.c_str(), members,
              o.alignment);
  return 0;
}

int cmd_align(const args& a) {
  if (a.operands.size() != 2) throw usage_error{"align needs IN and OUT"};
  return write_archive(a.operands[1], {a.operands[0]}, a);
}

int cmd_merge(const args& a) {
  if (a.operands.size() < 2) throw usage_error{"merge needs OUT and at least one IN"};
  return write_archive(a.operands[0], {a.operands.begin() + 1, a.operands.end()}, a);
}

// Writes the contents of member `i` to the new file `target` as read() streams them, so that
// no member is ever held whole. A file that an error leaves incomplete is removed.
void extract_member(const reader& r, std::size_t i, const std::string& target) {
  FILE* f = std::fopen(target.c_str(), "wbx");
  if (!f) throw error(errc::io, target, {}, error::no_offset, "create", errno);
  try {
    r.read(
        i,
        [&](const std::byte* p, std::size_t n) {
          if (std::fwrite(p, 1, n, f) != n) {
            throw error(errc::io, target, {}, error::no_offset, "write to", errno);
          }
        },
        inflate_piece);
  } catch (...) {
    std::fclose(f);
    std::remove(target.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    const int e = errno;
    std::remove(target.c_str());
    throw error(errc::io, target, {}, error::no_offset, "write to", e);
  }
}

int cmd_extract(const args& a) {
  if (a.operands.size() < 2) throw usage_error{"extract needs FILE and at least one MEMBER"};
  const std::string dir = a.has("-o") ? a.options.at("-o") : ".";
  const reader r(a.operands[0]);
  for (std::size_t k = 1; k < a.operands.size(); ++k) {
    const std::size_t i = r.index_of(a.operands[k]);
    const std::string name(r.member(i).name);
    const std::string base = name.substr(name.rfind('/') + 1);  // never outside DIR
    if (base.empty() || base == "." || base == "..") {
      throw usage_error{"member '" + name + "' has no usable file name"};
    }
    const std::string target = dir + "/" + base;
    if (exists(target)) throw usage_error{"'" + target + "' exists: not overwritten"};
    extract_member(r, i, target);
    std::printf("%s\n", target.c_str());
  }
  return 0;
}

int cmd_recover(const args& a) {
  if (a.operands.size() != 1) throw usage_error{"recover needs one FILE"};
  const recover_result r = recover(a.operands[0]);
  if (r.directory_was_intact) {
    std::printf("%s: intact, %zu members; nothing changed\n", a.operands[0].c_str(),
                r.members_recovered);
  } else {
    std::printf("%s: recovered %zu members; cut off %llu bytes of incomplete data\n",
                a.operands[0].c_str(), r.members_recovered,
                static_cast<unsigned long long>(r.bytes_cut));
  }
  return 0;
}

}  // namespace

int main(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1] == "--help" || argv[1] == "-h" || argv[1] == "help") {
    std::fputs(usage, argv.size() < 2 ? stderr : stdout);
    return argv.size() < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> rest(argv.begin() + 2, argv.end());
  const auto h = help.find(command);
  if (h == help.end()) {
    std::fprintf(stderr, "mmnpz: unknown command '%s'\n%s", command.c_str(), usage);
    return 2;
  }
  if (std::find(rest.begin(), rest.end(), "--help") != rest.end()) {
    std::printf("%s\n", h->second);
    return 0;
  }
  try {
    if (command == "ls") return cmd_ls(parse(rest, {"--json"}, {}));
    if (command == "info") return cmd_info(parse(rest, {}, {}));
    if (command == "verify") return cmd_verify(parse(rest, {"--quick"}, {"--threads"}));
    if (command == "align") return cmd_align(parse(rest, {"--decompress"}, {"--align"}));
    if (command == "merge") {
      return cmd_merge(parse(rest, {"--decompress", "--allow-duplicates"}, {"--align"}));
    }
    if (command == "extract") return cmd_extract(parse(rest, {}, {"-o"}));
    return cmd_recover(parse(rest, {}, {}));
  } catch (const usage_error& e) {
    std::fprintf(stderr, "mmnpz %s: %s\n%s\n", command.c_str(), e.message.c_str(), h->second);
    return 2;
  } catch (const error& e) {
    std::fprintf(stderr, "mmnpz %s: %s\n", command.c_str(), e.what());
    return 1;
  }
}

}  // namespace mmnpz::cli
