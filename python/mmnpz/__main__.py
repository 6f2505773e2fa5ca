"""python3 -m mmnpz: the mmnpz command line (ls, info, verify, align, merge, extract, recover)."""
import sys

from . import _mmnpz

if __name__ == "__main__":
    sys.stdout.flush()
    sys.exit(_mmnpz.main(["mmnpz"] + sys.argv[1:]))
