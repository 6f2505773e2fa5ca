"""What the package's modules share, importing nothing else of mmnpz: the compiled core, numpy
dtypes of .npy descrs, path and member name arguments, frame rates, a distributed run's rank
and the place a loader's saved state resumes at."""

import collections.abc
import fractions
import math
import operator
import os
import sys
import zlib

import numpy as np

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


def member_name(name):
    """A member name argument, checked: TypeError for anything but str, ValueError for a str
    that UTF-8 cannot encode (a lone surrogate, as os.fsdecode makes of a name's bytes that
    are not UTF-8), since member names are stored in UTF-8."""
    if not isinstance(name, str):
        raise TypeError(f"member names must be str, not {type(name).__name__}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"member name {name!r} is no text UTF-8 can store: it holds the lone "
                         f"surrogate {name[e.start]!r} at {e.start}") from None
    return name


def byte_buffer(data, name):
    """``data`` for a member written as bytes (``name``'s): ``bytes`` as they are, any other
    C-contiguous buffer as a flat memoryview of its bytes; TypeError for a str (text has no
    bytes until encoded) or an object with no buffer, ValueError for a strided buffer."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        raise TypeError(f"member {name!r}: data must be bytes or a buffer, not str (encode the "
                        f"text: text.encode())")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"member {name!r}: data must be bytes or a buffer, not "
                        f"{type(data).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"member {name!r}: the buffer's bytes must be contiguous (C order); "
                         f"copy it first, bytes(...) or numpy.ascontiguousarray(...)")
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def rate(value):
    """A field's frame rate as a positive Fraction (denominators up to 2**20)."""
    if value == 1:
        return _ONE  # the common case, without building a Fraction
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a field's rate must be a positive finite number, not {value!r}")
    try:
        r = fractions.Fraction(value).limit_denominator(1 << 20)
    except (TypeError, ValueError) as e:  # Fraction's words name no rate
        raise type(e)(f"a field's rate must be a number or a fraction such as '1/2', not "
                      f"{value!r}") from None
    if r <= 0:
        raise ValueError(f"a field's rate must be positive, not {value!r}")
    if r.numerator >= 1 << 64:  # the C++ core takes 64-bit numerators
        raise ValueError(f"a field's rate {value!r} is too large (2^64 or more)")
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


def integer(value, what):
    """``value`` as a Python int when it is an integer (a bool or a numpy integer too, as numpy
    takes them for sizes); TypeError naming ``what`` for a float, a string or anything else
    that int() would have truncated or parsed."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None


def alignment(value, path):
    """``value`` (an integer, see :func:`integer`) passed on as the C++ writers' alignment, which
    they refuse unless it is a power of two from 1 to 65536: a value no C++ size_t holds is
    refused here in the same words."""
    value = integer(value, "align")
    if not 0 <= value <= 1 << 16:
        raise ValueError(f"{path}: alignment {value} is not a power of two from 1 to 65536")
    return value


#: The options a loader's state_dict() holds beside its place, which must agree on resume
#: (a state saved before a key was added lacks it, and is not checked for it).
RESUME_KEYS = ("seed", "kind", "batch_size", "rank", "world_size", "length", "hop",
               "num_samples", "shuffle_windows", "random_crop", "drop_remainder",
               "pad_short_items", "drop_last", "items", "lengths_crc32")


def lengths_crc32(lengths):
    """A CRC-32 of items' lengths (as little-endian int64): what tells other items apart in a
    loader's saved state and a dataset's pickle."""
    return zlib.crc32(np.ascontiguousarray(lengths, "<i8").tobytes())


def resume_options(sampler, drop_last):
    """The state_dict() keys after those of the Loader's first versions: everything else that
    decides which samples a batch holds (the sampler's options, the items it draws from,
    drop_last). A Loader resumed with another sampler length or other items yielded other
    batches in silence."""
    o = sampler._s.options
    crc = getattr(sampler, "_lengths_crc32", None)
    if crc is None:  # once per sampler (8 bytes per item)
        crc = sampler._lengths_crc32 = lengths_crc32(sampler._lengths)
    return {"length": o.length, "hop": o.hop, "num_samples": o.num_samples,
            "shuffle_windows": o.shuffle_windows, "random_crop": o.random_crop,
            "drop_remainder": o.drop_remainder,
            # What the other kinds draw does not depend on it.
            "pad_short_items": o.pad_short_items and o.kind in ("sliding", "weighted"),
            "drop_last": bool(drop_last), "items": len(sampler._lengths), "lengths_crc32": crc}


def saved_place(state, mine):
    """(epoch, position) of a loader's saved ``state`` (a mapping made by state_dict()), after
    checking that its RESUME_KEYS agree with ``mine`` (this loader's state_dict()): TypeError
    for what is no such mapping or holds no integers, ValueError for a key missing, an option
    that differs or a negative epoch or position. The caller checks the position's range."""
    if not isinstance(state, collections.abc.Mapping):
        raise TypeError(f"state must be a dict made by state_dict(), not {type(state).__name__}")
    for key in RESUME_KEYS:
        if state.get(key, mine[key]) != mine[key]:
            if key == "lengths_crc32":
                raise ValueError("the saved state was made for other items (of other lengths; "
                                 f"as many, {mine['items']})")
            raise ValueError(f"the saved state has {key}={state[key]!r}, this loader "
                             f"{mine[key]!r}")
    place = []
    for key in ("epoch", "position"):
        if key not in state:
            raise ValueError(f"the saved state has no {key!r}")
        place.append(integer(state[key], f"the saved state's {key}"))
        if place[-1] < 0:
            raise ValueError(f"the saved state's {key} must not be negative, not {place[-1]}")
        if place[-1] >= 1 << 64:  # refused now, not at the first batch
            raise ValueError(f"the saved state's {key} {place[-1]} is too large for a 64-bit "
                             f"integer")
    return tuple(place)
