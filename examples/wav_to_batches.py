"""A folder of WAV files to training batches, in three lines.

1. Writes `--clips` mono 16-bit WAV files of 0.5 to 2 s (clip_000.wav ...) into DIR/wavs,
   each sample a formula of its clip and frame, with Python's wave module.
2. The three lines: packs the folder into aligned shards of at most `--max-bytes`
   (mmnpz.pack.run, as `python3 -m mmnpz.pack` does), opens them as one Dataset from their
   shard spec (DIR/shards/train@N.npz) and iterates a Loader of random excerpts.
3. Checks every excerpt of every batch against the formula and prints "... all equal".

  PYTHONPATH=build/python /usr/bin/python3 examples/wav_to_batches.py [DIR]
      [--clips N] [--max-bytes SIZE] [--batch B] [--length FRAMES]
"""

import argparse
import os
import sys
import tempfile
import wave

import numpy as np

import mmnpz
from mmnpz import pack

RATE = 16000


def frames_of(clip):
    return RATE // 2 + (clip * 7919) % (3 * RATE // 2)


def samples(clip):
    """The int16 samples written for `clip`: frame f holds (37 * clip + f) % 65536 - 32768."""
    return ((37 * clip + np.arange(frames_of(clip))) % 65536 - 32768).astype("<i2")


def write_wavs(folder, clips):
    os.makedirs(folder, exist_ok=True)
    for clip in range(clips):
        with wave.open(os.path.join(folder, f"clip_{clip:03d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(samples(clip).tobytes())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", help="working folder (default: a temporary one)")
    parser.add_argument("--clips", type=int, default=60)
    parser.add_argument("--max-bytes", default="1M")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=4000, help="excerpt length in frames")
    args = parser.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="wav_to_batches_")
    write_wavs(os.path.join(root, "wavs"), args.clips)

    # The three lines: pack the folder, open the shards by their spec, iterate batches. Each
    # WAV becomes a (frames, 1) int16 member clip_NNN and a clip_NNN.json sidecar (sample
    # rate...); select= keeps the audio members (names ending in a digit).
    spec = pack.run(f"{root}/shards/train.npz", [f"{root}/wavs"], max_bytes=args.max_bytes).spec
    dataset = mmnpz.Dataset(spec, select="clip_*[0-9]")
    loader = mmnpz.Loader(dataset, mmnpz.Sampler(dataset, "shuffle", length=args.length, seed=1),
                          batch_size=args.batch)

    batches = checked = 0
    for batch in loader:
        batches += 1
        for row, (index, start) in enumerate(zip(batch.indices, batch.starts)):
            clip = int(dataset.name(int(index))[len("clip_"):])
            want = samples(clip)[start:start + args.length]
            if not np.array_equal(batch.data[row, :len(want), 0], want):
                print(f"batch {batches}, row {row}: clip {clip} from {start} differs")
                return 1
            checked += 1
    print(f"{args.clips} WAV files -> {spec} ({len(dataset.paths)} shards) -> {batches} batches "
          f"of {tuple(batch.data.shape)} {batch.data.dtype}: {checked} excerpts, all equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
