// bench_core: the numbers behind the README's benchmark table, each measured against a
// baseline in the same run on the same machine.
//
//   1. Opening archives of 10k, 100k and 1M tiny stored members: mmnpz::reader versus
//      Python's zipfile.ZipFile and numpy's np.load (timed in-process by baselines.py).
//   2. Reaching a member after open: first access (local header and .npy header decoded)
//      and repeat access (cached), per member; np.load's f[key] for comparison.
//   3. Writing large arrays: mmnpz::writer (CRC-32 included) versus a plain write(2) loop of
//      the same bytes, and zlib's crc32_z alone.
//
// Archives are generated with mmnpz::writer in a fresh directory under /tmp (or --dir) and
// removed at exit unless --keep. Times are the best of several runs with the page cache warm;
// fsync is never included. Progress goes to stderr, the report (Markdown) to stdout.

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "mmnpz/reader.hpp"
#include "mmnpz/version.hpp"
#include "mmnpz/writer.hpp"

extern char** environ;

namespace {

constexpr const char* usage =
    "usage: bench_core [--quick] [--keep] [--json FILE] [--dir DIR]\n"
    "  --quick      10k and 100k members only, and a smaller write test (CI smoke test)\n"
    "  --keep       keep the generated archives (their directory is printed)\n"
    "  --json FILE  also write every measurement to FILE as JSON\n"
    "  --dir DIR    create the scratch directory in DIR instead of /tmp\n";

constexpr std::uint64_t mib = std::uint64_t{1} << 20;
// Elements of each tiny member (float32, stored).
constexpr std::size_t tiny_elements = 4;
// The targets the README states.
constexpr double target_open_speedup = 30.0;  // np.load / mmnpz at 1M members
constexpr double target_first_access_ns = 1000.0;
constexpr double target_write_fraction = 0.80;  // of plain write(2)

struct config {
  bool quick = false;
  bool keep = false;
  std::string json_path;
  std::string parent_dir = "/tmp";
  std::string command;  // as invoked, for the report
};

// ---------------------------------------------------------------------------------------------
// Timing

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Keeps the compiler from dropping work whose result is otherwise unused.
volatile double sink = 0;

// ---------------------------------------------------------------------------------------------
// Formatting

std::string printf_string(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// Three significant digits: 0.412, 4.12, 41.2, 412.
std::string sig3(double v) {
  if (v >= 100) return printf_string("%.0f", v);
  if (v >= 10) return printf_string("%.1f", v);
  if (v >= 1) return printf_string("%.2f", v);
  return printf_string("%.3f", v);
}

std::string format_seconds(double s) {
  if (s >= 1) return sig3(s) + " s";
  if (s >= 1e-3) return sig3(s * 1e3) + " ms";
  if (s >= 1e-6) return sig3(s * 1e6) + " µs";
  return sig3(s * 1e9) + " ns";
}

std::string format_ns(double ns) { return format_seconds(ns * 1e-9); }

std::string format_count(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_bytes(std::uint64_t n) {
  if (n >= 1000 * 1000 * 1000) return sig3(static_cast<double>(n) / 1e9) + " GB";
  if (n >= 1000 * 1000) return sig3(static_cast<double>(n) / 1e6) + " MB";
  return sig3(static_cast<double>(n) / 1e3) + " kB";
}

std::string format_mib(std::uint64_t n) { return format_count(n / mib) + " MiB"; }

std::string format_ratio(double r) { return sig3(r) + "×"; }
std::string format_percent(double f) { return printf_string("%.0f%%", f * 100); }

// ---------------------------------------------------------------------------------------------
// Scratch directory

// A fresh directory for the generated files, removed with everything in it unless kept.
class scratch_dir {
 public:
  scratch_dir(const std::string& parent, bool keep) : keep_(keep) {
    std::string tmpl = parent + "/mmnpz-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(),
                              "cannot create a directory in " + parent);
    }
    path_ = tmpl;
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    if (keep_) {
      std::fprintf(stderr, "[bench] kept %s\n", path_.c_str());
      return;
    }
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }

  const std::string& path() const { return path_; }
  /// A path in the directory, removed with it.
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
  bool keep_;
};

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot stat " + path);
  }
  return static_cast<std::uint64_t>(st.st_size);
}

// ---------------------------------------------------------------------------------------------
// The Python baselines, run in a subprocess that times itself

using baseline_values = std::map<std::string, std::string>;

