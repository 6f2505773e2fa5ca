"""The mmnpz command line: ls, info, verify, align, merge, extract, recover.

`python3 -m mmnpz ARGS...` and the `mmnpz` command that pip installs (an entry point to main())
run the same C++ code as the `mmnpz` executable of the CMake build, linked into the extension.
"""
import sys
from typing import List, Optional

from . import _mmnpz


def main(argv: Optional[List[str]] = None) -> int:
    """Runs `mmnpz ARGS...` with argv (default: sys.argv[1:]); returns the exit status."""
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    sys.stdout.flush()  # what Python printed before comes before what the command prints
    sys.stderr.flush()
    return _mmnpz.main(["mmnpz"] + args)


if __name__ == "__main__":
    sys.exit(main())
