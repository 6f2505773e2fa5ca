// bench_inflate: whole-member inflation and CRC-32, before and after mmnpz moved both to
// libdeflate (zlib stays for inflating in pieces).
//
//   1. Inflating a deflated member in one piece, as reader::array() and bytes() do on first
//      access: zlib's inflate into the whole buffer (what mmnpz did before) against
//      libdeflate_deflate_decompress (what it does now), for a float32 member and an int64
//      label member; then the whole first access through mmnpz::reader (inflate, CRC-32,
//      .npy header) of the same member in a ZIP archive held in memory.
//   2. CRC-32 throughput from cache: zlib's crc32_z, the carry-less multiplication (PCLMULQDQ)
//      CRC mmnpz had before (copied here as the baseline; x86 only) and libdeflate_crc32.
//
// Each figure is the best of several runs; the report (Markdown) goes to stdout.

#include <libdeflate.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mmnpz/reader.hpp"
#include "mmnpz/version.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr const char* usage =
    "usage: bench_inflate [--quick]\n"
    "  --quick  4 MiB members and fewer runs (CI smoke test)\n";

using clock_type = std::chrono::steady_clock;

// Keeps the compiler from dropping work whose result is otherwise unused.
volatile std::uint64_t sink = 0;

// The best (shortest) time of each function over `rounds` rounds in which they take turns, in
// seconds: on a shared machine all of them then see the same load.
std::vector<double> take_turns(int rounds, const std::vector<std::function<void()>>& fs) {
  std::vector<double> best(fs.size(), 1e300);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const auto t0 = clock_type::now();
      fs[i]();
      best[i] = std::min(best[i], std::chrono::duration<double>(clock_type::now() - t0).count());
    }
  }
  return best;
}

std::string gbps(std::uint64_t bytes, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / seconds / 1e9);
  return buf;
}

std::string ratio(double before, double after) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f×", before / after);
  return buf;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// The CRC-32 mmnpz computed before libdeflate (src/zip/crc32.cpp until this benchmark was
// added), kept only as the baseline: folding with carry-less multiplication after Gopal et
// al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel,
// 2009), zlib for the tail and without PCLMULQDQ.

std::uint32_t crc32_zlib(std::uint32_t crc, const void* data, std::size_t n) {
  if (n == 0) return crc;
  return static_cast<std::uint32_t>(
      ::crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}

#if defined(__x86_64__)
#define MMNPZ_CLMUL __attribute__((target("pclmul,sse4.1")))

MMNPZ_CLMUL inline __m128i load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

MMNPZ_CLMUL inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

MMNPZ_CLMUL std::uint32_t crc32_fold(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
  const __m128i poly_mu = _mm_set_epi64x(0x1f7011641, 0x1db710641);
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);

  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = load(p + 16);
  __m128i x3 = load(p + 32);
  __m128i x4 = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x1 = fold(x1, k1k2, load(p));
    x2 = fold(x2, k1k2, load(p + 16));
    x3 = fold(x3, k1k2, load(p + 32));
    x4 = fold(x4, k1k2, load(p + 48));
  }
  x1 = fold(x1, k3k4, x2);
  x1 = fold(x1, k3k4, x3);
  x1 = fold(x1, k3k4, x4);
  for (; n >= 16; p += 16, n -= 16) x1 = fold(x1, k3k4, load(p));

  x1 = _mm_xor_si128(_mm_clmulepi64_si128(k3k4, x1, 0x01), _mm_srli_si128(x1, 8));
  __m128i x2r = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), x2r);
  const __m128i t = x1;
  x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x10);
  x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, t), 1));
}

const bool has_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#else
const bool has_pclmul = false;
#endif

std::uint32_t crc32_pclmul(std::uint32_t crc, const void* data, std::size_t n) {
#if defined(__x86_64__)
  if (has_pclmul && n >= 64) {
    const std::size_t bulk = n & ~std::size_t{15};
    const auto* p = static_cast<const unsigned char*>(data);
    crc = ~crc32_fold(~crc, p, bulk);
    return crc32_zlib(crc, p + bulk, n - bulk);
  }
#endif
  return crc32_zlib(crc, data, n);
}

// ---------------------------------------------------------------------------------------------
// Members

// A .npy file (version 1.0 header) of a 1-d array.
std::string npy(const char* descr, std::size_t count, const void* data, std::size_t itemsize) {
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), count * itemsize);
  return out;
}

// Spectrogram-like float32: log magnitudes, smooth along time, with noise in the low bits.
std::string float_member(std::size_t bytes) {
  const std::size_t count = bytes / 4, bins = 80;
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double frame = static_cast<double>(i / bins), bin = static_cast<double>(i % bins);
    v[i] = static_cast<float>(std::log1p(10 * std::fabs(std::sin(frame * 0.01 + bin * 0.3)))) +
           noise(rng);
  }
  return npy("<f4", count, v.data(), 4);
}