// Runs `python baselines.py args...` and parses its `key value` lines. Its stderr is ours.
baseline_values run_baselines(const std::vector<std::string>& args) {
  std::vector<std::string> argv_strings = {MMNPZ_BENCH_PYTHON, MMNPZ_BENCH_BASELINES};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::system_error(rc, std::generic_category(), std::string("cannot run ") + argv[0]);
  }
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string command = std::string(MMNPZ_BENCH_PYTHON) + " baselines.py";
  for (const auto& a : args) command += " " + a;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("'" + command + "' failed (is numpy installed for " +
                             MMNPZ_BENCH_PYTHON + "?)");
  }
  baseline_values values;
  std::istringstream lines(out);
  std::string key;
  std::string value;
  while (lines >> key >> value) values[key] = value;
  return values;
}

double number(const baseline_values& v, const std::string& key) {
  const auto it = v.find(key);
  if (it == v.end()) throw std::runtime_error("baselines.py did not report '" + key + "'");
  return std::stod(it->second);
}

std::string text(const baseline_values& v, const std::string& key) {
  const auto it = v.find(key);
  return it == v.end() ? "?" : it->second;
}

// ---------------------------------------------------------------------------------------------
// 1 and 2: archives of tiny members

struct tiny_result {
  std::size_t members = 0;
  std::uint64_t file_bytes = 0;
  double write_s = 0;  // generating the archive with mmnpz::writer
  // Open, best of several runs.
  double mmnpz_open_s = 0;
  double mmnpz_open_names_s = 0;
  double zipfile_open_s = 0;
  double np_load_open_s = 0;
  // Access after open, per member.
  double first_ns = 0;
  double repeat_index_ns = 0;
  double repeat_key_ns = 0;
  std::optional<double> np_first_ns;
  std::optional<double> np_repeat_ns;

  double open_speedup() const { return np_load_open_s / mmnpz_open_s; }
};

void make_tiny_archive(const std::string& path, std::size_t members) {
  mmnpz::writer w(path, {mmnpz::open_mode::truncate});
  float values[tiny_elements] = {1.0f, 2.0f, 3.0f, 4.0f};
  char name[32];
  for (std::size_t i = 0; i < members; ++i) {
    values[0] = static_cast<float>(i);
    std::snprintf(name, sizeof name, "m%07zu", i);
    w.write(name, values, {tiny_elements});
  }
  w.close();
}

void measure_open(const std::string& path, tiny_result& r) {
  const int runs = r.members >= 1000000 ? 7 : 20;
  double best_open = std::numeric_limits<double>::infinity();
  double best_names = best_open;
  std::optional<mmnpz::reader> rd;
  for (int k = 0; k < runs; ++k) {
    // Destroying the reader is left out, as closing is in the Python baselines.
    auto t0 = clock_type::now();
    rd.emplace(path);
    best_open = std::min(best_open, seconds_since(t0));
    sink = sink + static_cast<double>(rd->size());
    rd.reset();

    t0 = clock_type::now();
    rd.emplace(path);
    std::vector<std::string> names = rd->names();
    best_names = std::min(best_names, seconds_since(t0));
    sink = sink + static_cast<double>(names.size());
    rd.reset();
  }
  r.mmnpz_open_s = best_open;
  r.mmnpz_open_names_s = best_names;

  const int py_runs = r.members >= 1000000 ? 3 : r.members >= 100000 ? 5 : 10;
  const baseline_values py = run_baselines({"open", path, std::to_string(py_runs)});
  r.zipfile_open_s = number(py, "zipfile_open");
  r.np_load_open_s = number(py, "np_load_open");
}

void measure_access(const std::string& path, bool with_numpy, tiny_result& r) {
  const int runs = r.members >= 1000000 ? 3 : r.members >= 100000 ? 8 : 20;
  const double n = static_cast<double>(r.members);
  double best_first = std::numeric_limits<double>::infinity();
  double best_index = best_first;
  double best_key = best_first;
  for (int k = 0; k < runs; ++k) {
    // A fresh reader each run, so that every member is decoded again.
    mmnpz::reader rd(path);
    const std::vector<std::string> keys = rd.names();
    const std::size_t count = rd.size();
    double sum = 0;

    auto t0 = clock_type::now();
    for (std::size_t i = 0; i < count; ++i) sum += rd.array(i).data_as<float>()[0];
    best_first = std::min(best_first, seconds_since(t0));

    t0 = clock_type::now();
    for (std::size_t i = 0; i < count; ++i) sum += rd.array(i).data_as<float>()[0];
    best_index = std::min(best_index, seconds_since(t0));

    t0 = clock_type::now();
    for (const auto& key : keys) sum += rd[key].data_as<float>()[0];
    best_key = std::min(best_key, seconds_since(t0));
    sink = sink + sum;
  }
  r.first_ns = best_first / n * 1e9;
  r.repeat_index_ns = best_index / n * 1e9;
  r.repeat_key_ns = best_key / n * 1e9;

  if (with_numpy) {
    const baseline_values py = run_baselines({"access", path, "3"});
    r.np_first_ns = number(py, "np_load_first") * 1e9;
    r.np_repeat_ns = number(py, "np_load_repeat") * 1e9;
  }
}

