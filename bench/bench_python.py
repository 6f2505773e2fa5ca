"""Per-member access cost of the Python package, against baselines measured in the same run.

Baselines: numpy's np.load, and a pure-Python memory-mapped reader that works the way the
pure-Python `mmnpz` package describes itself (zipfile for the directory, then each member's
local header and .npy header parsed in Python on first access, and a numpy.memmap view of the
data); that package is not installable here, so its method is re-created below for the
comparison. Usage: PYTHONPATH=<build>/python /usr/bin/python3 bench/bench_python.py [--members N]
"""

import argparse
import os
import struct
import sys
import tempfile
import time
import zipfile

import numpy as np

import mmnpz


class PurePythonReader:
    """The baseline: a pure-Python mmap reader (directory by zipfile, headers by numpy)."""

    def __init__(self, path):
        self.mmap = np.memmap(path, mode="r")
        with zipfile.ZipFile(path) as z:
            self.offsets = {i.filename[:-4]: i.header_offset for i in z.infolist()}
        self.arrays = {}

    def __getitem__(self, key):
        item = self.arrays.get(key)
        if item is None:
            offset = self.offsets[key]
            name_len, extra_len = struct.unpack("<HH", self.mmap[offset + 26:offset + 30])
            start = offset + 30 + name_len + extra_len
            header = memoryview(self.mmap[start:start + 4096])
            version = np.lib.format.read_magic(_Reader(header))
            reader = _Reader(header)
            reader.read(8)
            shape, fortran, dtype = np.lib.format._read_array_header(reader, version)
            item = self.arrays[key] = np.ndarray.__new__(
                np.memmap, shape, dtype, buffer=self.mmap, offset=start + reader.pos,
                order="F" if fortran else "C")
        return item


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def read(self, n):
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out


def per_member(fn, keys):
    t0 = time.perf_counter()
    for k in keys:
        fn(k)
    return (time.perf_counter() - t0) / len(keys)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.npz")
        with mmnpz.NpzWriter(path) as w:
            for i in range(args.members):
                w.write(f"m{i}", np.full(4, i, np.float32))
        keys = [f"m{i}" for i in range(args.members)]
        rows = []
        for label, make in [("mmnpz.load", mmnpz.load),
                            ("pure-Python mmap reader (baseline)", PurePythonReader),
                            ("np.load", np.load)]:
            best_first = best_again = float("inf")
            for _ in range(3):
                reader = make(path)
                best_first = min(best_first, per_member(reader.__getitem__, keys))
                best_again = min(best_again, per_member(reader.__getitem__, keys))
                ok = all(float(reader[k][1]) == i for i, k in enumerate(keys[:100]))
                assert ok, label
            rows.append((label, best_first, best_again))
        print(f"Command: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
        print(f"**Python, per member** of {args.members:,} tiny members (best of 3)\n")
        print("| Reader | first access | again (cached) | first access vs mmnpz |")
        print("|:--|--:|--:|--:|")
        ours = rows[0][1]
        for label, first, again in rows:
            print(f"| {label} | {first * 1e6:.2f} µs | {again * 1e6:.2f} µs | {first / ours:.1f}× |")
        ratio = rows[1][1] / ours
        print(f"\nTarget: first access at least 20× faster than the pure-Python reader: "
              f"**{'met' if ratio >= 20 else 'missed'}** ({ratio:.1f}×)")


if __name__ == "__main__":
    main()
