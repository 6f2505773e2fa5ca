// The README's quick start.
#include <cstdio>
#include <vector>

#include "mmnpz/mmnpz.hpp"

int main() {
  std::vector<float> spec(300 * 80, 0.5f);
  {
    mmnpz::writer w("quickstart.npz", {mmnpz::open_mode::truncate});  // 64-byte aligned data
    w.write("clip_0", spec.data(), {300, 80});
  }
  const mmnpz::reader npz("quickstart.npz");        // reads the directory only
  const mmnpz::array_view clip = npz["clip_0"];     // decodes the .npy header: no copy
  const float* frames = clip.data_as<float>();       // checked: dtype, byte order, alignment
  std::printf("%s %s (%llu, %llu) at offset %llu, mapped=%d, frame 10 bin 3 = %g\n",
              std::string(clip.member()).c_str(), clip.type().str().c_str(),
              (unsigned long long)clip.shape()[0], (unsigned long long)clip.shape()[1],
              (unsigned long long)clip.file_offset(), clip.is_mapped(), frames[10 * 80 + 3]);
}
