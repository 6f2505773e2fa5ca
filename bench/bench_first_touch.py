"""The data path at first touch (issue 11): each case beside its comparison, same run.

Generates once into --dir (reused while the parameters match) a single archive of float32
spectrograms (20,000 of 50..500 frames x 80 bins, 1.75 GB, at --scale 1) and an archive of
1,000,000 small int16 members, then runs every case in a FRESH Python process (new
mappings), several times, keeping the best of each figure:

  case                                      compared with (same run)
  gather in a fresh process                 the same batches gathered again in that process
    (page cache warm, mapping new), twice:
    the archive read into the page cache in
    file order (large folios), and brought in
    64 KiB at a time (4 KiB pages, as random
    reads leave it); see fill(). A note gives,
    for each state, one pass of pread_pieces.c
    pread-ing the same pieces from the page
    cache filled the same way: what reading
    every piece reaches there
  gather with the archive evicted from      bench/pread_pieces.c pread-ing exactly the same
    the page cache (after opening, before     (file, offset, length) pieces on as many
    the first gather: POSIX_FADV_DONTNEED,    threads, evicted the same way (checksums
    and since pages a process maps stay,      compared: the same bytes)
    the open's mapped pages are zapped
    first, madvise MADV_DONTNEED; fincore
    counts the pages resident at each step)
  mmnpz.torch.loader(num_workers=2)         mmnpz.Loader on the same batches (both from
                                              construction to the last batch, each batch
                                              summed by the consumer; a run of its own
                                              length, --torch-batches, reported twice: the
                                              whole run, and after the first batch, the
                                              steady state of a long epoch); a note adds
                                              what separate worker processes reach with no
                                              IPC: --workers plain processes at once, each
                                              gathering its share of the same batches
  opening the many-member archive           np.load on the same archive
  first access of a member                  a repeat access of the same members
  warm gather                               pread_pieces.c memcpy-ing the same pieces from
                                              a private copy of the archive in DRAM

Batches: 256 excerpts of 48 frames drawn by one weighted sampler (the same batches for every
case and its comparison). Before each case the archives are evicted and read into the page
cache again (in file order, but for the second fresh case), so that no case depends on what
the one before it left there. Prints a Markdown table (figure, comparison, ratio, target, met),
writes the figures as JSON (--json) and a bar chart (--plot), and checks that no /dev/shm
segment or temporary file is left behind. Uses only mmnpz's public Python API; --io MODE
passes io=MODE to mmnpz.Dataset, Dataset.gather and mmnpz.torch.loader (for the versions that
have it). The C program is compiled at run time (cc -O2 -pthread) into a temporary directory.

  PYTHONPATH=build/python /usr/bin/python3 bench/bench_first_touch.py [--quick]
      [--scale S] [--dir DIR] [--runs R] [--threads T] [--io read|map] [--json FILE]
      [--plot FILE] [--torch-batches N]
"""

import argparse
import gc
import glob
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

BINS = 80
LENGTH = 48  # frames per excerpt
BATCH = 256  # excerpts per batch
SPECTROGRAMS = 20_000  # at scale 1
MEMBERS = 1_000_000  # of the many-member archive, at scale 1
WARM_PASSES = 3  # warm passes over the batches, the fastest kept (gather and memcpy alike)
# Batches of the torch case and its comparison: a few seconds of mmnpz.Loader at scale 1, so
# that worker start-up does not hide the steady state (an epoch is thousands of batches).
TORCH_BATCHES = 2000
TORCH_BATCHES_QUICK = 300
FIRST_ACCESSES = 2000  # members accessed for the first time (then again) per run
HEADER_READ = 256  # bytes a first access reads at a small member's local header (about)
FORMAT_VERSION = 1  # of the generated data: bump when generate() changes
PAGE = os.sysconf("SC_PAGE_SIZE")
HERE = os.path.dirname(os.path.abspath(__file__))


def frames_of(i):
    return 50 + (i * 7919) % 451  # 50..500, spread evenly


# ---- Data --------------------------------------------------------------------------------


def spec_path(root):
    return os.path.join(root, "spec.npz")


def many_path(root):
    return os.path.join(root, "many.npz")


def write_archive(path, count, every, what, item):
    """Writes item(0) ... item(count - 1), each a (name, array), into `path` with progress."""
    import mmnpz

    t0 = time.perf_counter()
    with mmnpz.NpzWriter(path, "w") as w:
        for i in range(count):
            w.write(*item(i))
            if i % every == 0:
                print(f"\r  generating {path}: {i + 1}/{count}", end="", file=sys.stderr,
                      flush=True)
    print(f"\r  generated {path}: {count} {what}, {os.path.getsize(path) / 1e6:.0f} MB in "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)


def generate(root, scale):
    """The two archives in `root`, unless there already with the same parameters."""
    import numpy as np

    spectrograms = max(1, round(SPECTROGRAMS * scale))
    members = max(1, round(MEMBERS * scale))
    marker = os.path.join(root, "params.json")
    params = {"spectrograms": spectrograms, "members": members, "bins": BINS,
              "version": FORMAT_VERSION}
    try:
        with open(marker) as f:
            if json.load(f) == params:
                return params
    except (OSError, ValueError):
        pass
    os.makedirs(root, exist_ok=True)
    if os.path.exists(marker):
        os.unlink(marker)
    rng = np.random.default_rng(0)
    write_archive(spec_path(root), spectrograms, 1000, "spectrograms",
                  lambda i: (f"spec_{i:05d}",
                             rng.standard_normal((frames_of(i), BINS), np.float32)))
    rows = rng.integers(1, 17, members)
    blocks = [np.full((r, 2), r, np.int16) for r in range(17)]
    write_archive(many_path(root), members, 50_000, "members",
                  lambda k: (f"m{k:07d}", blocks[rows[k]]))
    for p in (spec_path(root), many_path(root)):
        with open(p, "rb") as f:
            os.fsync(f.fileno())  # clean pages: POSIX_FADV_DONTNEED leaves dirty ones
    with open(marker, "w") as f:
        json.dump(params, f)
    return params


# ---- Page cache ----------------------------------------------------------------------------