// ---------------------------------------------------------------------------------------------
// 3: writing large arrays

struct write_result {
  std::size_t arrays = 0;
  std::uint64_t array_bytes = 0;
  std::uint64_t chunk_bytes = 0;  // the writer's piece size (src/writer.cpp), for comparison
  double plain_gbps = 0;          // write(2), one call per array
  double plain_chunked_gbps = 0;  // write(2), chunk_bytes per call
  double writer_gbps = 0;
  double crc_gbps = 0;  // crc32_z alone, no I/O

  std::uint64_t total_bytes() const { return arrays * array_bytes; }
  double writer_fraction() const { return writer_gbps / plain_gbps; }
  // What the writer would reach if checksumming and copying simply added up.
  double serial_estimate_gbps() const { return 1 / (1 / plain_gbps + 1 / crc_gbps); }
};

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "cannot write " + path);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// The baseline: the same bytes, the same arrays, written with write(2) into a plain file.
double time_plain_write(const std::string& path, const std::vector<float>& data, std::size_t arrays,
                        std::size_t chunk) {
  const char* bytes = reinterpret_cast<const char*>(data.data());
  const std::size_t n = data.size() * sizeof(float);
  const auto t0 = clock_type::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path);
  for (std::size_t a = 0; a < arrays; ++a) {
    for (std::size_t off = 0; off < n; off += chunk) {
      write_all(fd, bytes + off, std::min(chunk, n - off), path);
    }
  }
  if (::close(fd) != 0) throw std::system_error(errno, std::generic_category(), "close " + path);
  const double t = seconds_since(t0);
  ::unlink(path.c_str());
  return t;
}

double time_writer(const std::string& path, const std::vector<float>& data, std::size_t arrays) {
  const auto t0 = clock_type::now();
  mmnpz::writer w(path);
  for (std::size_t a = 0; a < arrays; ++a) {
    w.write("array_" + std::to_string(a), data.data(), {data.size()});
  }
  w.close();
  const double t = seconds_since(t0);
  ::unlink(path.c_str());
  return t;
}

write_result measure_write(scratch_dir& dir, bool quick) {
  write_result r;
  r.arrays = quick ? 4 : 16;
  r.array_bytes = (quick ? 16 : 64) * mib;
  r.chunk_bytes = mib;
  std::vector<float> data(r.array_bytes / sizeof(float));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 65521) * 0.5f;

  const std::string plain_path = dir.file("plain.bin");
  const std::string npz_path = dir.file("large.npz");
  const double bytes = static_cast<double>(r.total_bytes());
  const int runs = 3;
  double plain = std::numeric_limits<double>::infinity();
  double chunked = plain;
  double writer = plain;
  // Interleaved, so that other load on the machine hits each side alike.
  for (int k = 0; k < runs; ++k) {
    std::fprintf(stderr, "[bench] write run %d of %d\n", k + 1, runs);
    plain = std::min(plain, time_plain_write(plain_path, data, r.arrays, r.array_bytes));
    writer = std::min(writer, time_writer(npz_path, data, r.arrays));
    chunked = std::min(chunked, time_plain_write(plain_path, data, r.arrays, r.chunk_bytes));
  }
  r.plain_gbps = bytes / plain / 1e9;
  r.plain_chunked_gbps = bytes / chunked / 1e9;
  r.writer_gbps = bytes / writer / 1e9;

  double crc = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 5; ++k) {
    const auto t0 = clock_type::now();
    sink = sink + static_cast<double>(
                      ::crc32_z(0, reinterpret_cast<const Bytef*>(data.data()), r.array_bytes));
    crc = std::min(crc, seconds_since(t0));
  }
  r.crc_gbps = static_cast<double>(r.array_bytes) / crc / 1e9;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Report

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// The 1-minute load average, to tell a quiet machine from a busy one.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  return in >> one ? one : "unknown";
}

