"""What the package's modules share, importing nothing else of mmnpz: the compiled core, numpy
dtypes of .npy descrs, path arguments, frame rates and a distributed run's rank."""

import fractions
import os
import sys

from . import _mmnpz

#: The numpy dtype of a .npy descr literal, made once per process (the core keeps the one
#: cache, which the reader's views use too).
dtype = _mmnpz.dtype

_ONE = fractions.Fraction(1)


def path(file):
    """A path argument as str; TypeError for anything but str, bytes and os.PathLike."""
    if not isinstance(file, (str, bytes, os.PathLike)):
        raise TypeError(f"file must be a str or os.PathLike, not {type(file).__name__}")
    return os.fsdecode(os.fspath(file))


def rate(value):
    """A field's frame rate as a positive Fraction (denominators up to 2**20)."""
    if value == 1:
        return _ONE  # the common case, without building a Fraction
    r = fractions.Fraction(value).limit_denominator(1 << 20)
    if r <= 0:
        raise ValueError(f"a field's rate must be positive, not {value!r}")
    return r


def rank_and_world(rank, world_size):
    """(rank, world_size), each None taken from torch.distributed when torch is imported and
    its process group initialised, else 0 and 1."""
    if rank is not None and world_size is not None:
        return rank, world_size
    auto_rank, auto_world = 0, 1
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        auto_rank, auto_world = dist.get_rank(), dist.get_world_size()
    return (auto_rank if rank is None else rank,
            auto_world if world_size is None else world_size)
