"""Python baselines for bench_core: zipfile and numpy timed in-process.

bench_core runs this script with the interpreter CMake found (Python_EXECUTABLE) and reads
its standard output: one `key value` line per result, times in seconds. Only the work
itself is timed, never the interpreter's start-up or the imports.

    python3 baselines.py versions
    python3 baselines.py open PATH REPEAT
    python3 baselines.py access PATH PASSES
"""

import sys
import time
import zipfile


def best_of(repeat, fn):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def versions():
    import numpy as np
    import zlib

    print("python", sys.version.split()[0])
    print("numpy", np.__version__)
    print("zlib", zlib.ZLIB_RUNTIME_VERSION)


def open_times(path, repeat):
    """Best time to open the archive and list its members, page cache warm."""
    import numpy as np

    def zipfile_open():
        with zipfile.ZipFile(path) as z:
            z.namelist()
            return time.perf_counter()

    def np_load_open():
        with np.load(path) as f:
            f.files  # computed by NpzFile itself; read here as a user would
            return time.perf_counter()

    # Closing is left out of both timings, as it is for mmnpz.
    def timed(fn):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            t1 = fn()
            best = min(best, t1 - t0)
        return best

    zipfile_open()  # warms the page cache and the imports
    print("zipfile_open", timed(zipfile_open))
    print("np_load_open", timed(np_load_open))


def access_times(path, passes):
    """Per-member time of f[key] over every member: first pass, then the best later pass.

    NpzFile caches nothing, so every pass re-reads each member's local header, .npy header
    and data through zipfile.
    """
    import numpy as np

    with np.load(path) as f:
        keys = f.files

        def read_all():
            for k in keys:
                f[k]

        first = best_of(1, read_all)
        repeat = best_of(passes, read_all)
    print("members", len(keys))
    print("np_load_first", first / len(keys))
    print("np_load_repeat", repeat / len(keys))


def main(argv):
    if argv[1:2] == ["versions"]:
        versions()
    elif len(argv) == 4 and argv[1] == "open":
        open_times(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "access":
        access_times(argv[2], int(argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
