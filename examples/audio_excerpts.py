"""The main job, in small: a sharded dataset of variable-length spectrograms, streamed as
batches of random fixed-length excerpts through mmnpz's loader.

1. Writes a synthetic dataset: `--clips` float32 spectrograms (50..1999 frames x 80 bins) and
   their frame labels (one int16 per 4 frames), as `--shards` aligned archives
   spectrograms-0000i-of-0000N.npz.
2. Opens them as one dataset (spectrograms@N.npz), draws excerpt positions with the
   length-weighted sampler (every excerpt position equally likely), and streams batches
   through the prefetching loader: spectrogram excerpts and the matching labels in one call.
3. Checks every excerpt against the formula it was written with, shows that a loader
   resumed from a saved state yields the same batches, and reports throughput.

  PYTHONPATH=build/python /usr/bin/python3 examples/audio_excerpts.py [DIR]
      [--clips N] [--shards K] [--batches N] [--batch B] [--length L] [--seed S]
"""

import argparse
import os
import sys
import time

import numpy as np

import mmnpz

BINS = 80
LABEL_RATE = 4  # frames per label


def frames_of(clip):
    return 50 + (clip * 7919) % 1950


def spectrogram(clip):
    """The values written for `clip`: frame f, bin b holds clip + f / 4096 + b / 16."""
    f = np.arange(frames_of(clip), dtype=np.float32)[:, None]
    return np.float32(clip) + f / np.float32(4096) + np.arange(BINS, dtype=np.float32) / 16


def labels(clip):
    return ((np.arange(frames_of(clip) // LABEL_RATE) + clip) % 7).astype(np.int16)


class Progress:
    """A one-line progress bar on a terminal; a line per tenth elsewhere."""

    def __init__(self, total, what):
        self.total, self.what, self.t0 = total, what, time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def update(self, done, extra=""):
        elapsed = time.perf_counter() - self.t0
        if self.tty:
            bar = "#" * (30 * done // self.total)
            print(f"\r  {self.what} [{bar:30s}] {done}/{self.total} {extra}", end="",
                  file=sys.stderr, flush=True)
            if done == self.total:
                print(file=sys.stderr)
        elif 10 * done // self.total != self.shown:
            self.shown = 10 * done // self.total
            print(f"  {self.what}: {done}/{self.total} {extra} ({elapsed:.1f} s)",
                  file=sys.stderr, flush=True)


def write_dataset(root, clips, shards):
    os.makedirs(root, exist_ok=True)
    bar = Progress(clips, "writing")
    per_shard, written = -(-clips // shards), 0
    for s in range(shards):
        path = os.path.join(root, f"spectrograms-{s:05d}-of-{shards:05d}.npz")
        with mmnpz.NpzWriter(path, "w") as w:
            for clip in range(s * per_shard, min(clips, (s + 1) * per_shard)):
                spec = spectrogram(clip)
                w.write(f"clip_{clip}_spec", spec)
                w.write(f"clip_{clip}_labels", labels(clip))
                written += spec.nbytes
                bar.update(clip + 1, f"{written / 1e6:.0f} MB")
    return os.path.join(root, f"spectrograms@{shards}.npz"), written


def check(batch, length):
    """Every excerpt equals the written values (zero padding past a clip's end)."""
    spec, labs = batch.data
    for k, (clip, start) in enumerate(zip(batch.indices, batch.starts)):
        want = np.zeros((length, BINS), np.float32)
        n = min(length, frames_of(clip) - start)
        want[:n] = spectrogram(clip)[start:start + n]
        want_labels = np.zeros(length // LABEL_RATE, np.int16)
        first = start // LABEL_RATE
        m = max(0, min(length // LABEL_RATE, len(labels(clip)) - first))
        want_labels[:m] = labels(clip)[first:first + m]
        if not (np.array_equal(spec[k], want) and np.array_equal(labs[k], want_labels)):
            raise SystemExit(f"excerpt {k} of the batch at position {batch.position} "
                             f"(clip {clip}, start {start}) differs from the written data")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=os.path.join("build", "demo"))
    ap.add_argument("--clips", type=int, default=800)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.length % LABEL_RATE:
        ap.error(f"--length must be a multiple of {LABEL_RATE} (one label per {LABEL_RATE} frames)")

    t0 = time.perf_counter()
    spec_path, written = write_dataset(args.dir, args.clips, args.shards)
    print(f"wrote {args.clips} clips (50-1999 frames x {BINS} bins, float32, "
          f"{written / 1e6:.1f} MB) and their labels as {args.shards} archives in "
          f"{time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    specs = mmnpz.Dataset(spec_path, select="*_spec")
    labs = mmnpz.Dataset(spec_path, select="*_labels")
    print(f"opened {len(specs)} spectrograms and {len(labs)} label tracks in "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")

    # Clips shorter than an excerpt are drawn too, zero-padded as the Loader's pad="fill" makes
    # them (by default a sampler leaves them out, and warns).
    sampler = mmnpz.Sampler(specs, "weighted", length=args.length, seed=args.seed,
                            num_samples=args.batches * args.batch, pad="fill")
    loader = mmnpz.Loader(specs, sampler, args.batch, fields=[(labs, 1 / LABEL_RATE)],
                          pad="fill", epochs=1, prefetch=4)
    bar = Progress(len(loader), "streaming")
    done, excerpts, saved, t0 = 0, 0, None, time.perf_counter()
    first_batches = []
    for batch in loader:
        done += 1
        excerpts += len(batch.indices)
        if done == len(first_batches) + 1 and done <= 5:
            first_batches.append(batch)
        if done == 5:
            saved = loader.state_dict()
        bar.update(done, f"{excerpts / (time.perf_counter() - t0):,.0f} excerpts/s")
    elapsed = time.perf_counter() - t0
    gb = excerpts * args.length * BINS * 4 / 1e9
    print(f"streamed {done} batches of {args.batch} excerpts ({args.length} frames x {BINS} "
          f"bins + labels): {excerpts / elapsed:,.0f} excerpts/s, {gb / elapsed:.2f} GB/s")

    # Check every excerpt of a second pass, and resume from the state saved after batch 5.
    t0 = time.perf_counter()
    replay = mmnpz.Loader(specs, sampler, args.batch, fields=[(labs, 1 / LABEL_RATE)],
                          pad="fill", epochs=1, prefetch=4)
    for k, batch in enumerate(replay):
        check(batch, args.length)
        if k < 5 and not np.array_equal(batch.data[0], first_batches[k].data[0]):
            raise SystemExit(f"batch {k} differs between two runs with the same seed")
    resumed = mmnpz.Loader(specs, sampler, args.batch, fields=[(labs, 1 / LABEL_RATE)],
                           pad="fill", epochs=1, prefetch=0)
    resumed.load_state_dict(saved)
    sixth = next(iter(resumed))
    print(f"checked all {excerpts} excerpts and their labels against the written data in "
          f"{time.perf_counter() - t0:.2f} s: all equal")
    print(f"resumed from {saved}: next batch starts at position {sixth.position} "
          f"(= 5 x {args.batch}), clips {sixth.indices[:4].tolist()}...")


if __name__ == "__main__":
    main()