// Frame labels as int64: one class of 50 for runs of 1 to 40 frames.
std::string label_member(std::size_t bytes) {
  const std::size_t count = bytes / 8;
  std::mt19937 rng(2);
  std::vector<std::int64_t> v(count);
  for (std::size_t i = 0; i < count;) {
    const std::int64_t label = static_cast<std::int64_t>(rng() % 50);
    for (std::size_t run = 1 + rng() % 40; run > 0 && i < count; --run) v[i++] = label;
  }
  return npy("<i8", count, v.data(), 8);
}

// A raw deflate stream at zlib's default level, as Python's zipfile (np.savez_compressed)
// writes members.
std::string deflate_raw(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void put16(std::string& s, std::uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>(v >> 8);
}
void put32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}

// A ZIP archive of one deflated member "x.npy" (sizes under 4 GiB: no zip64).
std::string zip_of(const std::string& contents, const std::string& deflated) {
  const std::string name = "x.npy";
  const std::uint32_t crc = crc32_zlib(0, contents.data(), contents.size());
  const auto fields = [&](std::string& s) {
    put16(s, 20);  // version needed
    put16(s, 0);   // flags
    put16(s, 8);   // deflated
    put32(s, 0);   // time, date
    put32(s, crc);
    put32(s, static_cast<std::uint32_t>(deflated.size()));
    put32(s, static_cast<std::uint32_t>(contents.size()));
    put16(s, static_cast<std::uint32_t>(name.size()));
    put16(s, 0);  // extra length
  };
  std::string z;
  put32(z, 0x04034b50);
  fields(z);
  z += name;
  z += deflated;
  const auto cd_offset = static_cast<std::uint32_t>(z.size());
  put32(z, 0x02014b50);
  put16(z, 20);  // version made by
  fields(z);
  put16(z, 0);  // comment length
  put16(z, 0);  // disk
  put16(z, 0);  // internal attributes
  put32(z, 0);  // external attributes
  put32(z, 0);  // local header offset
  z += name;
  const auto cd_size = static_cast<std::uint32_t>(z.size() - cd_offset);
  put32(z, 0x06054b50);
  put32(z, 0);  // disks
  put16(z, 1);
  put16(z, 1);
  put32(z, cd_size);
  put32(z, cd_offset);
  put16(z, 0);  // comment length
  return z;
}

struct member_result {
  std::string name;
  std::uint64_t size = 0, deflated = 0;
  double zlib = 0, libdeflate = 0;  // inflate alone
  double before = 0, after = 0;     // inflate + CRC-32, as the reader did and does
  double reader = 0;                // mmnpz::reader first access, this build
};

member_result measure_member(const std::string& name, const std::string& contents, int runs) {
  member_result r;
  r.name = name;
  r.size = contents.size();
  const std::string deflated = deflate_raw(contents);
  r.deflated = deflated.size();
  std::vector<unsigned char> out(contents.size());

  const auto zlib_inflate = [&] {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2 failed");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(deflated.data()));
    z.avail_in = static_cast<uInt>(deflated.size());
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = ::inflate(&z, Z_NO_FLUSH);
    inflateEnd(&z);
    if (rc != Z_STREAM_END || z.total_out != out.size()) throw std::runtime_error("zlib inflate");
  };
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  const auto libdeflate_inflate = [&] {
    if (libdeflate_deflate_decompress(d, deflated.data(), deflated.size(), out.data(), out.size(),
                                      nullptr) != LIBDEFLATE_SUCCESS) {
      throw std::runtime_error("libdeflate inflate");
    }
  };
  const std::uint32_t expected = crc32_zlib(0, contents.data(), contents.size());
  const auto check = [&](std::uint32_t crc) {
    if (crc != expected || std::memcmp(out.data(), contents.data(), out.size()) != 0) {
      throw std::runtime_error(name + ": inflated bytes differ");
    }
  };
  std::fprintf(stderr, "[bench] %s: inflating %zu bytes\n", name.c_str(), contents.size());
  zlib_inflate();
  check(crc32_pclmul(0, out.data(), out.size()));
  std::fill(out.begin(), out.end(), 0);
  libdeflate_inflate();
  check(libdeflate_crc32(0, out.data(), out.size()));

  // The reader's first access, from a fresh reader each time (the first access is cached).
  const std::string zip = zip_of(contents, deflated);
  const auto reader_first_access = [&] {
    const mmnpz::reader reader = mmnpz::reader::from_bytes(zip.data(), zip.size(), name);
    const auto t0 = clock_type::now();
    const mmnpz::array_view v = reader.array(0);
    sink = sink + static_cast<std::uint64_t>(v.nbytes());
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  };
  double reader_time = 1e300;
  const std::vector<double> t =
      take_turns(runs, {zlib_inflate, libdeflate_inflate,
                        [&] {
                          zlib_inflate();
                          sink = sink + crc32_pclmul(0, out.data(), out.size());
                        },
                        [&] {
                          libdeflate_inflate();
                          sink = sink + libdeflate_crc32(0, out.data(), out.size());
                        },
                        [&] { reader_time = std::min(reader_time, reader_first_access()); }});
  libdeflate_free_decompressor(d);
  r.zlib = t[0];
  r.libdeflate = t[1];
  r.before = t[2];
  r.after = t[3];
  r.reader = reader_time;
  return r;
}