std::string machine_line(const baseline_values& py) {
  struct utsname u {};
  ::uname(&u);
  return cpu_model() + ", " + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + " cores, " +
         u.sysname + " " + u.release + ", load average " + load_average() + " at start; mmnpz " +
         mmnpz::version_string + ", Python " + text(py, "python") + ", numpy " + text(py, "numpy") +
         ", zlib " + ::zlibVersion();
}

std::string met(bool ok) { return ok ? "**met**" : "**missed**"; }

void print_report(const config& cfg, const std::string& machine, const std::string& dir,
                  const std::vector<tiny_result>& tiny, const write_result& w) {
  std::printf("Command: `%s`\n\n", cfg.command.c_str());
  std::printf(
      "Machine: %s. Files in %s, page cache warm. Each time is the best of 3 to 20 runs; "
      "the Python times are measured inside the interpreter, start-up excluded.\n\n",
      machine.c_str(), dir.c_str());

  std::printf(
      "**Opening an archive** of tiny members (%zu float32 each, stored), then listing "
      "its names\n\n",
      tiny_elements);
  std::printf(
      "| Members | Archive | mmnpz open | mmnpz open + names() | zipfile.ZipFile + "
      "namelist() | np.load + .files | np.load / mmnpz open |\n");
  std::printf("|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const auto& t : tiny) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", format_count(t.members).c_str(),
                format_bytes(t.file_bytes).c_str(), format_seconds(t.mmnpz_open_s).c_str(),
                format_seconds(t.mmnpz_open_names_s).c_str(),
                format_seconds(t.zipfile_open_s).c_str(), format_seconds(t.np_load_open_s).c_str(),
                format_ratio(t.open_speedup()).c_str());
  }

  std::printf(
      "\n**Reaching a member** after open, per member: the first access decodes its "
      "local header and .npy header; later ones are cached\n\n");
  std::printf(
      "| Members | mmnpz first access | mmnpz again, by index | mmnpz again, by key | "
      "np.load `f[key]` first | np.load `f[key]` again | np.load / mmnpz first |\n");
  std::printf("|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const auto& t : tiny) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", format_count(t.members).c_str(),
                format_ns(t.first_ns).c_str(), format_ns(t.repeat_index_ns).c_str(),
                format_ns(t.repeat_key_ns).c_str(),
                t.np_first_ns ? format_ns(*t.np_first_ns).c_str() : "",
                t.np_repeat_ns ? format_ns(*t.np_repeat_ns).c_str() : "",
                t.np_first_ns ? format_ratio(*t.np_first_ns / t.first_ns).c_str() : "");
  }

  std::printf(
      "\nnp.load's `f[key]` caches nothing: it looks the key up in a list of names and "
      "re-reads the member through zipfile every time.\n");

  std::printf("\n**Writing %zu arrays of %s** (float32), fsync not included\n\n", w.arrays,
              format_mib(w.array_bytes).c_str());
  std::printf("| Writer | GB/s | vs write(2) |\n");
  std::printf("|:--|--:|--:|\n");
  std::printf("| write(2) into a plain file, one call per array | %s | 100%% |\n",
              sig3(w.plain_gbps).c_str());
  std::printf("| write(2) into a plain file, %s per call (the writer's piece size) | %s | %s |\n",
              format_mib(w.chunk_bytes).c_str(), sig3(w.plain_chunked_gbps).c_str(),
              format_percent(w.plain_chunked_gbps / w.plain_gbps).c_str());
  std::printf("| mmnpz::writer, CRC-32 included | %s | %s |\n", sig3(w.writer_gbps).c_str(),
              format_percent(w.writer_fraction()).c_str());
  std::printf("| zlib crc32_z alone, no I/O | %s | |\n", sig3(w.crc_gbps).c_str());

  const tiny_result& largest = tiny.back();
  double worst_first = 0;
  for (const auto& t : tiny) worst_first = std::max(worst_first, t.first_ns);
  std::printf("\nTargets:\n\n");
  std::printf("- open %s members at least %.0f× faster than np.load: %s (%s)\n",
              format_count(largest.members).c_str(), target_open_speedup,
              met(largest.open_speedup() >= target_open_speedup).c_str(),
              format_ratio(largest.open_speedup()).c_str());
  std::printf("- first access under %s per member: %s (%s at most)\n",
              format_ns(target_first_access_ns).c_str(),
              met(worst_first < target_first_access_ns).c_str(), format_ns(worst_first).c_str());
  std::printf(
      "- writer at least %s of write(2): %s (%s; checksumming and copying one after the "
      "other would give %s GB/s)\n",
      format_percent(target_write_fraction).c_str(),
      met(w.writer_fraction() >= target_write_fraction).c_str(),
      format_percent(w.writer_fraction()).c_str(), sig3(w.serial_estimate_gbps()).c_str());
  std::printf("\nGenerating the archives with mmnpz::writer took");
  for (const auto& t : tiny) {
    std::printf(" %s (%s per member)%s", format_seconds(t.write_s).c_str(),
                format_ns(t.write_s / static_cast<double>(t.members) * 1e9).c_str(),
                &t == &tiny.back() ? ".\n" : ",");
  }
}

