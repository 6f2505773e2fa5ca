"""mmnpz.torch.loader with DataLoader workers against mmnpz.Loader in one process (issue 11
item 4), on the same batches, each case in a fresh Python process, several runs:

  loader    mmnpz.Loader (the C++ pool gathers in the background, every core)
  ring      mmnpz.torch.loader(num_workers=W): batches cross the worker queue as slot numbers
            of a ring of shared buffers made once per worker
  segments  torch.utils.data.DataLoader over the same ExcerptBatches and sampler, without
            the ring: each batch in new shared-memory segments (what loader() did before)

Each consumer sums every batch (reads every byte). Two figures per case: excerpts/s from
construction to the last batch (worker start-up included), and excerpts/s after the first
--warmup batches (steady state). Uses bench_first_touch.py's archive of float32 spectrograms
(generated once into --dir, as that script does) and its batches: 256 excerpts of 48 x 80.

  PYTHONPATH=build-release/python /usr/bin/python3 bench/bench_torch_workers.py
      [--scale 0.1] [--dir DIR] [--batches 2000] [--warmup 10] [--runs 3] [--workers 2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_first_touch as ft  # noqa: E402


def child(case, p):
    import torch  # noqa: F401  (imported before the clock starts, as a training script has)

    import mmnpz
    import mmnpz.torch

    options = dict(length=ft.LENGTH, kind="weighted", seed=p["seed"],
                   num_samples=p["batches"] * ft.BATCH)
    t0 = time.perf_counter()
    if case == "loader":
        ds = mmnpz.Dataset(p["spec"])
        sampler = mmnpz.Sampler(ds, "weighted", length=ft.LENGTH, seed=p["seed"],
                                num_samples=options["num_samples"])
        batches = ((b.data, b.indices, b.starts) for b in mmnpz.Loader(ds, sampler, ft.BATCH))
    else:
        excerpts = mmnpz.torch.ExcerptBatches(p["spec"], batch_size=ft.BATCH, **options)
        if case == "ring":
            torch_loader = mmnpz.torch.loader(excerpts, num_workers=p["workers"])
        else:
            torch_loader = torch.utils.data.DataLoader(
                excerpts, batch_size=None, sampler=excerpts.sampler(),
                num_workers=p["workers"])
        batches = ((b["data"], b["indices"].numpy(), b["starts"].numpy()) for b in torch_loader)
    times, samples = [], []
    for data, indices, starts in batches:
        data.sum()
        times.append(time.perf_counter())
        samples.append((indices, starts))
    del batches  # the workers stop here, outside the clock
    w = p["warmup"]
    return {"total": len(times) * ft.BATCH / (times[-1] - t0),
            "steady": (len(times) - w) * ft.BATCH / (times[-1] - times[w - 1]),
            "first_batch_s": times[0] - t0, "samples": ft.fingerprint(samples)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--batches", type=int, default=2000)  # an epoch is thousands of batches
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", default="loader,ring,segments")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return
    root = args.dir or os.path.join(tempfile.gettempdir(),
                                    f"mmnpz-first-touch-scale{args.scale:g}")
    ft.in_child_generate(root, args.scale)
    p = {"spec": ft.spec_path(root), "batches": args.batches, "warmup": args.warmup,
         "workers": args.workers, "seed": args.seed}
    cases = args.cases.split(",")
    raw = {c: [] for c in cases}
    for r in range(args.runs):
        ft.warm([p["spec"]])
        for case in cases:
            run = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case,
                                  json.dumps(p)], capture_output=True, text=True)
            if run.returncode:
                sys.stderr.write(run.stderr)
                raise SystemExit(f"the {case} case failed")
            raw[case].append(json.loads(run.stdout.strip().splitlines()[-1]))
    if len({x["samples"] for runs in raw.values() for x in runs}) != 1:
        raise SystemExit("the cases yielded other batches")
    base = raw.get("loader")
    print(f"{args.batches} batches of {ft.BATCH} x {ft.LENGTH} x {ft.BINS} float32, "
          f"{args.workers} workers, {args.runs} runs (best; ratios per run to mmnpz.Loader); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| case | excerpts/s, construction to last | per run vs Loader | excerpts/s "
          f"after {args.warmup} batches | per run vs Loader | first batch |")
    print("|---|---:|---|---:|---|---:|")
    for case in cases:
        runs = raw[case]

        def ratios(key):
            if not base:
                return ""
            return " ".join(f"{x[key] / y[key]:.0%}" for x, y in zip(runs, base))

        print(f"| {case} | {max(x['total'] for x in runs):,.0f} | {ratios('total')} | "
              f"{max(x['steady'] for x in runs):,.0f} | {ratios('steady')} | "
              f"{min(x['first_batch_s'] for x in runs) * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