struct crc_result {
  double zlib = 0, pclmul = 0, libdeflate = 0;
};

crc_result measure_crc(std::size_t bytes, int runs) {
  std::vector<unsigned char> data(bytes);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const std::uint32_t expected = crc32_zlib(0, data.data(), data.size());
  if (crc32_pclmul(0, data.data(), data.size()) != expected ||
      libdeflate_crc32(0, data.data(), data.size()) != expected) {
    throw std::runtime_error("the CRC-32s differ");
  }
  std::fprintf(stderr, "[bench] CRC-32 of %zu bytes\n", bytes);
  crc_result r;
  // Many passes per run: one pass over a buffer that fits in cache is too short to time.
  const int passes = 64;
  const auto passes_of = [&](std::uint32_t (*f)(std::uint32_t, const void*, std::size_t)) {
    return [&data, f] {
      for (int i = 0; i < passes; ++i) sink = sink + f(0, data.data(), data.size());
    };
  };
  const std::vector<double> t =
      take_turns(runs, {passes_of(crc32_zlib), passes_of(crc32_pclmul),
                        passes_of([](std::uint32_t crc, const void* p, std::size_t n) {
                          return static_cast<std::uint32_t>(libdeflate_crc32(crc, p, n));
                        })});
  r.zlib = t[0] / passes;
  r.pclmul = t[1] / passes;
  r.libdeflate = t[2] / passes;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  try {
    const std::size_t member_bytes = (quick ? std::size_t{4} : std::size_t{64}) << 20;
    const int runs = quick ? 2 : 7;
    const member_result members[] = {
        measure_member("float32 spectrogram", float_member(member_bytes), runs),
        measure_member("int64 frame labels", label_member(member_bytes), runs),
    };
    const std::size_t crc_bytes = std::size_t{1} << 20;  // from L2/L3 cache
    const crc_result crc = measure_crc(crc_bytes, runs * 3);

    std::printf("mmnpz %s, zlib %s, libdeflate %s%s\n\n", mmnpz::version_string, zlibVersion(),
                LIBDEFLATE_VERSION_STRING, quick ? " (--quick)" : "");
    std::printf("**Inflating a whole member** (GB/s of inflated bytes)\n\n");
    std::printf(
        "| Member | Size | Deflated | zlib inflate | libdeflate | speedup | with CRC-32: "
        "before | after | speedup | mmnpz::reader first access |\n");
    std::printf("|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (const member_result& m : members) {
      std::printf("| %s | %.1f MB | %.1f MB | %s | %s | %s | %s | %s | %s | %s (%s GB/s) |\n",
                  m.name.c_str(), static_cast<double>(m.size) / 1e6,
                  static_cast<double>(m.deflated) / 1e6, gbps(m.size, m.zlib).c_str(),
                  gbps(m.size, m.libdeflate).c_str(), ratio(m.zlib, m.libdeflate).c_str(),
                  gbps(m.size, m.before).c_str(), gbps(m.size, m.after).c_str(),
                  ratio(m.before, m.after).c_str(), ms(m.reader).c_str(),
                  gbps(m.size, m.reader).c_str());
    }
    std::printf("\n**CRC-32** of %zu KiB from cache (GB/s)\n\n", crc_bytes >> 10);
    std::printf(
        "| zlib crc32_z | PCLMULQDQ (mmnpz before) | libdeflate_crc32 | vs zlib | vs "
        "before |\n");
    std::printf("|--:|--:|--:|--:|--:|\n");
    std::printf("| %s | %s%s | %s | %s | %s |\n", gbps(crc_bytes, crc.zlib).c_str(),
                gbps(crc_bytes, crc.pclmul).c_str(), has_pclmul ? "" : " (no PCLMULQDQ: zlib)",
                gbps(crc_bytes, crc.libdeflate).c_str(), ratio(crc.zlib, crc.libdeflate).c_str(),
                ratio(crc.pclmul, crc.libdeflate).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_inflate: %s\n", e.what());
    return 1;
  }
}
