// The C++ side of the main job (examples/audio_excerpts.py is the whole pipeline): write a
// dataset of variable-length spectrograms (frames x bins, float32) as an aligned .npz, then
// draw random excerpt positions with a deterministic sampler and copy batches with the
// batched gather, checking every value against what was written.
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

    // 2. Open as a dataset: every member's .npy header is decoded, no array data is read.
    t0 = std::chrono::steady_clock::now();
    const mmnpz::dataset ds(path);
    std::printf("opened %zu members in %.3f ms\n", ds.size(), seconds_since(t0) * 1e3);

    // 3. Batches of random excerpts: positions from the length-weighted sampler, copied by
    //    the batched gather (zero padding where a clip is shorter than the excerpt).
    mmnpz::sampler_options so;
    so.kind = mmnpz::sampling::with_replacement;
    so.seed = 42;
    so.length = excerpt_frames;
    so.num_samples = batches * batch_size;
    const mmnpz::sampler sampler(ds.lengths(), so);
    mmnpz::excerpt_options eo;
    eo.length = excerpt_frames;
    eo.pad = mmnpz::pad_mode::fill;
    std::vector<float> batch(batch_size * excerpt_frames * bins);
    std::vector<std::int64_t> clips_of(batch_size), starts(batch_size), valid(batch_size);
    std::size_t mismatches = 0, padded = 0;
    double copy_seconds = 0;
    for (std::size_t b = 0; b < batches; ++b) {
      sampler.fill(0, b * batch_size, batch_size, clips_of.data(), starts.data());
      t0 = std::chrono::steady_clock::now();
      mmnpz::gather(ds, clips_of.data(), starts.data(), batch_size,
                    reinterpret_cast<std::byte*>(batch.data()), batch.size() * sizeof(float), eo,
                    valid.data());
      copy_seconds += seconds_since(t0);
      // Check every value of every excerpt against the formula it was written with.
      for (std::size_t k = 0; k < batch_size; ++k) {
        const std::size_t clip = static_cast<std::size_t>(clips_of[k]);
        padded += static_cast<std::size_t>(valid[k]) < excerpt_frames;
        for (std::size_t f = 0; f < excerpt_frames; ++f) {
          const std::size_t frame = static_cast<std::size_t>(starts[k]) + f;
          for (std::size_t bin = 0; bin < bins; ++bin) {
            const float want = frame < frames_of(clip) ? value(clip, frame, bin) : 0.0f;
            mismatches += batch[(k * excerpt_frames + f) * bins + bin] != want;
          }
        }
      }
    }
    const double excerpts = static_cast<double>(batches * batch_size);
    const double gb = excerpts * excerpt_frames * bins * sizeof(float) / 1e9;
    std::printf("gathered %zu batches of %zu excerpts (%zu frames x %zu bins): %.0f excerpts/s, "
                "%.2f GB/s\n",
                batches, batch_size, excerpt_frames, bins, excerpts / copy_seconds,
                gb / copy_seconds);
    std::printf("zero-padded %zu excerpts from clips shorter than %zu frames\n", padded,
                excerpt_frames);
    std::printf("checked every value of %zu excerpts against the written data: %s\n",
                static_cast<std::size_t>(excerpts), mismatches == 0 ? "all equal" : "MISMATCH");
    return mismatches == 0 ? 0 : 1;
  } catch (const mmnpz::error& e) {
    std::fprintf(stderr, "audio_excerpts: %s\n", e.what());
    return 1;
  }
}
