"""Opening a sharded dataset: 1,000 archives holding 1,000,000 members in total.

Generates (once, reused while its parameters match) `--shards` archives of `--per-shard`
small int16 members of 1..64 rows x 2, then times mmnpz.Dataset over all of them (every
archive's directory and every member's .npy header read, lengths gathered) with the page cache
warm, against numpy reading the same lengths (np.load on each archive and each member's
shape, which reads the member) timed on the first `--numpy-shards` archives and scaled.

  PYTHONPATH=build-release/python /usr/bin/python3 bench/bench_dataset_open.py
      [--shards N] [--per-shard M] [--dir DIR] [--numpy-shards K]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import mmnpz


def generate(root, shards, per_shard):
    marker = os.path.join(root, "params.json")
    params = {"shards": shards, "per_shard": per_shard, "version": 1}
    if os.path.exists(marker) and json.load(open(marker)) == params:
        return
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for s in range(shards):
        with mmnpz.NpzWriter(os.path.join(root, f"open-{s:05d}-of-{shards:05d}.npz"), "w",
                             align=16) as w:
            for k in range(per_shard):
                w.write(f"m{s}_{k}", np.full((int(rng.integers(1, 65)), 2), k, np.int16))
        if s % 20 == 0 or s == shards - 1:
            print(f"\r  generating: {s + 1}/{shards} archives, "
                  f"{time.perf_counter() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    json.dump(params, open(marker, "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--per-shard", type=int, default=1000)
    ap.add_argument("--dir", default=os.path.join("build", "bench-open"))
    ap.add_argument("--numpy-shards", type=int, default=10)
    args = ap.parse_args()
    generate(args.dir, args.shards, args.per_shard)
    spec = os.path.join(args.dir, f"open@{args.shards}.npz")
    for p in mmnpz.Dataset(spec).paths:  # warm the page cache
        with open(p, "rb") as f:
            f.read()

    times = []
    for threads in (1, 0):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            ds = mmnpz.Dataset(spec, threads=threads)
            lengths = ds.lengths
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        label = "1 thread" if threads == 1 else "all cores"
        print(f"mmnpz.Dataset, {label:9s}: {len(ds):,} members in {len(ds.paths)} archives "
              f"opened in {best:.3f} s ({best / len(ds) * 1e9:.0f} ns per member)")
    t0 = time.perf_counter()
    numpy_lengths = []
    for p in ds.paths[: args.numpy_shards]:
        with np.load(p) as f:
            numpy_lengths += [f[n].shape[0] for n in f.files]
    numpy_s = (time.perf_counter() - t0) * len(ds.paths) / args.numpy_shards
    assert numpy_lengths == lengths[: len(numpy_lengths)].tolist()
    print(f"numpy (np.load + shape of every member), scaled from {args.numpy_shards} archives: "
          f"{numpy_s:.1f} s")
    print(f"mmnpz / numpy: {numpy_s / min(times):.0f}x faster")


if __name__ == "__main__":
    main()