def resident(paths):
    """(pages resident in the page cache, pages in all) of `paths`, by util-linux fincore."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output",
                          "PAGES,SIZE"] + list(paths), check=True, capture_output=True,
                         text=True).stdout.split()
    pages = sum(int(x) for x in out[0::2])
    total = sum(-(-int(x) // PAGE) for x in out[1::2])
    return pages, total


def process_memory():
    """{'RssAnon', 'RssFile'} of this process in KiB (/proc/self/status)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
    return out


def host_note():
    """What of the host moves these figures: kernel, CPU, transparent huge pages, and DAMON
    schemes that page out or reclaim memory on their own (on some hosts, idle page cache is
    paged out after a minute, so a case must run right after its fill)."""
    def text(path):
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            return None

    cpu = "?"
    for line in (text("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    thp = text("/sys/kernel/mm/transparent_hugepage/enabled") or "?"
    thp = thp[thp.find("[") + 1:thp.find("]")] if "[" in thp else thp
    schemes = []
    for state in sorted(glob.glob("/sys/kernel/mm/damon/admin/kdamonds/*/state")):
        if text(state) != "on":
            continue
        root = os.path.dirname(state)
        for scheme in sorted(glob.glob(os.path.join(root, "contexts/*/schemes/[0-9]*"))):
            action = text(os.path.join(scheme, "action"))
            age = text(os.path.join(scheme, "access_pattern/age/min"))
            aggr = text(os.path.join(scheme, "../../monitoring_attrs/intervals/aggr_us"))
            idle = ""
            if age and aggr and age.isdigit() and aggr.isdigit():
                idle = f" of regions idle for {int(age) * int(aggr) / 1e6:g} s or more"
            schemes.append(f"{action}{idle}")
    damon = ("DAMON schemes on: " + ", ".join(schemes)) if schemes else "no DAMON scheme on"
    return (f"host: Linux {os.uname().release}, {cpu}, {os.cpu_count()} CPUs; transparent "
            f"huge pages {thp}; {damon}")


def evict(paths):
    """Drops the files' clean pages from the page cache (pages mapped by a process stay)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def unmap_pages(paths):
    """Zaps this process's page-table entries for its read-only mappings of `paths`
    (madvise MADV_DONTNEED; the mappings stay valid and fault their pages in again), so that
    POSIX_FADV_DONTNEED can drop every page. Returns (ranges, bytes) zapped."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    wanted = {os.path.realpath(p) for p in paths}
    ranges = nbytes = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[5].strip() not in wanted or "w" in fields[1]:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if libc.madvise(start, end - start, 4) != 0:  # 4: MADV_DONTNEED
                raise OSError(ctypes.get_errno(), f"madvise on {fields[5].strip()}")
            ranges += 1
            nbytes += end - start
    return ranges, nbytes


def warm(paths):
    """Reads every file through read(2) (no mapping), so the page cache holds it."""
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass


def fill(paths, how):
    """Puts the files in the page cache afresh, in one of two states (what is already cached
    stays as it was, so each case first evicts). "read": read whole in file order, as cp,
    cat or any sequential reader leaves a file (the kernel's readahead makes large folios
    where the file system has them: on ext4 under Linux 6.18, 2 MiB ones that one page fault
    maps whole). "pages": brought in 64 KiB at a time by POSIX_FADV_WILLNEED, as random
    reads leave a file, a gather's of evicted data included (4 KiB pages: a fault maps 64
    KiB of them, a read looks each up)."""
    evict(paths)
    if how == "pages":
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                for offset in range(0, os.fstat(fd).st_size, 1 << 16):
                    os.posix_fadvise(fd, offset, 1 << 16, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)
    warm(paths)  # "pages": waits for the reads above (and reads what they left out)


# ---- Cases, each run in a fresh process (`--child NAME PARAMS`) ----------------------------


def io_kw(p):
    return {"io": p["io"]} if p.get("io") else {}


def open_spec(p):
    import mmnpz

    return mmnpz.Dataset(p["spec"], **io_kw(p))


def make_sampler(ds, p):
    import mmnpz

    return mmnpz.Sampler(ds, "weighted", length=LENGTH, seed=p["seed"],
                         num_samples=p["samples"])


def batches_of(ds, p, count):
    sampler = make_sampler(ds, p)
    return [sampler.sample(0, b * BATCH, BATCH) for b in range(count)]


def aligned_batch():
    """A batch array starting on a page boundary, as pread_pieces.c's: numpy puts large
    arrays 16 bytes past a page, where copies run up to twice as slow on some CPUs, and the
    comparison is of the copies, not of numpy's allocator. Every page is touched."""
    import numpy as np

    shape = (BATCH, LENGTH, BINS)
    nbytes = BATCH * LENGTH * BINS * 4
    raw = np.ones(nbytes + PAGE, np.uint8)
    skip = -raw.ctypes.data % PAGE
    return raw[skip:skip + nbytes].view(np.float32).reshape(shape)


def checksum(arrays):
    """The sum of the 32-bit words of `arrays` mod 2**64, as pread_pieces.c computes it."""
    import numpy as np

    total = 0
    for a in arrays:
        total += int(np.ascontiguousarray(a).view(np.uint32).sum(dtype=np.uint64))
    return total % (1 << 64)


def child_pieces(p):
    """Writes the (file, offset, length) of every excerpt of the first batches, in the
    format pread_pieces.c reads, to p["out"][count] for each count."""
    import numpy as np

    import mmnpz

    ds = open_spec(p)
    paths = list(ds.paths)
    readers = {path: mmnpz.load(path) for path in paths}
    row_bytes = BINS * 4
    largest = max(p["out"].values())
    batches = batches_of(ds, p, largest)
    records = []
    offsets = {}
    for indices, starts in batches:
        for i, s in zip(indices.tolist(), starts.tolist()):
            if i not in offsets:
                path, member = ds.locate(i)
                info = readers[path].info(member)
                assert info.dtype == np.float32 and info.shape[1:] == (BINS,), info
                offsets[i] = (paths.index(path), info.offset)
            f, offset = offsets[i]
            records.append((f, offset + s * row_bytes, LENGTH * row_bytes))
    for target, count in p["out"].items():
        with open(target, "wb") as out:
            out.write(b"MMNPZPC1" + struct.pack("<3Q", len(paths), count * BATCH, BATCH))
            out.write(b"".join(struct.pack("<3Q", *r) for r in records[:count * BATCH]))
    for r in readers.values():
        r.close()
    return {"paths": paths}


def child_fresh(p):
    """A gather of the batches in a new process (new mapping), then the same again."""
    import mmnpz  # noqa: F401  (before the clock: importing is no part of opening)

    t0 = time.perf_counter()
    ds = open_spec(p)
    open_s = time.perf_counter() - t0
    batches = batches_of(ds, p, p["batches"])
    out = aligned_batch()

    def gather_all():
        t0 = time.perf_counter()
        for indices, starts in batches:
            ds.gather(indices, starts, LENGTH, out=out, threads=p["threads"], **io_kw(p))
        return time.perf_counter() - t0

    fresh = gather_all()
    warm_passes = [gather_all() for _ in range(WARM_PASSES)]
    return {"open_s": open_s, "fresh_s": fresh, "warm_s": min(warm_passes),
            "warm_passes_s": warm_passes, "excerpts": len(batches) * BATCH}


def child_evicted(p):
    """Open (the caller evicted the archive before: a cold open), evict the archive from the
    page cache again, then gather. Pages the process maps cannot be evicted, and opening
    maps some (the kernel maps up to 64 KiB of cached pages around each faulting header
    read): those page-table entries are zapped first, the mapping itself stays."""
    import mmnpz  # noqa: F401  (before the clock: importing is no part of opening)

    t0 = time.perf_counter()
    ds = open_spec(p)
    open_s = time.perf_counter() - t0
    batches = batches_of(ds, p, p["batches"])
    out = aligned_batch()
    before = resident(ds.paths)
    evict(ds.paths)
    fadvised = resident(ds.paths)  # what POSIX_FADV_DONTNEED alone leaves
    zapped = unmap_pages(ds.paths)
    evict(ds.paths)
    after = resident(ds.paths)
    memory = process_memory()
    t0 = time.perf_counter()
    for indices, starts in batches:
        ds.gather(indices, starts, LENGTH, out=out, threads=p["threads"], **io_kw(p))
    seconds = time.perf_counter() - t0
    memory = {k: v - memory[k] for k, v in process_memory().items()}  # what the gathers added
    loaded = resident(ds.paths)
    total = checksum(ds.gather(i, s, LENGTH, threads=p["threads"], **io_kw(p))
                     for i, s in batches)  # untimed: the bytes the C program must match
    return {"seconds": seconds, "excerpts": len(batches) * BATCH, "cold_open_s": open_s,
            "resident_before": before, "resident_after_fadvise_only": fadvised,
            "zapped_ranges": zapped[0], "zapped_bytes": zapped[1],
            "resident_after": after, "resident_after_gather": loaded, "checksum": total,
            "memory_grown_kib": memory, "out_bytes": out.nbytes}


def cpu_seconds():
    """CPU seconds (user + system) of this process and of its children waited for."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def consumer_sum():
    """The consumer's read of every byte of a batch, the same in every torch case: torch's
    sum on one intra-op thread (as the torch loader's consumer has it). numpy's sum of the
    same (256, 48, 80) float32 batch takes 250-330 us against torch's 170-180 here, so a
    Loader summed with numpy was a slower consumer than the torch loader's. Its first
    reduction sets up torch's kernels (13 ms, against 0.2 ms for the next): done here, before
    the clock, as a training script has run torch before its loop."""
    import torch

    torch.set_num_threads(1)
    torch.zeros(8).sum()
    return lambda array: torch.from_numpy(array).sum()


def child_loader(p):
    """mmnpz.Loader from construction to the last batch, summing each batch."""
    import mmnpz

    total = consumer_sum()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    ds = open_spec(p)
    loader = mmnpz.Loader(ds, make_sampler(ds, p), BATCH)

    def take(batch):
        total(batch.data)
        return batch.indices, batch.starts

    seconds, first, count, samples = consume(loader, t0, p["batches"], take)
    return {"seconds": seconds, "first_batch_s": first, "excerpts": count * BATCH,
            "samples": samples, "cpu_s": cpu_seconds() - cpu0}


def consume(batches, t0, wanted, take):
    """Takes `wanted` batches from `batches`, `take(batch)` reading each and returning its
    (indices, starts): (seconds since t0, seconds to the first batch, batches taken, the
    fingerprint of which excerpts came, to check that torch's are the Loader's)."""
    first = None
    count = 0
    samples = []
    for batch in batches:
        samples.append(take(batch))
        count += 1
        if first is None:
            first = time.perf_counter() - t0
        if count == wanted:
            break
    return time.perf_counter() - t0, first, count, fingerprint(samples)


def fingerprint(samples):
    """One number naming a sequence of batches' (indices, starts)."""
    return combine([digest(indices, starts) for indices, starts in samples])


def digest(indices, starts):
    """A batch's (indices, starts), named: fingerprint() of batches gathered apart (by the
    plain processes of child_share) is combine() of their digests in batch order."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    h.update(np.asarray(indices, np.int64).tobytes())
    h.update(np.asarray(starts, np.int64).tobytes())
    return h.hexdigest()


def combine(digests):
    import hashlib

    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]


def child_share(p):
    """Worker `share` of `shares` alone: batches share, share + shares, ... of the Loader's,
    gathered on 1 thread in this process and summed, from construction to the last. Run
    `shares` at once, they are what separate worker processes reach with no IPC at all: each
    opens the dataset and maps the archive afresh and faults or reads in its own pages."""
    import mmnpz  # noqa: F401  (before the clock, as in the other cases)

    total = consumer_sum()
    t0 = time.perf_counter()
    ds = open_spec(p)
    sampler = make_sampler(ds, p)
    out, digests = None, []
    for b in range(p["share"], p["batches"], p["shares"]):
        indices, starts = sampler.sample(0, b * BATCH, BATCH)
        out = ds.gather(indices, starts, LENGTH, out=out, threads=1, **io_kw(p))
        total(out)
        digests.append(digest(indices, starts))
    return {"seconds": time.perf_counter() - t0, "digests": digests}


def child_torch(p):
    """mmnpz.torch.loader(num_workers=--workers) from construction to the last batch."""
    import torch  # imported before the clock starts, as a training script has

    import mmnpz.torch

    consumer_sum()  # torch's kernels set up before the clock, as for the Loader
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    loader = mmnpz.torch.loader(p["spec"], length=LENGTH, batch_size=BATCH, kind="weighted",
                                seed=p["seed"], num_samples=p["samples"],
                                num_workers=p["workers"], **io_kw(p))
    it = iter(loader)

    def take(batch):
        batch["data"].sum()
        return batch["indices"].numpy(), batch["starts"].numpy()

    seconds, first, count, samples = consume(it, t0, p["batches"], take)
    del it, loader  # the workers stop here (and are waited for), outside the clock
    import gc
    import multiprocessing

    gc.collect()
    if multiprocessing.active_children():  # their CPU would be left out
        raise SystemExit("the torch loader's workers outlived it")
    cpu_s = cpu_seconds() - cpu0  # the workers' too: counted once they exited
    return {"seconds": seconds, "first_batch_s": first, "excerpts": count * BATCH,
            "samples": samples, "torch_threads": torch.get_num_threads(),
            "workers": p["workers"], "cpu_s": cpu_s}


def child_open(p):
    """Opening the many-member archive with mmnpz.load or np.load, then listing its members
    (`files`: np.load builds the list when opening, mmnpz.load when it is first asked for)."""
    import numpy as np

    import mmnpz

    opener = mmnpz.load if p["with"] == "mmnpz" else np.load
    t0 = time.perf_counter()
    archive = opener(p["many"])
    seconds = time.perf_counter() - t0
    files = len(archive.files)
    listed = time.perf_counter() - t0
    archive.close()
    return {"seconds": seconds, "with_files_s": listed, "files": files}


def child_access(p):
    """First accesses of random members of the many-member archive just opened, then the
    same accesses again."""
    import numpy as np

    import mmnpz

    reader = mmnpz.load(p["many"])
    rng = np.random.default_rng(p["seed"])
    picks = rng.choice(len(reader.files), size=min(FIRST_ACCESSES + 1, len(reader.files)),
                       replace=False)
    names = [reader.files[k] for k in picks]
    # The collector's pending work on what the setup made (the `files` list of 1,000,000
    # names, young: the next collections of generations 0 and 1 walk all of it, 1-2 ms) is
    # done before the clock, not charged to whichever accesses happen to trigger it. The
    # collections the accesses themselves trigger stay in, and are counted.
    gc.collect()
    collections = {"first": [0, 0.0], "repeat": [0, 0.0]}
    timing = {"loop": None, "start": 0.0}

    def collected(phase, info):
        if timing["loop"] is None:
            return
        if phase == "start":
            timing["start"] = time.perf_counter()
        else:
            collections[timing["loop"]][0] += 1
            collections[timing["loop"]][1] += time.perf_counter() - timing["start"]

    gc.callbacks.append(collected)
    t0 = time.perf_counter()
    reader[names[0]]
    very_first = time.perf_counter() - t0
    rest = names[1:] or names
    timing["loop"] = "first"
    t0 = time.perf_counter()
    for name in rest:
        reader[name]
    first = (time.perf_counter() - t0) / len(rest)
    timing["loop"] = "repeat"
    t0 = time.perf_counter()
    for name in rest:
        reader[name]
    repeat = (time.perf_counter() - t0) / len(rest)
    timing["loop"] = None
    gc.callbacks.remove(collected)
    # What numpy alone takes to make and keep a new memmap view of each member (the items
    # mmnpz hands out are such views): its shape, dtype and place taken before the clock.
    whole = reader.mmap
    places = [(x.shape, x.dtype, x.ctypes.data - whole.ctypes.data)
              for x in (reader[name] for name in rest)]
    gc.collect()
    t0 = time.perf_counter()
    kept = [np.ndarray.__new__(np.memmap, shape, dtype, buffer=whole, offset=offset)
            for shape, dtype, offset in places]
    numpy_view = (time.perf_counter() - t0) / len(rest)
    del kept, whole
    if p.get("headers_out"):  # where each member's headers are, for the C pread of them
        core = reader._reader
        offsets = [core.member(core.find(name))["local_header_offset"] for name in rest]
        with open(p["headers_out"], "wb") as out:
            out.write(b"MMNPZPC1" + struct.pack("<3Q", 1, len(offsets), len(offsets)))
            out.write(b"".join(struct.pack("<3Q", 0, o, HEADER_READ) for o in offsets))
    reader.close()
    return {"very_first_s": very_first, "first_s": first, "repeat_s": repeat,
            "numpy_view_s": numpy_view, "accesses": len(rest), "collections": collections}


CHILDREN = {"pieces": child_pieces, "fresh": child_fresh, "evicted": child_evicted,
            "loader": child_loader, "torch": child_torch, "share": child_share,
            "open": child_open, "access": child_access}


def in_child(name, params):
    """Runs case `name` in a new Python process; returns what it printed as JSON."""
    return in_children(name, [params])[0]


def in_children(name, params_list):
    """Runs case `name` in new Python processes, one per params, all at once; returns what
    each printed as JSON."""
    runs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", name,
                              json.dumps(params)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=params["tmp"]))
            for params in params_list]
    outputs = [run.communicate() for run in runs]
    for run, (_, err) in zip(runs, outputs):
        if run.returncode != 0:
            sys.stderr.write(err)
            raise SystemExit(f"the {name} case failed (exit status {run.returncode})")
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def pread_pieces(binary, mode, pieces, threads, paths, evict_first=False, passes=1):
    command = [binary, mode, pieces, str(threads), "--passes", str(passes)]
    command += ["--evict"] if evict_first else []
    run = subprocess.run(command + list(paths), capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {run.stderr.strip()}")
    return json.loads(run.stdout)


# ---- The run --------------------------------------------------------------------------------


def shm_entries():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def shm_in_use(names):
    """Those of the /dev/shm entries `names` that some live process maps (by inode: a named
    semaphore is mapped under the temporary name it was created with)."""
    inodes = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                for line in f:
                    if "/dev/shm/" in line:
                        inodes.add(int(line.split()[4]))
        except (OSError, ValueError, IndexError):  # the process ended, or is not ours to read
            pass
    used = set()
    for name in names:
        try:
            if os.stat(os.path.join("/dev/shm", name)).st_ino in inodes:
                used.add(name)
        except OSError:  # gone meanwhile
            used.add(name)
    return used


def best_and_spread(values, larger_is_better=False):
    best = max(values) if larger_is_better else min(values)
    worst = min(values) if larger_is_better else max(values)
    return best, abs(worst - best) / best if best else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None,
                    help="where the archives are generated and kept (default: "
                         "$TMPDIR/mmnpz-first-touch-scale<S>)")
    ap.add_argument("--scale", type=float, default=None,
                    help="dataset size relative to the issue's (1: 20,000 spectrograms, "
                         "1,000,000 members; default 1, or 0.1 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="a run of under a minute: --scale 0.1, fewer batches")
    ap.add_argument("--runs", type=int, default=None,
                    help="fresh runs of each case, best kept (default 3)")
    ap.add_argument("--batches", type=int, default=None,
                    help="batches per warm case (default 40, 10 with --quick)")
    ap.add_argument("--evicted-batches", type=int, default=None,
                    help="batches gathered after eviction (default 20, 5 with --quick)")
    ap.add_argument("--torch-batches", type=int, default=None,
                    help="batches of the torch case and its Loader comparison (default "
                         f"{TORCH_BATCHES}, {TORCH_BATCHES_QUICK} with --quick: start-up "
                         "and steady state both show)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="gather and pread threads (default: every core, %(default)s)")
    ap.add_argument("--workers", type=int, default=2,
                    help="num_workers of the torch loader (default %(default)s)")
    ap.add_argument("--io", default=None,
                    help="pass io=IO to mmnpz.Dataset and Dataset.gather (newer mmnpz only)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", default="fresh,evicted,torch,open,access,memcpy",
                    help="comma-separated subset of the cases to run")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--plot", default=None, help="write a bar chart here (PNG)")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "PARAMS"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        name, params = args.child
        print(json.dumps(CHILDREN[name](json.loads(params))))
        return

    scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    if args.dir is None:
        args.dir = os.path.join(tempfile.gettempdir(), f"mmnpz-first-touch-scale{scale:g}")
    runs = args.runs or 3
    batches = args.batches or (10 if args.quick else 40)
    evicted_batches = args.evicted_batches or (5 if args.quick else 20)
    torch_batches = args.torch_batches or (TORCH_BATCHES_QUICK if args.quick else TORCH_BATCHES)
    if torch_batches < 2:
        ap.error("--torch-batches must be at least 2 (the steady state is after the first)")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - {"fresh", "evicted", "torch", "open", "access", "memcpy"}
    if unknown:
        ap.error(f"unknown cases: {sorted(unknown)}")
    command = " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)
    started = time.perf_counter()
    shm_before = shm_entries()

    import mmnpz  # noqa: F401  (fails here, before generating, when PYTHONPATH lacks it)

    gen = in_child_generate(args.dir, scale)
    spec, many = spec_path(args.dir), many_path(args.dir)
    spec_bytes = os.path.getsize(spec)
    print(f"archives in {args.dir}: {gen['spectrograms']:,} spectrograms "
          f"({spec_bytes / 1e9:.2f} GB), {gen['members']:,} members "
          f"({os.path.getsize(many) / 1e6:.0f} MB); batches of {BATCH} excerpts of "
          f"{LENGTH} x {BINS} float32; {args.threads} threads; {runs} runs, best kept",
          file=sys.stderr)

    # Everything temporary (the C program, the pieces, the children's TMPDIR) lives in one
    # directory, removed at the end; whatever a child leaves in its TMPDIR is reported.
    work = tempfile.mkdtemp(prefix="mmnpz-first-touch-")
    try:
        child_tmp = os.path.join(work, "tmp")
        os.mkdir(child_tmp)
        base = {"spec": spec, "many": many, "seed": args.seed,
                "samples": max(batches, evicted_batches) * BATCH, "threads": args.threads,
                "io": args.io, "workers": args.workers, "tmp": child_tmp}
        raw = run_cases(base, cases, runs, batches, evicted_batches, torch_batches, work,
                        child_tmp)
        leaks = [os.path.join("$TMPDIR", e) for e in sorted(os.listdir(child_tmp))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Other processes on the machine come and go in /dev/shm too (multiprocessing's semaphores
    # live there for microseconds, or as long as a spawned pool): a leak is a new entry still
    # there a second later that no live process maps (every process of this run has ended).
    new = shm_entries() - shm_before
    if new:
        time.sleep(1)
        new &= shm_entries()
        new -= shm_in_use(new)
    leaks += [os.path.join("/dev/shm", e) for e in sorted(new)]
    if os.path.exists(work):
        leaks.append(work)

    notes = [host_note()]
    rows = summarize(raw, cases, notes)
    elapsed = time.perf_counter() - started
    print_table(rows, command, notes, leaks, elapsed)
    figures = {"command": command, "scale": scale, "runs": runs, "batches": batches,
               "evicted_batches": evicted_batches, "torch_batches": torch_batches,
               "threads": args.threads, "io": args.io,
               "dataset": gen, "archive_bytes": spec_bytes, "elapsed_s": elapsed,
               "load_average": os.getloadavg(), "cases": rows, "notes": notes,
               "leaks": leaks, "raw": raw}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    if args.plot:
        plot(rows, args.plot, command)
    if leaks:
        raise SystemExit(f"left behind: {leaks}")


def run_cases(base, cases, runs, batches, evicted_batches, torch_batches, work, child_tmp):
    """{case: [what each run measured]}: every case and its comparison, `runs` times."""
    binary = os.path.join(work, "pread_pieces")
    subprocess.run(["cc", "-O2", "-pthread", "-o", binary, os.path.join(HERE, "pread_pieces.c")],
                   check=True, env=dict(os.environ, TMPDIR=child_tmp))
    pieces = {"warm": os.path.join(work, "warm.pieces"),
              "evicted": os.path.join(work, "evicted.pieces")}
    paths = in_child("pieces", dict(base, out={pieces["warm"]: batches,
                                               pieces["evicted"]: evicted_batches}))["paths"]
    raw = {}
    for r in range(runs):
        print(f"  run {r + 1}/{runs} ...", file=sys.stderr, flush=True)
        if "fresh" in cases:
            fill(paths, "pages")
            cached = resident(paths)
            got = in_child("fresh", dict(base, batches=batches))
            got["resident_at_start"] = cached
            got["c_pread"] = c_pread_from(binary, "pages", pieces["warm"], base["threads"],
                                          paths)
            raw.setdefault("fresh_pages", []).append(got)
        if "fresh" in cases or "memcpy" in cases:
            fill(paths, "read")
            cached = resident(paths)
            got = in_child("fresh", dict(base, batches=batches))
            got["resident_at_start"] = cached
            if "fresh" in cases:
                got["c_pread"] = c_pread_from(binary, "read", pieces["warm"], base["threads"],
                                              paths)
            if "memcpy" in cases:
                got["memcpy"] = pread_pieces(binary, "memcpy", pieces["warm"], base["threads"],
                                             paths, passes=WARM_PASSES)
                got["mapped"] = pread_pieces(binary, "mapped", pieces["warm"], base["threads"],
                                             paths, passes=WARM_PASSES)
            raw.setdefault("fresh", []).append(got)
        if "evicted" in cases:
            warm(paths)  # the same start for both: evicted from a warm cache
            evict(paths)
            cold = resident(paths)
            got = in_child("evicted", dict(base, batches=evicted_batches))
            got["resident_before_open"] = cold
            warm(paths)
            evict(paths)
            c_resident = resident(paths)
            got["c"] = pread_pieces(binary, "pread", pieces["evicted"], base["threads"], paths,
                                    evict_first=True)
            got["c"]["resident_at_start"] = c_resident
            if got["c"]["checksum"] != got["checksum"]:
                raise SystemExit(f"the C program read other bytes than the gather (checksums "
                                 f"{got['c']['checksum']} and {got['checksum']}): the pieces "
                                 f"are wrong")
            raw.setdefault("evicted", []).append(got)
        if "torch" in cases:
            fill(paths, "read")
            params = dict(base, batches=torch_batches, samples=torch_batches * BATCH)
            got = {"loader": in_child("loader", params), "torch": in_child("torch", params)}
            if got["loader"]["samples"] != got["torch"]["samples"]:
                raise SystemExit("mmnpz.Loader and mmnpz.torch.loader yielded other batches")
            fill(paths, "read")
            shares = in_children("share", [dict(params, share=w, shares=base["workers"])
                                           for w in range(base["workers"])])
            digests = [None] * torch_batches
            for w, share in enumerate(shares):
                digests[w::base["workers"]] = share["digests"]
            if combine(digests) != got["loader"]["samples"]:
                raise SystemExit("the plain processes gathered other batches than mmnpz.Loader")
            got["plain"] = {"seconds": max(x["seconds"] for x in shares),
                            "excerpts": torch_batches * BATCH}
            raw.setdefault("torch", []).append(got)
        if "open" in cases or "access" in cases:
            fill([base["many"]], "read")
        if "open" in cases:
            raw.setdefault("open", []).append(
                {"mmnpz": in_child("open", dict(base, **{"with": "mmnpz"})),
                 "numpy": in_child("open", dict(base, **{"with": "numpy"}))})
        if "access" in cases:
            headers = os.path.join(work, "headers.pieces")
            # Read again first: a host that pages out idle page cache (DAMON, see the host
            # note) can have dropped some of it during the open case's np.load.
            warm([base["many"]])
            before = resident([base["many"]])
            got = in_child("access", dict(base, seed=base["seed"] + r, headers_out=headers))
            got["resident_before"] = before
            # What no first access can skip on this host: one read of the member's headers
            # (C, 1 thread, the same page cache).
            got["c_pread"] = pread_pieces(binary, "pread", headers, 1, [base["many"]])
            raw.setdefault("access", []).append(got)
    return raw


def c_pread_from(binary, how, pieces, threads, paths):
    """One pass of the C pread loop over the fresh case's pieces, from a page cache filled
    afresh the same way as for the gather: what reading every piece reaches in that state."""
    fill(paths, how)
    return pread_pieces(binary, "pread", pieces, threads, paths)


def in_child_generate(root, scale):
    """Generates in a child too: the harness itself never maps an archive."""
    run = subprocess.run([sys.executable, "-c",
                          "import json, sys; sys.path.insert(0, sys.argv[1]);"
                          "import bench_first_touch as b;"
                          "print(json.dumps(b.generate(sys.argv[2], float(sys.argv[3]))))",
                          HERE, root, repr(scale)], stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        raise SystemExit("generating the archives failed")
    return json.loads(run.stdout.strip().splitlines()[-1])


def row(bars, case, unit, comparison, values, comparison_values, target, **extra):
    """A table row from each run's figure of the case and of its comparison: the best of
    each (largest rate, smallest time), their ratio, and each run's own ratio."""
    timed = unit == "s"

    def ratio_of(x, y):  # >= 1 means the case is better for rates, times compare the other way
        if bars[0] == "mmnpz.load":
            return y / x  # how many times faster than np.load
        return x / y

    figure, s1 = best_and_spread(values, not timed)
    comparison_figure, s2 = best_and_spread(comparison_values, not timed)
    ratio = ratio_of(figure, comparison_figure)
    op, bound = target
    met = ratio >= bound if op == ">=" else ratio <= bound
    return dict(bars=bars, case=case, figure=figure, unit=unit, comparison=comparison,
                comparison_figure=comparison_figure, ratio=ratio,
                target=f"{op} {bound:g}x" if timed else f"{op} {bound:.0%}",
                met=met, spread=max(s1, s2),
                run_ratios=[ratio_of(x, y) for x, y in zip(values, comparison_values)],
                **extra)


def summarize(raw, cases, notes):
    rows = []
    if "fresh" in raw and "fresh" in cases:
        for key, state in (("fresh", "read in file order: large folios"),
                           ("fresh_pages", "brought in by random reads: 4 KiB pages")):
            r = raw[key]
            res = r[-1]["resident_at_start"]
            rows.append(row(("fresh", "warm"),
                            f"gather in a fresh process (page cache warm, {state}; mapping "
                            f"new)", "excerpts/s", "the same batches once warm (same process)",
                            [x["excerpts"] / x["fresh_s"] for x in r],
                            [x["excerpts"] / x["warm_s"] for x in r], (">=", 0.5),
                            open_s=min(x["open_s"] for x in r)))
            notes.append(f"{key}: {res[0]:,} of {res[1]:,} archive pages resident before the "
                         f"fresh process started; Dataset open took "
                         f"{min(x['open_s'] for x in r) * 1e3:.0f} ms (not in the figure); "
                         f"{r[0]['excerpts'] // BATCH} batches, the warm figure the fastest of "
                         f"{WARM_PASSES} passes; gather and C memcpy into page-aligned "
                         f"batches")
            if all("c_pread" in x for x in r):
                c = [x["c_pread"]["pieces"] / x["c_pread"]["seconds"] for x in r]
                warm = max(x["excerpts"] / x["warm_s"] for x in r)
                notes.append(f"{key}: a C pread loop of the same pieces on the same threads, "
                             f"one pass from the page cache filled the same way, "
                             f"{max(c):,.0f} excerpts/s (runs {', '.join(f'{v:,.0f}' for v in c)}"
                             f"): {max(c) / warm:.0%} of the warm gather, what reading every "
                             f"piece reaches there")
    if "evicted" in raw:
        r = raw["evicted"]
        left = max(x["resident_after"][0] / x["resident_after"][1] for x in r)
        rows.append(row(("gather", "C pread"),
                        f"gather, archive evicted from the page cache ({left:.0%} of its pages "
                        f"resident)", "excerpts/s",
                        "C pread loop, same pieces and threads, evicted",
                        [x["excerpts"] / x["seconds"] for x in r],
                        [x["c"]["pieces"] / x["c"]["seconds"] for x in r], (">=", 0.8),
                        resident_fraction=left))
        def span(key, scale=1):  # "a" or "a..b" over the runs
            low, high = (round(f(key(x) * scale for x in r)) for f in (min, max))
            return f"{low:,}" if low == high else f"{low:,}..{high:,}"

        notes.append(
            f"evicted (ranges over the runs): archive pages resident, of "
            f"{r[0]['resident_before'][1]:,}: {span(lambda x: x['resident_before_open'][0])} "
            f"before the open, {span(lambda x: x['resident_before'][0])} after it (the cold open "
            f"took {span(lambda x: x['cold_open_s'], 1e3)} ms), "
            f"{span(lambda x: x['resident_after_fadvise_only'][0])} after POSIX_FADV_DONTNEED "
            f"alone (pages mapped by the process stay), {span(lambda x: x['resident_after'][0])} "
            f"after zapping the process's page-table entries of the archive (madvise "
            f"MADV_DONTNEED on {span(lambda x: x['zapped_ranges'])} mapping) and "
            f"POSIX_FADV_DONTNEED again, {span(lambda x: x['resident_after_gather'][0])} after "
            f"the gather; {span(lambda x: x['c']['resident_at_start'][0])} at the C program's "
            f"start; the gather's and the C program's checksums equal in every run")
        if "memory_grown_kib" in r[0]:
            notes.append(
                f"evicted, memory: over the timed gathers ({len(r)} runs, each "
                f"{r[0]['excerpts'] // BATCH} batches into one {r[0]['out_bytes'] / 1e6:.1f} MB "
                f"batch array made before), the process's resident memory grew by "
                f"{span(lambda x: x['memory_grown_kib']['RssAnon'])} KiB of anonymous memory "
                f"and {span(lambda x: x['memory_grown_kib']['RssFile'])} KiB of mapped file "
                f"pages (target: nothing beyond the output and a bounded staging area)")
    if "torch" in raw:
        r = raw["torch"]

        def whole(x):  # excerpts/s from construction to the last batch
            return x["excerpts"] / x["seconds"]

        def steady(x):  # excerpts/s after the first batch
            return (x["excerpts"] - BATCH) / max(x["seconds"] - x["first_batch_s"], 1e-9)

        def first_ms(who):
            return min(x[who]["first_batch_s"] for x in r) * 1e3

        first = dict(first_batch_ms={"torch": first_ms("torch"), "Loader": first_ms("loader")})
        count = r[0]["loader"]["excerpts"] // BATCH
        workers = r[0]["torch"].get("workers", 2)  # as the run had it (--workers)
        rows.append(row(("torch", "Loader"),
                        f"mmnpz.torch.loader(num_workers={workers}), batch.sum(), {count} batches "
                        f"from construction to the last (first batch after "
                        f"{first['first_batch_ms']['torch']:.0f} ms)", "excerpts/s",
                        f"mmnpz.Loader, same batches, batch.sum() (first batch after "
                        f"{first['first_batch_ms']['Loader']:.0f} ms)",
                        [whole(x["torch"]) for x in r], [whole(x["loader"]) for x in r],
                        (">=", 0.8), **first))
        rows.append(row(("torch", "Loader"),
                        f"mmnpz.torch.loader(num_workers={workers}) after the first batch "
                        "(steady state)", "excerpts/s", "mmnpz.Loader after its first batch",
                        [steady(x["torch"]) for x in r], [steady(x["loader"]) for x in r],
                        (">=", 0.8), **first))
        notes.append(f"torch/Loader: the same {count} batches (indices and starts compared), "
                     f"each in a fresh process after the archive was read into the page "
                     f"cache; whole run: construction to the last batch; steady state: "
                     f"from the first batch to the last; torch intra-op threads in the "
                     f"consumer: {r[0]['torch'].get('torch_threads', '?')}")
        if all("cpu_s" in x["torch"] and "cpu_s" in x["loader"] for x in r):
            notes.append(
                "torch/Loader CPU seconds (user + system, from construction to the last "
                "batch; the torch loader's workers' until they exited) in each run: "
                + ", ".join(f"{x['torch']['cpu_s']:.2f} against {x['loader']['cpu_s']:.2f}"
                            for x in r))
        if all("plain" in x for x in r):
            plain = [whole(x["plain"]) for x in r]
            workers = r[0]["torch"].get("workers", 2)
            notes.append(
                f"torch, what separate worker processes reach with no IPC: {workers} plain "
                f"processes at once, each gathering 1/{workers} of the same batches on 1 "
                f"thread and summing them (each opens the dataset and faults or reads in its "
                f"own mapping of the archive, where the Loader does it once): "
                f"{max(plain):,.0f} excerpts/s, "
                + ", ".join(f"{f / whole(x['loader']):.0%}" for f, x in zip(plain, r))
                + " of the Loader in each run; the torch loader reached "
                + ", ".join(f"{whole(x['torch']) / f:.0%}" for f, x in zip(plain, r))
                + " of it")
    if "open" in raw:
        r = raw["open"]
        files = r[0]["mmnpz"]["files"]
        rows.append(row(("mmnpz.load", "np.load"), f"mmnpz.load of a {files:,}-member archive",
                        "s", "np.load of the same archive", [x["mmnpz"]["seconds"] for x in r],
                        [x["numpy"]["seconds"] for x in r], (">=", 30)))
        if "with_files_s" in r[0]["mmnpz"]:
            both = min(x["mmnpz"]["with_files_s"] for x in r)
            np_both = min(x["numpy"]["with_files_s"] for x in r)
            notes.append(f"open: with the `files` list made too (mmnpz.load makes it when "
                         f"first asked for), mmnpz {both * 1e3:.1f} ms, np.load "
                         f"{np_both * 1e3:.1f} ms: {np_both / both:.1f}x")
    if "access" in raw:
        r = raw["access"]
        rows.append(row(("first", "repeat"),
                        "first reader[name] of a member (many-member archive)", "s",
                        "repeat reader[name] of the same members", [x["first_s"] for x in r],
                        [x["repeat_s"] for x in r], ("<=", 20)))
        notes.append(f"access: mean over {r[0]['accesses']:,} random members per run; the "
                     f"very first access of a process took "
                     f"{min(x['very_first_s'] for x in r) * 1e6:.0f} us (best run)")
        pages = [x["resident_before"] for x in r if "resident_before" in x]
        if pages:
            notes.append(f"access: pages of the many-member archive resident before each run's "
                         f"process: " + ", ".join(f"{a:,} of {b:,}" for a, b in pages))
        if "collections" in r[0]:
            # The garbage collections that ran inside the timed loops, after a gc.collect()
            # before the clock (the setup's young objects, its 1,000,000 names among them).
            def gcs(loop):
                return ", ".join(f"{n} ({seconds * 1e6:,.0f} us)"
                                 for n, seconds in (x["collections"][loop] for x in r))
            notes.append(f"access: garbage collections inside the timed loops, after one before "
                         f"the clock, in each run (count, time in all): first accesses "
                         f"{gcs('first')}; repeats {gcs('repeat')}")
        if "c_pread" in r[0]:
            # What no first access can skip on this host, each beside the repeat.
            read = min(x["c_pread"]["seconds"] / x["c_pread"]["pieces"] for x in r)
            view = min(x["numpy_view_s"] for x in r)
            repeat = min(x["repeat_s"] for x in r)
            notes.append(f"access, what no first access can skip (best runs): one C pread of "
                         f"{HEADER_READ} bytes at each member's local header (1 thread, same "
                         f"page cache) {read * 1e6:.2f} us ({read / repeat:.1f}x the repeat); "
                         f"numpy making and keeping a new memmap view of each member (from "
                         f"Python) {view * 1e6:.2f} us ({view / repeat:.1f}x); both "
                         f"{(read + view) / repeat:.1f}x")
    if "fresh" in raw and "memcpy" in cases and "memcpy" in raw["fresh"][0]:
        r = raw["fresh"]
        rows.append(row(("gather", "C memcpy"), "warm gather", "excerpts/s",
                        "C memcpy of the same pieces from DRAM, same threads",
                        [x["excerpts"] / x["warm_s"] for x in r],
                        [x["memcpy"]["pieces"] / x["memcpy"]["seconds"] for x in r],
                        (">=", 0.8)))
        notes.append(f"warm gather: the same C memcpy from a populated shared mapping of the "
                     f"archive (the page cache as the source): "
                     f"{max(x['mapped']['pieces'] / x['mapped']['seconds'] for x in r):,.0f} "
                     f"excerpts/s")
    return rows


def show(value, unit):
    if unit == "s":
        return f"{value * 1e3:,.3f} ms" if value >= 1e-3 else f"{value * 1e6:,.2f} us"
    return f"{value:,.0f} {unit}"


def print_table(rows, command, notes, leaks, elapsed):
    print(f"\n`{command}`\n")
    print("| case | figure | compared with | figure | ratio | target | met | spread | "
          "ratio in each run |")
    print("|---|---:|---|---:|---:|---:|:-:|---:|---:|")
    for r in rows:
        fmt = "{:.1f}x" if r["unit"] == "s" else "{:.0%}"
        ratio = fmt.format(r["ratio"])
        each = " ".join(fmt.format(x) for x in r["run_ratios"])
        print(f"| {r['case']} | {show(r['figure'], r['unit'])} | {r['comparison']} | "
              f"{show(r['comparison_figure'], r['unit'])} | {ratio} | {r['target']} | "
              f"{'met' if r['met'] else 'NOT met'} | {r['spread']:.0%} | {each} |")
    print("\nBest of the runs; spread: the largest (worst - best) / best of the two figures."
          " Ratios: case / comparison (open: np.load time / mmnpz time; access: first /"
          " repeat time).")
    for n in notes:
        print(f"- {n}")
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"- WARNING: the machine is busy (load average {load:.1f} on {os.cpu_count()} "
              f"cores): other processes share the CPU, see the spread and each run's ratio")
    print(f"- left behind in /dev/shm or in the cases' TMPDIR: "
          f"{', '.join(leaks) if leaks else 'nothing'}; load average at the end "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; whole run {elapsed:.0f} s")


def plot(rows, path, command):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(rows))
    lines = -(-len(rows) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4 * columns, 4.1 * lines + 0.6),
                             squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, r in zip(axes.flat, rows):
        if r["unit"] == "s":  # times: shown as operations per second, higher is better
            what = "opens" if r["bars"][0].endswith("load") else "accesses"
            values, ylabel = [1 / r["figure"], 1 / r["comparison_figure"]], f"{what} per second"
        else:
            values, ylabel = [r["figure"], r["comparison_figure"]], r["unit"]
        bars = ax.bar(list(r["bars"]), values,
                      color=["tab:green" if r["met"] else "tab:red", "tab:gray"])
        ax.bar_label(bars, labels=[f"{v:,.3g}" if v < 100 else f"{v:,.0f}" for v in values],
                     fontsize=7)
        ax.set_ylabel(ylabel)
        ratio = f"{r['ratio']:.1f}x" if r["unit"] == "s" else f"{r['ratio']:.0%}"
        ax.set_title(f"{wrap(r['case'])}\n{ratio} (target {r['target']})", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"mmnpz data path at first touch (green: target met, red: not met)\n"
                 f"{wrap(command, 110)}", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def wrap(text, width=34):
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join(lines + [line])


if __name__ == "__main__":
    main()
