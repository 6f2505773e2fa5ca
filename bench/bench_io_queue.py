"""Reading evicted excerpts: blocking pread, pread after POSIX_FADV_WILLNEED, io_uring, and
mmnpz's gather, on the same pieces in the same run (issue 11: io_uring "if it measures better").

Uses bench_first_touch.py's archive (generated once into --dir, shared with it) and its
batches: 256 excerpts of 48 x 80 float32 drawn by one weighted sampler. Each run evicts the
archive (POSIX_FADV_DONTNEED) before each program, and runs in this order, interleaved:

  C pread        bench/queue_pieces.c pread: THREADS threads, one blocking pread per piece
  C willneed     the same after POSIX_FADV_WILLNEED on every piece of the batch
  C io_uring     one thread keeping DEPTH reads in flight (liburing), for each --depths
  mmnpz gather   Dataset.gather(io=IO) in a fresh process, opened, evicted, then gathered
                 (bench_first_touch.py's "evicted" case)

and prints MB/s (best and median over the runs) and the ratio of each to C pread. Checksums
of every program must agree (the same bytes were read). Needs liburing-dev for io_uring
(skipped, with a note, when it is missing or the kernel refuses io_uring).

  PYTHONPATH=build/python /usr/bin/python3 bench/bench_io_queue.py [--quick] [--runs R]
      [--threads T] [--depths 16,64,256] [--io auto|read] [--dir DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_first_touch as ft  # noqa: E402  (the archive, its batches, the evicted case)


def run_c(binary, mode, pieces, n, archive):
    run = subprocess.run([binary, mode, pieces, str(n), archive], capture_output=True, text=True)
    if run.returncode == 3:
        return None  # io_uring refused by the kernel
    if run.returncode != 0:
        raise SystemExit(f"queue_pieces {mode} failed: {run.stderr.strip()}")
    return json.loads(run.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the --scale 0.1 archive, 20 batches")
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=None,
                    help="batches read per program (default 20 with --quick, else 80)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--depths", default="16,64,256")
    ap.add_argument("--io", default="auto", help="io= of mmnpz's gather")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    root = args.dir or os.path.join(tempfile.gettempdir(), f"mmnpz-first-touch-scale{scale:g}")
    batches = args.batches or (20 if args.quick else 80)
    depths = [int(d) for d in args.depths.split(",") if d]

    import mmnpz  # noqa: F401  (fails here when PYTHONPATH lacks it)

    ft.in_child_generate(root, scale)
    archive = ft.spec_path(root)
    with tempfile.TemporaryDirectory(prefix="mmnpz-io-queue-") as work:
        binary = os.path.join(work, "queue_pieces")
        build = subprocess.run(["cc", "-O2", "-pthread", "-o", binary,
                                os.path.join(HERE, "queue_pieces.c"), "-luring"],
                               capture_output=True, text=True)
        if build.returncode != 0:
            raise SystemExit("building bench/queue_pieces.c failed (apt-get install "
                             f"liburing-dev):\n{build.stderr}")
        pieces = os.path.join(work, "evicted.pieces")
        base = {"spec": archive, "seed": args.seed, "samples": batches * ft.BATCH,
                "threads": args.threads, "io": args.io, "tmp": work}
        ft.in_child("pieces", dict(base, out={pieces: batches}))
        programs = [("C pread", "pread", args.threads), ("C willneed", "willneed", args.threads)]
        programs += [(f"C io_uring depth {d}", "uring", d) for d in depths]
        rates = {name: [] for name, _, _ in programs}
        rates[f"mmnpz gather io={args.io}"] = []
        checksums = set()
        notes = []
        for r in range(args.runs):
            print(f"  run {r + 1}/{args.runs} ...", file=sys.stderr, flush=True)
            for name, mode, n in programs:
                ft.warm([archive])  # every program starts from the same state
                got = run_c(binary, mode, pieces, n, archive)
                if got is None:
                    if not rates[name]:
                        notes.append(f"{name}: the kernel refused io_uring")
                    continue
                rates[name].append(got["bytes"] / got["seconds"] / 1e6)
                checksums.add(got["checksum"])
            ft.warm([archive])
            ft.evict([archive])
            got = ft.in_child("evicted", dict(base, batches=batches))
            nbytes = got["excerpts"] * ft.LENGTH * ft.BINS * 4
            rates[f"mmnpz gather io={args.io}"].append(nbytes / got["seconds"] / 1e6)
            checksums.add(got["checksum"])
        if len(checksums) != 1:
            raise SystemExit(f"the programs read different bytes (checksums {checksums})")

    base_rate = max(rates["C pread"])
    print(f"\n`{' '.join([sys.executable] + sys.argv)}`\n")
    print(f"{batches} batches of {ft.BATCH} excerpts ({ft.LENGTH * ft.BINS * 4} bytes each) from "
          f"{archive} ({os.path.getsize(archive) / 1e9:.2f} GB), evicted before each program; "
          f"{args.threads} threads; best and median of {args.runs} runs; load average "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print("| reader | best MB/s | median MB/s | best / C pread best |")
    print("|---|--:|--:|--:|")
    for name, values in rates.items():
        if values:
            print(f"| {name} | {max(values):.0f} | {statistics.median(values):.0f} | "
                  f"{max(values) / base_rate:.0%} |")
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
