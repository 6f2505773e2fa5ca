"""What the package's modules share, importing nothing else of mmnpz: the compiled core, numpy
dtypes of .npy descrs and path arguments."""

import os

from . import _mmnpz

#: The numpy dtype of a .npy descr literal, made once per process (the core keeps the one
#: cache, which the reader's views use too).
dtype = _mmnpz.dtype


def path(file):
    """A path argument as str; TypeError for anything but str, bytes and os.PathLike."""
    if not isinstance(file, (str, bytes, os.PathLike)):
        raise TypeError(f"file must be a str or os.PathLike, not {type(file).__name__}")
    return os.fsdecode(os.fspath(file))
