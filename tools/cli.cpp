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
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "CLI/CLI.hpp"
#include "detail/utf8.hpp"
#include "mmnpz/mmnpz.hpp"
#include "zip/crc32.hpp"

namespace mmnpz::cli {
namespace {

// What the exit status means, as `--help` and the README state it.
constexpr int exit_ok = 0;
constexpr int exit_failed = 1;  // a check failed, or an archive or file could not be read/written
constexpr int exit_usage = 2;

constexpr const char* exit_status_text =
    "exit status: 0 success; 1 a failed check, or a bad or unreadable archive, or a file that\n"
    "could not be written; 2 a usage error (unknown command or option, missing operand,\n"
    "bad value, OUT or a target that exists).";

constexpr const char* json_text =
    "Every command takes --json (its results as JSON on stdout, one value per line) and --\n"
    "(every argument after it is an operand, even one that starts with '-'). Text output\n"
    "shows control characters in names escaped (\\n, \\x1b); JSON gives names exactly.";

// The writer's bound (writer_options::alignment): ls and info report alignments up to it.
constexpr std::uint64_t max_alignment = 65536;

struct command_text {
  const char* name;
  const char* summary;      // one line in `mmnpz --help`
  const char* description;  // the paragraph of `mmnpz NAME --help`
};

const command_text commands[] = {
    {"ls", "one line per member: name, dtype, shape, bytes, method, offset",
     "One line per member: name, dtype, shape, bytes, stored/deflated, data offset in the file,\n"
     "and the largest power of two (up to 65536) that the offset is a multiple of. A member\n"
     "of another method (bzip2, lzma) is listed with its size only. --json prints one JSON\n"
     "array of objects per FILE instead."},
    {"info", "a summary of each archive",
     "A summary: members, bytes, deflated members, how the array data is aligned (powers of\n"
     "two up to 65536), zip64, comment, bytes before and after the archive (what an interrupted\n"
     "append left), duplicate names. --json prints one JSON object per FILE instead."},
    {"verify", "check every member's CRC-32 and headers (exit 1 if any is bad)",
     "Decodes every member's local header and .npy header and checks its CRC-32, in parallel.\n"
     "--quick checks the structure and the last member only. Exit status 0 only if all is\n"
     "well; each bad member is named on stderr. --json prints one JSON object per FILE."},
    {"align", "rewrite an archive as stored, aligned members",
     "Rewrites IN as OUT with stored members whose array data is aligned to N bytes (a power\n"
     "of two from 1 to 65536, default 64). Deflated members are refused unless --decompress is\n"
     "given: they are then stored inflated, streaming through a buffer of 8 MiB, so members\n"
     "larger than memory convert. Every member's CRC-32 is checked as it is copied: a damaged\n"
     "member fails the command and leaves no OUT. Duplicate names are kept, in order (readers\n"
     "see the last). OUT must not exist."},
    {"merge", "all members of IN... into a new aligned archive OUT",
     "Writes every member of IN... into the new archive OUT, aligned. A name twice (in two\n"
     "inputs, or in one) is refused before OUT is made, unless --allow-duplicates (readers\n"
     "then see the last one). --decompress stores deflated members inflated, streaming, as\n"
     "align does, and CRC-32s are checked as align checks them. OUT must not exist."},
    {"extract", "write members as files (arrays as .npy)",
     "Writes each member's contents to DIR (default .) under the last part of its name (a/x.npy\n"
     "becomes DIR/x.npy: nothing is written outside DIR); an array member is a complete .npy\n"
     "file. MEMBER may omit \".npy\". Existing files are not overwritten. Members are streamed\n"
     "(deflated ones inflated in pieces of 8 MiB), so members larger than memory extract; a\n"
     "member whose CRC-32 does not match is not left behind (exit status 1).\n"
     "--json prints one JSON object per member written."},
    {"recover", "rebuild the directory after a writer died",
     "Rebuilds the central directory of an archive whose writer died before closing it: keeps\n"
     "every complete member whose CRC-32 matches, cuts off the rest, and says what it did."},
};

// A request the command line cannot carry out: exit status 2, the sentence, and the help
// when the command line itself was wrong (not when OUT or a target exists).
struct usage_error {
  std::string message;
  bool with_help = true;
};

// A whole number given to an option, digits only: CLI11 would take "-1" for the largest
// std::size_t. `refusal` completes "OPTION TEXT ..." when the text is no such number.
std::size_t whole_number(const char* option, const std::string& text, const char* refusal) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool digits =
      !text.empty() && text.size() <= 18 && std::all_of(text.begin(), text.end(), digit);
  if (!digits) throw usage_error{std::string(option) + " " + text + " " + refusal};
  return static_cast<std::size_t>(std::stoull(text));
}

// What each command is given: filled by CLI11 from the command line, checked by the command.
struct ls_options {
  std::vector<std::string> files;
  bool json = false;
};

struct info_options {
  std::vector<std::string> files;
  bool json = false;
};

struct verify_options {
  std::vector<std::string> files;
  bool quick = false;
  std::optional<std::string> threads;  // --threads N; none: one per core, and 0 is taken as 1
  bool json = false;
};

// align IN OUT and merge OUT IN...: both write a new archive.
struct write_options {
  std::vector<std::string> inputs;
  std::string out;
  std::string alignment = "64";  // --align N
  bool decompress = false;
  bool allow_duplicates = false;
  bool json = false;
};

struct extract_options {
  std::string file;
  std::vector<std::string> members;
  std::string dir = ".";
  bool json = false;
};

struct recover_options {
  std::string file;
  bool json = false;
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// "1 member", "2 members".
std::string members_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " member" : " members");
}

