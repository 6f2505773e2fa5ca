// The main job, in small: write a dataset of variable-length spectrograms (frames x bins,
// float32) as an aligned .npz, then train-style sampling of random fixed-length excerpts
// through the memory-mapped reader, checking every excerpt against the values written.
//
// Usage: audio_excerpts [OUT.npz] [--clips N] [--batches N]

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mmnpz/mmnpz.hpp"

namespace {

constexpr std::size_t bins = 80;
constexpr std::size_t excerpt_frames = 100;
constexpr std::size_t batch_size = 32;

// The value at (clip, frame, bin): what the writer stores and the sampler checks.
float value(std::size_t clip, std::size_t frame, std::size_t bin) {
  return std::sin(0.01f * static_cast<float>(frame * (bin + 1))) + static_cast<float>(clip);
}

std::size_t frames_of(std::size_t clip) { return 50 + (clip * 7919) % 1950; }  // 50..1999

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "spectrograms.npz";
  std::size_t clips = 500;
  std::size_t batches = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--clips" && i + 1 < argc) {
      clips = std::strtoul(argv[++i], nullptr, 10);
    } else if (arg == "--batches" && i + 1 < argc) {
      batches = std::strtoul(argv[++i], nullptr, 10);
    } else if (arg == "-h" || arg == "--help") {
      std::puts("usage: audio_excerpts [OUT.npz] [--clips N] [--batches N]");
      return 0;
    } else {
      path = arg;
    }
  }

  try {
    // 1. Write the dataset: one aligned float32 member per clip.
    auto t0 = std::chrono::steady_clock::now();
    std::uint64_t bytes_written = 0;
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      std::vector<float> spec;
      for (std::size_t c = 0; c < clips; ++c) {
        const std::size_t frames = frames_of(c);
        spec.resize(frames * bins);
        for (std::size_t f = 0; f < frames; ++f) {
          for (std::size_t b = 0; b < bins; ++b) spec[f * bins + b] = value(c, f, b);
        }
        w.write("clip_" + std::to_string(c), spec.data(), {frames, bins});
        bytes_written += spec.size() * sizeof(float);
      }
      w.close();
    }
    std::printf("wrote %zu clips (50-1999 frames x %zu bins, float32, %.1f MB) to %s in %.2f s\n",
                clips, bins, static_cast<double>(bytes_written) / 1e6, path.c_str(),
                seconds_since(t0));

    // 2. Open: only the central directory is read.
    t0 = std::chrono::steady_clock::now();
    const mmnpz::reader r(path);
    std::printf("opened %zu members in %.3f ms\n", r.size(), seconds_since(t0) * 1e3);

    // 3. Sample random excerpts, zero-padding clips shorter than the excerpt.
    std::mt19937_64 rng(42);
    std::vector<float> batch(batch_size * excerpt_frames * bins);
    std::size_t mismatches = 0;
    std::size_t padded = 0;
    std::size_t unaligned = 0;
    double checksum = 0;
    t0 = std::chrono::steady_clock::now();
    for (std::size_t b = 0; b < batches; ++b) {
      for (std::size_t k = 0; k < batch_size; ++k) {
        const std::size_t clip = rng() % r.size();
        const mmnpz::array_view v = r.array(clip);
        if (!v.is_aligned(64)) ++unaligned;
        const float* data = v.data_as<float>();
        const std::size_t frames = v.shape()[0];
        const std::size_t take = frames < excerpt_frames ? frames : excerpt_frames;
        const std::size_t start = frames > excerpt_frames ? rng() % (frames - excerpt_frames + 1) : 0;
        float* out = batch.data() + k * excerpt_frames * bins;
        std::memcpy(out, data + start * bins, take * bins * sizeof(float));
        std::memset(out + take * bins, 0, (excerpt_frames - take) * bins * sizeof(float));
        padded += take < excerpt_frames;
        // Check the excerpt against the formula it was written with.
        const std::size_t f = rng() % take;
        const std::size_t bin = rng() % bins;
        if (out[f * bins + bin] != value(clip, start + f, bin)) ++mismatches;  // members in write order
        checksum += out[f * bins + bin];
      }
    }
    const double elapsed = seconds_since(t0);
    const double excerpts = static_cast<double>(batches * batch_size);
    const double gb = excerpts * excerpt_frames * bins * sizeof(float) / 1e9;
    std::printf("sampled %zu batches of %zu excerpts (%zu frames x %zu bins): %.0f excerpts/s, "
                "%.2f GB/s\n",
                batches, batch_size, excerpt_frames, bins, excerpts / elapsed, gb / elapsed);
    std::printf("zero-padded %zu excerpts from clips shorter than %zu frames; %zu of %zu views "
                "not 64-byte aligned; checksum %.3f\n",
                padded, excerpt_frames, unaligned, static_cast<std::size_t>(excerpts), checksum);
    std::printf("checked %zu sampled values against the written data: %s\n",
                static_cast<std::size_t>(excerpts), mismatches == 0 ? "all equal" : "MISMATCH");
    return mismatches == 0 && unaligned == 0 ? 0 : 1;
  } catch (const mmnpz::error& e) {
    std::fprintf(stderr, "audio_excerpts: %s\n", e.what());
    return 1;
  }
}
