"""The mmnpz command line: ls, info, verify, align, merge, extract, recover, and pack.

`python3 -m mmnpz ARGS...` and the `mmnpz` command that pip installs (an entry point to main())
run the same C++ code as the `mmnpz` executable of the CMake build, linked into the extension;
`pack` (audio and arrays into sharded archives, mmnpz.pack) is written in Python and exists
only here.
"""
import os
import sys
from typing import List, Optional

from . import _mmnpz


def main(argv: Optional[List[str]] = None) -> int:
    """Runs `mmnpz ARGS...` with argv (default: sys.argv[1:]); returns the exit status."""
    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if args[:1] == ["pack"]:
        from . import pack

        return pack.main(args[1:])
    if args[:1] == ["help"] and args[1:2] == ["pack"]:
        from . import pack

        return pack.main(["--help"])
    sys.stdout.flush()  # what Python printed before comes before what the command prints
    sys.stderr.flush()
    # As bytes: an argument that is no UTF-8 (a file name, surrogate-escaped in sys.argv) goes
    # to the command as the bytes the shell gave.
    status = _mmnpz.main([os.fsencode(a) for a in ["mmnpz"] + args])
    if args in ([], ["help"], ["-h"], ["--help"]):
        print(PACK_HELP, file=sys.stdout if status == 0 else sys.stderr)
    return status


PACK_HELP = ("\nand, from the Python package:\n"
             "  pack OUT.npz INPUT...   .npy, .npz and audio files into sharded aligned archives\n"
             "                          (mmnpz pack --help)")


if __name__ == "__main__":
    sys.exit(main())