std::string shape_json(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A C1 control (U+0080-U+009F) or a line or paragraph separator (U+2028, U+2029).
bool line_breaking_or_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    std::uint32_t cp = 0;
    const std::size_t n = detail::utf8_decode_at(s, i, cp);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (n >= 2 && line_breaking_or_control(cp)) {
      // U+0080-U+009F, U+2028, U+2029: valid in JSON, but a reader splitting the output into
      // lines (Python's str.splitlines) would split one value in two.
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
      i += n;
      continue;
    } else if (u < 0x20 || u == 0x7F || n == 0) {
      // A control character, or a byte that is no UTF-8 (a path's, say): escaped, the latter
      // as Python's surrogateescape spells it (U+DC80-U+DCFF), so that os.fsencode() of the
      // decoded string gives the byte back.
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", n == 0 ? 0xDC00u + u : u);
      out += buf;
    } else {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

// Names, paths and messages as the human-readable output shows them: control characters (C0,
// DEL, C1), line separators and bytes that are no UTF-8 escaped (\n, \t, \r, \xNN,
// \u0080-\u009f, \u2028, \u2029), so that a hostile member name cannot recolour, move the
// cursor of or clear a terminal, nor split a line of `ls` in two. --json output gives every
// name exactly instead.
std::string shown(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = 0;
    const std::size_t n = detail::utf8_decode_at(s, i, cp);
    char buf[8];
    if (n == 0 || u < 0x20 || u == 0x7F) {
      const char* named = u == '\n' ? "\\n" : u == '\t' ? "\\t" : u == '\r' ? "\\r" : nullptr;
      if (!named) std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += named ? named : buf;
      ++i;
      continue;
    }
    if (n >= 2 && line_breaking_or_control(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

// The largest power of two, up to the writer's bound, that `offset` is a multiple of.
std::uint64_t alignment_of(std::uint64_t offset) {
  return offset == 0 ? max_alignment
                     : std::min<std::uint64_t>(offset & (~offset + 1), max_alignment);
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

// Opens `path`, saying on stderr (unless `warn` is false: an archive opened a second time) when
// an interrupted append left bytes after the archive's end record: the archive then opens as
// it was before the append, without the members it was writing, which `recover` restores.
reader open_archive(const std::string& path, bool warn = true) {
  reader_options o;
  if (warn) {
    o.on_interrupted_append = [](const std::string& p, std::uint64_t n) {
      std::fprintf(stderr,
                   "mmnpz: warning: %s: an interrupted append left %llu bytes after the "
                   "archive's end record; opened the archive as it was before the append. "
                   "`mmnpz recover %s` restores the appended members.\n",
                   p.c_str(), static_cast<unsigned long long>(n), p.c_str());
    };
  }
  return reader(path, o);
}

// How many members ls and info decode at a time: the views of each chunk are dropped before
// the next, so memory stays bounded however many members an archive has (decoding them all
// through array() would keep a million members' headers, some 400 MB).
constexpr std::size_t listing_chunk = 4096;

// Calls each(index, view, failure) for every member of `r` in directory order, their headers
// read chunk by chunk as reader::visit_arrays() reads them: `view` is array(index)'s, or empty
// with `failure` the error array(index) would throw; a deflated member has neither.
template <class Each>
void for_each_array(const reader& r, Each&& each) {
  std::vector<std::size_t> indices;
  std::vector<array_view> views;
  std::vector<std::exception_ptr> failures;
  for (std::size_t begin = 0; begin < r.size(); begin += listing_chunk) {
    const std::size_t n = std::min(listing_chunk, r.size() - begin);
    indices.resize(n);
    for (std::size_t k = 0; k < n; ++k) indices[k] = begin + k;
    views.assign(n, array_view());
    failures.assign(n, nullptr);
    r.visit_arrays(indices, [&](std::size_t i, const array_view& v, std::exception_ptr failure) {
      views[i - begin] = v;
      failures[i - begin] = std::move(failure);
    });
    for (std::size_t k = 0; k < n; ++k) each(begin + k, views[k], failures[k]);
  }
}

// Whether `failure` (from for_each_array) is an object array's; rethrows it when it is
// anything else than that or a member that is no .npy array.
bool is_object(const std::exception_ptr& failure) {
  if (!failure) return false;
  try {
    std::rethrow_exception(failure);
  } catch (const error& e) {
    if (e.code() == errc::object_array) return true;
    if (e.code() != errc::not_an_array) throw;
  }
  return false;
}

// A member's compression method as ls shows it.
std::string method_name(const member_info& m) {
  switch (m.method) {
    case 0:
      return "stored";
    case 8:
      return "deflated";
    case 12:
      return "bzip2";
    case 14:
      return "lzma";
    default:
      return "method " + std::to_string(m.method);
  }
}

int cmd_ls(const ls_options& a) {
  const bool json = a.json;
  for (const auto& path : a.files) {
    const reader r = open_archive(path);
    if (!json && a.files.size() > 1) std::printf("%s:\n", shown(path).c_str());
    // The JSON array is printed whole, or not at all when a member fails: never a part of one.
    std::string array = "[";
    for_each_array(r, [&](std::size_t i, const array_view& v, const std::exception_ptr& failure) {
      const member_info& m = r.member(i);
      const std::string method = method_name(m);
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
      } else if (m.method != 0) {
        // Of a method this library does not decode: listed with what the directory says.
      } else if (v) {
        dtype = v.type().str();
        shape = shape_text(v.shape());
        shape_js = shape_json(v.shape());
        nbytes = v.nbytes();
        if (v.is_mapped()) {
          offset = std::to_string(v.file_offset());
          aligned = std::to_string(alignment_of(v.file_offset()));
        }
      } else if (is_object(failure)) {
        dtype = "object";
      }
      if (json) {
        array += std::string(i ? ", " : "") + "{\"name\": " + json_string(m.name) +
                 ", \"dtype\": " + (dtype == "-" ? "null" : json_string(dtype)) +
                 ", \"shape\": " + shape_js + ", \"bytes\": " + std::to_string(nbytes) +
                 ", \"method\": " + json_string(method) + ", \"offset\": " +
                 (offset == "-" ? "null" : offset) +
                 ", \"alignment\": " + (aligned == "-" ? "null" : aligned) + "}";
      } else {
        std::printf("%-24s %-10s %-16s %12llu %-8s %12s %5s\n", shown(m.name).c_str(),
                    dtype.c_str(), shape.c_str(), static_cast<unsigned long long>(nbytes),
                    method.c_str(), offset.c_str(), aligned.c_str());
      }
    });
    if (json) std::printf("%s]\n", array.c_str());
  }
  return exit_ok;
}

int cmd_info(const info_options& a) {
  for (const auto& path : a.files) {
    const reader r = open_archive(path);
    std::uint64_t bytes = 0, deflated = 0, arrays = 0;
    std::map<std::uint64_t, std::size_t> alignments;
    std::map<std::string_view, std::size_t> seen;
    for_each_array(r, [&](std::size_t i, const array_view& v, const std::exception_ptr& failure) {
      const member_info& m = r.member(i);
      bytes += m.uncompressed_size;
      deflated += m.is_deflated();
      ++seen[m.name];
      if (v) {
        ++alignments[alignment_of(v.file_offset())];
        ++arrays;
      } else if (m.method == 0 || m.is_deflated()) {  // other methods: counted, not read
        is_object(failure);  // rethrows what is neither an object array nor no array
      }
    });
    std::size_t duplicates = 0;
    for (const auto& kv : seen) duplicates += kv.second > 1;
    if (a.json) {
      std::string by_alignment;
      for (const auto& kv : alignments) {
        by_alignment += (by_alignment.empty() ? "\"" : ", \"") + std::to_string(kv.first) +
                        "\": " + std::to_string(kv.second);
      }
      std::printf(
          "{\"path\": %s, \"members\": %zu, \"bytes\": %llu, \"file_bytes\": %llu, "
          "\"deflated\": %llu, \"zip64\": %s, \"alignments\": {%s}, \"leading_bytes\": %llu, "
          "\"comment_bytes\": %zu, \"duplicate_names\": %zu, \"bytes_after_archive\": %llu, "
          "\"interrupted_append\": %s}\n",
          json_string(path).c_str(), r.size(), static_cast<unsigned long long>(bytes),
          static_cast<unsigned long long>(r.file_size()), static_cast<unsigned long long>(deflated),
          r.is_zip64() ? "true" : "false", by_alignment.c_str(),
          static_cast<unsigned long long>(r.leading_bytes()), r.comment().size(), duplicates,
          static_cast<unsigned long long>(r.bytes_after_archive()),
          r.was_interrupted() ? "true" : "false");
      continue;
    }
    std::printf("%s: %s, %llu bytes (%llu in the file), %llu deflated, zip64 %s\n",
                shown(path).c_str(), members_text(r.size()).c_str(),
                static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(r.file_size()),
                static_cast<unsigned long long>(deflated), r.is_zip64() ? "yes" : "no");
    std::printf("  stored arrays by data alignment (bytes):");
    for (const auto& kv : alignments) {
      std::printf(" %llu: %zu", static_cast<unsigned long long>(kv.first), kv.second);
    }
    std::printf("%s\n", arrays ? "" : " none");
    std::printf("  bytes before the archive: %llu; comment: %zu bytes; duplicate names: %zu\n",
                static_cast<unsigned long long>(r.leading_bytes()), r.comment().size(), duplicates);
    std::printf("  bytes after the archive: %llu%s\n",
                static_cast<unsigned long long>(r.bytes_after_archive()),
                r.was_interrupted() ? " (an interrupted append: `mmnpz recover` restores its members)"
                                    : "");
  }
  return exit_ok;
}

int cmd_verify(const verify_options& a) {
  const std::size_t threads = std::max<std::size_t>(
      1, !a.threads ? std::thread::hardware_concurrency()
                    : whole_number("--threads", *a.threads, "is not a whole number"));
  int status = exit_ok;
  for (const auto& path : a.files) {
    std::vector<std::string> bad;
    std::size_t checked = 0;
    try {
      const reader r = open_archive(path);
      std::vector<std::size_t> todo;
      if (a.quick) {
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
      try {
        for (std::size_t t = 1; t < std::min(threads, todo.size()); ++t) pool.emplace_back(work);
      } catch (const std::system_error&) {
        // No more threads to be had (a process or address-space limit): those started and
        // this one share the work.
      }
      work();
      for (auto& t : pool) t.join();
      checked = todo.size();
    } catch (const error& e) {
      bad.push_back(e.what());
    }
    std::sort(bad.begin(), bad.end());
    for (const auto& b : bad) std::fprintf(stderr, "mmnpz verify: %s\n", shown(b).c_str());
    if (a.json) {
      std::string problems;
      for (const auto& b : bad) problems += (problems.empty() ? "" : ", ") + json_string(b);
      std::printf("{\"path\": %s, \"ok\": %s, \"checked\": %zu, \"bad\": [%s]}\n",
                  json_string(path).c_str(), bad.empty() ? "true" : "false", checked,
                  problems.c_str());
    } else {
      std::printf("%s: %s (%s checked%s)\n", shown(path).c_str(), bad.empty() ? "OK" : "BAD",
                  members_text(checked).c_str(),
                  bad.empty() ? "" : (", " + std::to_string(bad.size()) + " bad").c_str());
    }
    if (!bad.empty()) status = exit_failed;
  }
  return status;
}

// Is there anything at `path`, a dangling symbolic link included (one the writer would not
// follow either)?
bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// How much of a deflated member is inflated at a time: the memory a copy needs, whatever the
// member's size (8 MiB: the writer checksums pieces this large while it writes them).
constexpr std::size_t inflate_piece = std::size_t{8} << 20;

// Reads the stored member `i`'s contents once, in pieces of up to inflate_piece bytes, and
// hands the part [from, to) of them to `sink`; then checks the CRC-32 of all of them against
// the directory's, before the caller commits the copy (a copy's new CRC-32 would hide damage
// to the old data). The pieces are copied out of the mapping (reader::copy_bytes): an input
// cut while it is copied is an error naming the member, not SIGBUS (a copy straight from the
// mapping would die of it). On a mismatch, verify() reads the member again to throw its
// error (errc::checksum, naming the member): the good path reads each byte once. `bar`, if
// any, counts every byte read.
template <class Sink>
void copy_checked(const reader& in, std::size_t i, std::uint64_t from, std::uint64_t to,
                  Sink&& sink, progress* bar = nullptr) {
  const std::uint64_t size = in.bytes(i).size;
  std::vector<std::byte> piece(
      static_cast<std::size_t>(std::min<std::uint64_t>(inflate_piece, size)));
  std::uint32_t crc = 0;
  for (std::uint64_t at = 0; at < size; at += piece.size()) {
    const std::uint64_t k = std::min<std::uint64_t>(piece.size(), size - at);
    in.copy_bytes(i, piece.data(), at, k);
    crc = detail::crc32(crc, piece.data(), static_cast<std::size_t>(k));
    if (bar) bar->add(k);
    const std::uint64_t lo = std::max(at, from), hi = std::min(at + k, to);
    if (lo < hi) sink(piece.data() + (lo - at), static_cast<std::size_t>(hi - lo));
  }
  if (crc != in.member(i).crc32) {
    in.verify(i);  // throws, unless the member changed under us since: then say so
    throw error(errc::checksum, in.path(), std::string(in.member(i).name), error::no_offset,
                "its CRC-32 changed while it was copied");
  }
}

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
    const bytes_view b = in.bytes(i);
    if (as_array) {
      auto s = w.begin(name.substr(0, name.size() - 4), v.type(), v.shape(), v.fortran_order());
      const auto head = static_cast<std::uint64_t>(v.data() - b.data);  // the .npy header
      copy_checked(
          in, i, head, head + v.nbytes(), [&](const std::byte* p, std::size_t k) { s.write(p, k); },
          &bar);
      s.commit();
    } else {
      auto s = w.begin_bytes(name, b.size);
      copy_checked(
          in, i, 0, b.size, [&](const std::byte* p, std::size_t k) { s.write(p, k); }, &bar);
      s.commit();
    }
  }
}

int write_archive(const write_options& a) {
  const std::string& out = a.out;
  const char* const refusal = "is not a power of two from 1 to 65536";
  const std::size_t n = whole_number("--align", a.alignment, refusal);
  if (n == 0 || n > max_alignment || (n & (n - 1)) != 0) {
    throw usage_error{"--align " + a.alignment + " " + refusal};
  }
  if (exists(out)) throw usage_error{"'" + out + "' exists: choose a new OUT", false};
  writer_options o;
  o.alignment = n;
  // Every input is opened before OUT is made (a bad one refuses the command, nothing written),
  // and again to be copied: one at a time, so that merging more archives than the process may
  // have files open works.
  // A name twice is refused here, before OUT is made, rather than after copying every member
  // before it (gigabytes, say) into an OUT that is then removed.
  std::uint64_t total = 0;
  std::unordered_map<std::string, std::size_t> first_in;  // member name -> its first input
  for (std::size_t k = 0; k < a.inputs.size(); ++k) {
    const reader r = open_archive(a.inputs[k]);
    for (std::size_t i = 0; i < r.size(); ++i) {
      const member_info& m = r.member(i);
      total += m.uncompressed_size;
      if (a.allow_duplicates) continue;
      const auto [at, added] = first_in.emplace(std::string(m.name), k);
      if (!added) {
        const std::string where =
            at->second == k ? "the archive holds this name twice"
                            : "input " + std::to_string(at->second + 1) + " ('" +
                                  a.inputs[at->second] + "') holds this name too";
        throw error(errc::invalid_argument, a.inputs[k], std::string(m.name),
                    error::no_offset,
                    where + "; pass --allow-duplicates to keep both (readers see the last)");
      }
    }
  }
  // Every name was checked above: the writer need not check (and remember) them again.
  o.allow_duplicate_names = true;
  std::optional<writer> w;
  w.emplace(out, o);
  std::size_t members = 0;
  try {
    progress bar("write", total);
    for (const auto& p : a.inputs) {
      const reader r = open_archive(p, /*warn=*/false);
      copy_members(r, *w, a.decompress, bar);
      members += r.size();
    }
    w->close();
  } catch (...) {
    w.reset();  // a half-written OUT is not left behind
    std::remove(out.c_str());
    throw;
  }
  if (a.json) {
    std::printf("{\"path\": %s, \"members\": %zu, \"alignment\": %zu}\n", json_string(out).c_str(),
                members, o.alignment);
  } else {
    std::printf("wrote %s: %s, data aligned to %zu bytes\n", shown(out).c_str(),
                members_text(members).c_str(), o.alignment);
  }
  return exit_ok;
}

// Writes the contents of member `i` to the new file `target` as read() streams them, so that
// no member is ever held whole. A file that an error leaves incomplete is removed.
void extract_member(const reader& r, std::size_t i, const std::string& target) {
  FILE* f = std::fopen(target.c_str(), "wbx");
  if (!f) throw error(errc::io, target, {}, error::no_offset, "create", errno);
  const auto write = [&](const std::byte* p, std::size_t n) {
    if (std::fwrite(p, 1, n, f) != n) {
      throw error(errc::io, target, {}, error::no_offset, "write to", errno);
    }
  };
  try {
    if (r.member(i).is_deflated()) {
      r.read(i, write, inflate_piece);  // inflated into read()'s buffer, from the mapping
    } else {
      copy_checked(r, i, 0, r.bytes(i).size, write);  // damage is not copied
    }
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

int cmd_extract(const extract_options& a) {
  const std::string& dir = a.dir;
  if (dir.empty()) throw usage_error{"-o needs a directory name, not an empty one"};
  const reader r = open_archive(a.file);
  for (const auto& key : a.members) {
    const std::size_t i = r.index_of(key);
    const std::string name(r.member(i).name);
    const std::string base = name.substr(name.rfind('/') + 1);  // never outside DIR
    if (base.empty() || base == "." || base == "..") {
      throw error(errc::invalid_argument, a.file, name, error::no_offset,
                  "its name ends in no usable file name: not extracted");
    }
    const std::string target = dir + "/" + base;
    if (exists(target)) throw usage_error{"'" + target + "' exists: not overwritten", false};
    extract_member(r, i, target);
    if (a.json) {
      std::printf("{\"member\": %s, \"path\": %s}\n", json_string(name).c_str(),
                  json_string(target).c_str());
    } else {
      std::printf("%s\n", shown(target).c_str());
    }
  }
  return exit_ok;
}

int cmd_recover(const recover_options& a) {
  const recover_result r = recover(a.file);
  if (a.json) {
    std::printf("{\"path\": %s, \"intact\": %s, \"members\": %zu, \"bytes_cut\": %llu}\n",
                json_string(a.file).c_str(), r.directory_was_intact ? "true" : "false",
                r.members_recovered, static_cast<unsigned long long>(r.bytes_cut));
  } else if (r.directory_was_intact) {
    std::printf("%s: intact, %s; nothing changed\n", shown(a.file).c_str(),
                members_text(r.members_recovered).c_str());
  } else {
    std::printf("%s: recovered %s; cut off %llu bytes of incomplete data\n",
                shown(a.file).c_str(),
                members_text(r.members_recovered).c_str(),
                static_cast<unsigned long long>(r.bytes_cut));
  }
  return exit_ok;
}

constexpr std::size_t help_column = 26;  // where the help's descriptions start

// The help of every command: the usage line first (made from the options, so that the two never
// disagree), then the description, the operands, the options and the footer.
class help_formatter final : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, name) + make_description(app) + make_positionals(app) +
                      make_subcommands(app, mode) + make_groups(app, mode);
    // CLI11 ends the groups with a blank line when the last group is the hidden one ("").
    while (out.size() > 1 && out.compare(out.size() - 2, 2, "\n\n") == 0) out.pop_back();
    return out + "\n" + make_footer(app);
  }

  std::string make_description(const CLI::App* app) const override {
    return app->get_description().empty() ? "" : app->get_description() + "\n";
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string out = "usage: " + name;
    for (const CLI::Option* o : app->get_options()) {
      if (o->get_positional() || o == app->get_help_ptr() || o->get_group().empty()) continue;
      out += " [" + o->get_name();
      if (!o->get_type_name().empty()) out += " " + o->get_type_name();
      out += "]";
    }
    if (!app->get_subcommands({}).empty()) {
      return out + " COMMAND [ARGS...]   (" + name + " COMMAND --help for more)\n";
    }
    const auto operands = app->get_options([](const CLI::Option* o) { return shown_operand(o); });
    if (!operands.empty()) out += " [--]";
    for (const CLI::Option* o : operands) out += " " + operand_name(o);
    return out + "\n";
  }

  // The root's list of commands: each with its operands and one line of what it does.
  std::string make_subcommands(const CLI::App* app, CLI::AppFormatMode) const override {
    if (app->get_subcommands({}).empty()) return {};
    std::string out = "\ncommands:\n";
    for (const command_text& c : commands) {
      std::string left = std::string(c.name);
      const CLI::App* sub = app->get_subcommand(c.name);
      for (const CLI::Option* o : sub->get_options()) {
        if (shown_operand(o)) left += " " + operand_name(o);
      }
      left.resize(std::max<std::size_t>(left.size() + 1, help_column - 2), ' ');
      out += "  " + left + c.summary + "\n";
    }
    return out;
  }

 private:
  static bool shown_operand(const CLI::Option* o) {
    return o->get_positional() && !o->get_group().empty();
  }

  static std::string operand_name(const CLI::Option* o) {
    return o->get_name(true) + (o->get_items_expected_max() > 1 ? "..." : "");
  }
};

// One CLI11 subcommand per command, each bound to its options; run() parses and runs one.
class command_line {
  struct command {
    const char* needs;               // the usage error when operands are missing or left over
    std::function<bool()> complete;  // are the command's operands all there
    std::function<int()> run;
  };

 public:
  command_line() {
    app_.formatter(std::make_shared<help_formatter>());
    app_.get_formatter()->label("Positionals", "operands");
    app_.option_defaults()->group("options");
    app_.get_formatter()->column_width(help_column);
    app_.set_help_flag("-h,--help", "print this help and exit")->group("options");
    app_.set_version_flag("--version", std::string("mmnpz ") + version_string,
                          "print the version and exit");
    app_.footer(std::string(json_text) + "\n\n" + exit_status_text);
    app_.require_subcommand(0, 1);
    app_.allow_extras();

    CLI::App* c = add("ls");
    c->add_option("FILE", ls_.files, "archives to list")->type_name("");
    finish(c, ls_.json,
           {"ls needs at least one FILE", [this] { return !ls_.files.empty(); },
            [this] { return cmd_ls(ls_); }});

    c = add("info");
    c->add_option("FILE", info_.files, "archives to summarise")->type_name("");
    finish(c, info_.json,
           {"info needs at least one FILE", [this] { return !info_.files.empty(); },
            [this] { return cmd_info(info_); }});

    c = add("verify");
    c->add_flag("--quick", verify_.quick, "check the structure and the last member only");
    c->add_option("--threads", verify_.threads, "check N members at a time (default: one per core)")
        ->type_name("N");
    c->add_option("FILE", verify_.files, "archives to check")->type_name("");
    finish(c, verify_.json,
           {"verify needs at least one FILE", [this] { return !verify_.files.empty(); },
            [this] { return cmd_verify(verify_); }});

    c = add("align");
    add_write_options(c, align_);
    c->add_option("IN", align_in_, "the archive to rewrite")->type_name("");
    c->add_option("OUT", align_.out, "the new archive")->type_name("");
    finish(c, align_.json,
           {"align needs IN and OUT",
            [c] { return c->get_option("IN")->count() == 1 && c->get_option("OUT")->count() == 1; },
            [this] {
              align_.inputs = {align_in_};
              align_.allow_duplicates = true;  // a rewrite keeps the members as they are
              return write_archive(align_);
            }});

    c = add("merge");
    add_write_options(c, merge_);
    c->add_flag("--allow-duplicates", merge_.allow_duplicates,
                "allow a name in more than one input (readers see the last one)");
    c->add_option("OUT", merge_.out, "the new archive")->type_name("");
    c->add_option("IN", merge_.inputs, "the archives whose members it gets, in order")
        ->type_name("");
    finish(c, merge_.json,
           {"merge needs OUT and at least one IN",
            [this, c] { return c->get_option("OUT")->count() == 1 && !merge_.inputs.empty(); },
            [this] { return write_archive(merge_); }});

    c = add("extract");
    c->add_option("-o", extract_.dir, "the directory to write into (default .)")->type_name("DIR");
    c->add_option("FILE", extract_.file, "the archive")->type_name("");
    c->add_option("MEMBER", extract_.members,
                  "members to write, by name (\".npy\" may be left out)")
        ->type_name("");
    finish(c, extract_.json,
           {"extract needs FILE and at least one MEMBER",
            [this, c] { return c->get_option("FILE")->count() == 1 && !extract_.members.empty(); },
            [this] { return cmd_extract(extract_); }});

    c = add("recover");
    c->add_option("FILE", recover_.file, "the archive to repair in place")->type_name("");
    finish(c, recover_.json,
           {"recover needs one FILE", [c] { return c->get_option("FILE")->count() == 1; },
            [this] { return cmd_recover(recover_); }});
  }

  int run(std::vector<std::string> argv) {
    if (argv.size() >= 2 && argv[1] == "help") {  // "help [COMMAND]" is "[COMMAND] --help"
      argv.erase(argv.begin() + 1);
      argv.push_back("--help");
    }
    if (argv.size() < 2) {
      std::fputs(app_.help().c_str(), stderr);
      return exit_usage;
    }
    const std::string& first = argv[1];
    if ((first.empty() || first[0] != '-') && commands_.count(first) == 0) {
      std::fprintf(stderr, "mmnpz: unknown command '%s'\n%s", first.c_str(), app_.help().c_str());
      return exit_usage;
    }
    try {
      app_.parse(std::vector<std::string>(argv.rbegin(), argv.rend() - 1));  // CLI11 pops the back
      CLI::App* sub = app_.get_subcommands().empty() ? nullptr : app_.get_subcommands().front();
      check_leftovers(sub);
      if (!sub) {
        std::fputs(app_.help().c_str(), stderr);
        return exit_usage;
      }
      return commands_.at(sub->get_name()).run();
    } catch (const CLI::CallForHelp&) {
      std::fputs(app_.help().c_str(), stdout);
      return exit_ok;
    } catch (const CLI::CallForVersion& e) {
      std::printf("%s\n", e.what());
      return exit_ok;
    } catch (const CLI::ParseError& e) {
      return usage(e.what());
    } catch (const usage_error& e) {
      return usage(e.message, e.with_help);
    } catch (const std::exception& e) {  // mmnpz::error and the standard library's
      std::fprintf(stderr, "%s: %s\n", prefix().c_str(), shown(e.what()).c_str());
      return exit_failed;
    }
  }

 private:
  CLI::App* add(const char* name) {
    const command_text* text = nullptr;
    for (const command_text& c : commands) {
      if (std::strcmp(c.name, name) == 0) text = &c;
    }
    CLI::App* c = app_.add_subcommand(name, text->description);
    c->footer(exit_status_text);
    c->get_help_ptr()->group("options");
    c->allow_extras();  // unknown options and extra operands are refused in our words
    return c;
  }

  // Every command's last option and operand: --json, and a hidden operand that takes what
  // follows the command's own operands. That one keeps "--" with the command: CLI11 2.1 hands a
  // "--" to the parent when the command has no operand left to fill, and the parent then takes
  // "-x.npz" after it for an option.
  void finish(CLI::App* c, bool& json, command cmd) {
    c->add_flag("--json", json, "print the results as JSON, one value per line");
    c->add_option("EXTRA", extra_operand_)->group("");
    commands_[c->get_name()] = std::move(cmd);
  }

  static void add_write_options(CLI::App* c, write_options& o) {
    c->add_option("--align", o.alignment,
                  "array data at multiples of N bytes, a power of two up to 65536 (default 64)")
        ->type_name("N");
    c->add_flag("--decompress", o.decompress,
                "store deflated members inflated, streaming, instead of refusing them");
  }

  // What CLI11 left over: unknown options (before "--") and operands beyond the last one.
  void check_leftovers(const CLI::App* sub) const {
    std::vector<std::string> left = sub ? sub->remaining() : std::vector<std::string>{};
    for (const auto& s : app_.remaining()) left.push_back(s);
    bool operands_only = false;
    for (const auto& s : left) {
      if (s == "--" && !operands_only) {
        operands_only = true;
        continue;
      }
      if (!operands_only && s.size() > 1 && s[0] == '-') throw usage_error{"unknown option " + s};
    }
    if (!sub) {
      for (const auto& s : left) {
        if (s != "--") throw usage_error{"unknown command '" + s + "'"};
      }
      return;
    }
    const bool extra =
        sub->get_option("EXTRA")->count() != 0 ||
        std::any_of(left.begin(), left.end(), [](const auto& s) { return s != "--"; });
    const command& cmd = commands_.at(sub->get_name());
    if (extra || !cmd.complete()) throw usage_error{cmd.needs};
  }

  std::string prefix() const {
    return app_.get_subcommands().empty() ? "mmnpz"
                                          : "mmnpz " + app_.get_subcommands().front()->get_name();
  }

  int usage(const std::string& message, bool with_help = true) const {
    std::fprintf(stderr, "%s: %s\n%s", prefix().c_str(), shown(message).c_str(),
                 with_help ? app_.help().c_str() : "");
    return exit_usage;
  }

  CLI::App app_{"", "mmnpz"};
  std::map<std::string, command> commands_;
  ls_options ls_;
  info_options info_;
  verify_options verify_;
  std::string align_in_;
  std::string extra_operand_;  // the first operand past a command's last one
  write_options align_;
  write_options merge_;
  extract_options extract_;
  recover_options recover_;
};

}  // namespace

int main(const std::vector<std::string>& argv) {
  const int status = command_line().run(argv);
  std::fflush(stdout);  // a Python caller may print next, through its own buffer
  return status;
}

}  // namespace mmnpz::cli