void write_json(const std::string& path, const std::string& command, const std::string& machine,
                const std::vector<tiny_result>& tiny, const write_result& w) {
  std::ofstream out(path);
  const auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  };
  const auto num = [](double v) { return printf_string("%.6g", v); };
  out << "{\n  \"command\": " << quoted(command) << ",\n  \"machine\": " << quoted(machine)
      << ",\n  \"open\": [\n";
  for (const auto& t : tiny) {
    out << "    {\"members\": " << t.members << ", \"file_bytes\": " << t.file_bytes
        << ", \"write_s\": " << num(t.write_s) << ", \"mmnpz_open_s\": " << num(t.mmnpz_open_s)
        << ", \"mmnpz_open_names_s\": " << num(t.mmnpz_open_names_s)
        << ", \"zipfile_open_s\": " << num(t.zipfile_open_s)
        << ", \"np_load_open_s\": " << num(t.np_load_open_s)
        << ", \"first_access_ns\": " << num(t.first_ns)
        << ", \"repeat_access_index_ns\": " << num(t.repeat_index_ns)
        << ", \"repeat_access_key_ns\": " << num(t.repeat_key_ns);
    if (t.np_first_ns) out << ", \"np_load_first_ns\": " << num(*t.np_first_ns);
    if (t.np_repeat_ns) out << ", \"np_load_repeat_ns\": " << num(*t.np_repeat_ns);
    out << "}" << (&t == &tiny.back() ? "\n" : ",\n");
  }
  out << "  ],\n  \"write\": {\"arrays\": " << w.arrays << ", \"array_bytes\": " << w.array_bytes
      << ", \"plain_gbps\": " << num(w.plain_gbps)
      << ", \"plain_chunked_gbps\": " << num(w.plain_chunked_gbps)
      << ", \"chunk_bytes\": " << w.chunk_bytes << ", \"writer_gbps\": " << num(w.writer_gbps)
      << ", \"crc32_gbps\": " << num(w.crc_gbps) << "}\n}\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

config parse_args(int argc, char** argv) {
  config cfg;
  cfg.command = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    cfg.command += " " + a;
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--keep") {
      cfg.keep = true;
    } else if (a == "--json" || a == "--dir") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "bench_core: %s needs a value\n%s", a.c_str(), usage);
        std::exit(2);
      }
      (a == "--json" ? cfg.json_path : cfg.parent_dir) = argv[++i];
      cfg.command += std::string(" ") + argv[i];
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "bench_core: unknown argument '%s'\n%s", a.c_str(), usage);
      std::exit(2);
    }
  }
  return cfg;
}

int run(const config& cfg) {
  const baseline_values versions = run_baselines({"versions"});
  const std::string machine = machine_line(versions);
  scratch_dir dir(cfg.parent_dir, cfg.keep);

  std::vector<std::size_t> sizes = {10000, 100000};
  if (!cfg.quick) sizes.push_back(1000000);
  std::vector<tiny_result> tiny;
  for (std::size_t members : sizes) {
    tiny_result t;
    t.members = members;
    const std::string path = dir.file("tiny_" + std::to_string(members) + ".npz");
    std::fprintf(stderr, "[bench] %s members: writing the archive\n",
                 format_count(members).c_str());
    const auto t0 = clock_type::now();
    make_tiny_archive(path, members);
    t.write_s = seconds_since(t0);
    t.file_bytes = file_size(path);
    std::fprintf(stderr, "[bench] %s members: open (mmnpz, zipfile, np.load)\n",
                 format_count(members).c_str());
    measure_open(path, t);
    std::fprintf(stderr, "[bench] %s members: member access\n", format_count(members).c_str());
    measure_access(path, /*with_numpy=*/members == sizes.front(), t);
    tiny.push_back(t);
  }
  const write_result w = measure_write(dir, cfg.quick);

  print_report(cfg, machine, cfg.parent_dir, tiny, w);
  if (!cfg.json_path.empty()) write_json(cfg.json_path, cfg.command, machine, tiny, w);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse_args(argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_core: %s\n", e.what());
    return 1;
  }
}
