"""Training-style access to many arrays: datasets over sharded archives, batched excerpt
gather in C++, deterministic samplers and a prefetching loader.

>>> ds = mmnpz.Dataset("train@16.npz")            # train-00000-of-00016.npz ...
>>> sampler = mmnpz.Sampler(ds, "weighted", length=100, seed=1)
>>> for batch in mmnpz.Loader(ds, sampler, batch_size=64, epochs=1):
...     batch.data                                 # (64, 100, *trailing), one contiguous array

Every excerpt of every batch depends only on (seed, epoch, position): a loader resumes
exactly from ``state_dict()``, and ranks of a distributed run take disjoint parts of each
epoch. The gather runs on a persistent C++ thread pool without the GIL and creates no
Python object per item.
"""

import collections
import errno
import functools
import mmap
import numbers
import operator
import os
import re
import resource
import warnings
import weakref

import numpy as np

from . import _core, _mmnpz
from ._npz import NpzReader

__all__ = ["Batch", "Dataset", "Loader", "Sampler", "concat", "gather_fields"]


def _specs(source, function):
    if isinstance(source, (str, bytes, os.PathLike)):
        source = [source]
    specs = []
    for s in source:
        if not isinstance(s, (str, bytes, os.PathLike)):
            raise TypeError(f"{function}: archives must be given as str or os.PathLike, not "
                            f"{type(s).__name__}")
        specs.append(os.fsdecode(os.fspath(s)))
    if not specs:
        raise ValueError(f"{function}: no archives given")
    return specs


def _too_many_open_files(error):
    """The OSError (EMFILE) of a Dataset's opening, saying why and what to do about it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hint = (f"a Dataset keeps each of its archives open, and this process may have {soft} "
            f"files open (RLIMIT_NOFILE, `ulimit -n`)")
    if hard == resource.RLIM_INFINITY or hard > soft:
        infinite = hard == resource.RLIM_INFINITY
        top = "resource.RLIM_INFINITY" if infinite else str(hard)
        hint += (f": raise it with resource.setrlimit(resource.RLIMIT_NOFILE, ({top}, {top}))"
                 f" or `ulimit -n {'unlimited' if infinite else top}`, or")
    else:
        hint += ", its hard limit too: have that raised, or"
    hint += " join archives with `mmnpz merge`"
    return OSError(error.errno, f"{error.strerror}: {hint}", error.filename)


def _layout(descr, trailing):
    return _core.dtype(descr), tuple(trailing)


class Dataset:
    """Archives opened as one sequence of array items with global indices 0..len-1.

    ``source`` is a path, a folder (every ``*.npz`` inside it, sorted), a shell pattern
    (``"train-*.npz"``, sorted), a shard spec (``"train@16.npz"`` for
    ``train-00000-of-00016.npz`` ... ``train-00015-of-00016.npz``), a list of these, or a
    Dataset (the same items, with its ``threads`` and ``io`` unless others are given; not
    with ``select`` or ``order``). Items are numbered archive after archive
    (``order="concatenate"``) or taking one from each archive in turn (``order="interleave"``).
    ``select`` is a shell pattern on member names (without ".npy") choosing the items; every
    chosen member must be an array with at least one axis. Without ``select``, every member
    whose name ends in ".npy" is an item and other members (such as the ``<name>.json``
    sidecars of packed audio) are left out. ``min_length`` leaves out items with fewer rows:
    the rest are numbered 0..len-1 in order, and ``names``, ``index`` and ``lengths`` agree
    with that numbering. Opening decodes every chosen member's .npy header (in parallel,
    without the GIL) and nothing else.

    ``ds[a:b]``, ``ds[[i, j, k]]``, ``ds[mask]`` and ``ds.subset(...)`` are views: Datasets
    of some of the items, in the order given, sharing the open archives; ``split`` and
    :func:`concat` make views too. A view works wherever a Dataset does. Pickling sends the
    archive names (and a view's item numbers): the other process opens the archives itself.
    ``io`` ("auto", "read" or "map") is how gather copies stored members by default (see
    Dataset.gather); ``ds[i]`` is a memory map whatever it says.
    """

    def __init__(self, source, *, select=None, order="concatenate", threads=0, min_length=0,
                 io="auto"):
        if isinstance(source, Dataset):
            if select is not None or order != "concatenate":
                raise ValueError("Dataset: select and order choose items from archives; a "
                                 "Dataset given as the source keeps its items (give its paths "
                                 "to choose others)")
            if threads == 0 and io == "auto":  # the source's own
                self._adopt(source, source._map)
            else:  # its archives opened again with these
                o = source._options
                self._adopt(_reopen_dataset(source._specs, o.select, o.order, threads,
                                            source._map, io), source._map)
        else:
            self._specs = _specs(source, "Dataset")
            try:
                self._options = _mmnpz.DatasetOptions(
                    select=select or "", order=order,
                    threads=_core.integer(threads, "Dataset: threads"), io=io)
                self._d = _mmnpz.Dataset(self._specs, self._options)
            except (ValueError, IndexError, OverflowError) as e:
                raise _in_user_words(e, "Dataset") from None
            except OSError as e:
                if e.errno != errno.EMFILE:
                    raise
                raise _too_many_open_files(e) from None
            self._base = _Base(self._d)
            self._map = None
            self._cache = {}
        min_length = _core.integer(min_length, "Dataset: min_length")
        if min_length < 0:
            raise ValueError(f"Dataset: min_length must not be negative, not {min_length}")
        if min_length > 0:
            self._adopt(self, self._to_base(np.flatnonzero(self.lengths >= min_length)))

    def _adopt(self, other, mapping):
        """Becomes a view of ``other``'s archives with item k = base item mapping[k]."""
        self._specs, self._options, self._d, self._base = (
            other._specs, other._options, other._d, other._base)
        if mapping is not None:
            mapping = np.ascontiguousarray(mapping, dtype=np.int64)
            mapping.flags.writeable = False
        self._map = mapping
        self._cache = {}

    def _view(self, mapping):
        view = Dataset.__new__(Dataset)
        view._adopt(self, mapping)
        return view

    def _to_base(self, indices):
        """Base-dataset indices of this dataset's ``indices`` (int64 array, checked)."""
        if self._map is None:
            return indices
        n = len(self._map)
        if len(indices) and (indices.min() < 0 or indices.max() >= n):
            bad = indices[(indices < 0) | (indices >= n)][0]
            raise IndexError(f"index {bad} is out of range for a dataset of {n} items")
        return self._map[indices]

    def __reduce__(self):
        o = self._options
        return (_reopen_dataset, (self._specs, o.select, o.order, o.threads, self._map, o.io,
                                  _archives_of(self)))

    def __len__(self):
        return len(self._d) if self._map is None else len(self._map)

    def __repr__(self):
        kind = "Dataset" if self._map is None else "Dataset view"
        return f"<mmnpz.{kind} of {len(self)} items in {len(self.paths)} archives>"

    @property
    def paths(self):
        """The archives, in the order their items are numbered (a view: of its base)."""
        return tuple(self._d.paths)

    @property
    def lengths(self):
        """Each item's length along axis 0 (read-only int64 array)."""
        lengths = self._cache.get("lengths")
        if lengths is None:
            lengths = self._base.lengths
            if self._map is not None:
                lengths = lengths[self._map]
                lengths.flags.writeable = False
            self._cache["lengths"] = lengths
        return lengths

    @property
    def names(self):
        """Each item's member name without ".npy" (read-only numpy str array)."""
        names = self._cache.get("names")
        if names is None:
            names = self._base.names
            if self._map is not None:
                names = names[self._map]
                names.flags.writeable = False
            self._cache["names"] = names
        return names

    def _layout_table(self):
        """(layouts, layout_ids) of this dataset's items, only the layouts they have."""
        table = self._cache.get("layouts")
        if table is None:
            layouts, ids = self._base.layouts, self._base.layout_ids
            if self._map is not None:
                ids = ids[self._map]
                used = np.unique(ids)
                renumber = np.zeros(len(layouts), np.uint32)
                renumber[used] = np.arange(len(used), dtype=np.uint32)
                layouts, ids = [layouts[u] for u in used], renumber[ids]
            table = self._cache["layouts"] = (layouts, ids)
        return table

    @property
    def layouts(self):
        """The distinct (dtype, trailing shape) pairs among the items."""
        return list(self._layout_table()[0])

    @property
    def layout_ids(self):
        """Each item's index into ``layouts`` (uint32 array)."""
        return self._layout_table()[1].copy()

    @property
    def dtypes(self):
        """Each item's dtype (object array of numpy dtypes)."""
        table = np.empty(len(self.layouts), dtype=object)
        table[:] = [d for d, _ in self.layouts]
        return table[self.layout_ids]

    @property
    def trailing_shapes(self):
        """Each item's shape after axis 0 as an int64 array (len, k), where k is the largest
        number of trailing axes; shorter shapes are padded with -1."""
        k = max((len(t) for _, t in self.layouts), default=0)
        table = np.full((len(self.layouts), k), -1, dtype=np.int64)
        for row, (_, t) in enumerate(self.layouts):
            table[row, : len(t)] = t
        return table[self.layout_ids]

    @property
    def dtype(self):
        """The dtype every item has (ValueError when they differ)."""
        return self._common()[0]

    @property
    def trailing_shape(self):
        """The trailing shape every item has (ValueError when they differ)."""
        return self._common()[1]

    def _common(self):
        layouts = self.layouts
        if len(layouts) != 1:
            raise ValueError(f"the items have {len(layouts)} different (dtype, trailing shape)s")
        return layouts[0]

    def name(self, index):
        """The member name of item ``index`` without ".npy"."""
        return self._d.name(self._base_index(index))

    def index(self, name):
        """The index of the item named ``name`` (the first one when archives share it)."""
        if not isinstance(name, str):
            raise TypeError(f"index: a name must be a str, not {type(name).__name__}")
        if self._map is None:
            try:
                found = self._d.find(name)
            except TypeError:  # a str that is no UTF-8 (a lone surrogate): no member has it
                found = None
        else:
            first = self._cache.get("first")
            if first is None:
                first = self._cache["first"] = {}
                for k, n in enumerate(self.names.tolist()):
                    first.setdefault(n, k)
            found = first.get(name)
            if found is None and name.endswith(".npy"):
                found = first.get(name[:-4])
        if found is None:
            raise KeyError(f"no item named {name!r}")
        return found

    def locate(self, index):
        """(archive path, member name) of item ``index``."""
        return tuple(self._d.locate(self._base_index(index)))

    def _reader(self, path, index):
        """The NpzReader of the archive at ``path`` that holds base item ``index``: the file the
        dataset opened (opening the path again read another one once a new archive was
        renamed over it, whose items disagreed with the lengths and gathers)."""
        readers = self._base.readers
        reader = readers.get(path)
        if reader is None:
            reader = readers[path] = NpzReader(_mmnpz.Reader.of_dataset_item(self._d, index))
        return reader

    def _check(self, index):
        given = operator.index(index)
        index = given + len(self) if given < 0 else given
        if not 0 <= index < len(self):
            raise IndexError(f"index {given} is out of range for a dataset of {len(self)} items")
        return index

    def _base_index(self, index):
        index = self._check(index)
        return index if self._map is None else int(self._map[index])

    def __getitem__(self, key):
        """Item ``key`` (an index or a name) as its reader returns it: a read-only memmap.
        A slice, a list or array of indices, or a boolean mask gives a view (see subset)."""
        if isinstance(key, str):
            index = self._base_index(self.index(key))
        elif isinstance(key, slice):
            return self._view(self._to_base(np.arange(len(self), dtype=np.int64)[key]))
        elif isinstance(key, (list, tuple)) or (isinstance(key, np.ndarray) and key.ndim):
            return self.subset(key)
        else:
            index = self._base_index(key)
        path, member = self._d.locate(index)
        return self._reader(path, index)[member]

    def subset(self, items):
        """A view of the items ``items`` picks: a boolean mask of len(self) entries, or
        indices (negative ones count from the end), in the order given."""
        given = np.asarray(items)
        if given.dtype == bool:
            if given.shape != (len(self),):
                raise ValueError(f"subset: a mask must have one entry per item ({len(self)}), "
                                 f"not shape {given.shape}")
            indices = np.flatnonzero(given)
        else:
            if given.size == 0:
                given = given.astype(np.int64)
            given, big = _beyond_int64(given)
            if big is not None:
                raise IndexError(f"subset: index {big} is out of range for a dataset of "
                                 f"{len(self)} items")
            if given.dtype.kind not in "iu":
                raise TypeError(f"subset: items must be integers or booleans, not {given.dtype}")
            if given.ndim != 1:
                raise ValueError("subset: items must be one-dimensional")
            indices = given.astype(np.int64)
            n = len(self)
            bad = (indices < -n) | (indices >= n)
            if bad.any():
                raise IndexError(f"subset: index {indices[bad][0]} is out of range for a "
                                 f"dataset of {n} items")
            indices = np.where(indices < 0, indices + n, indices)
        return self._view(self._to_base(indices))

    def split(self, fractions, *, seed=0):
        """Views of disjoint parts of the items, part k holding about fractions[k] of them
        (the fractions must be positive and sum to at most 1). An item's part depends only on
        ``seed`` and its member name (a stable hash), so an item stays in its part when
        items are added or removed. Items of the same name are in the same part."""
        if isinstance(fractions, (numbers.Number, str, bytes)):
            raise TypeError(f"split: fractions must be a sequence of numbers (such as [0.8, "
                            f"0.1]), not {type(fractions).__name__}")
        fractions = [float(f) for f in fractions]
        # not (f > 0) refuses NaN too, which min() and sum() would let through.
        if not fractions or not all(f > 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
            raise ValueError(f"split: fractions must be positive and sum to at most 1, not "
                             f"{fractions}")
        position = _name_hash(self.names, _core.integer(seed, "split: seed"))
        bounds = np.cumsum(fractions)
        bounds[-1] = min(bounds[-1], 1.0) if abs(bounds[-1] - 1) > 1e-9 else 1.0
        part = np.searchsorted(bounds, position, side="right")
        return [self.subset(part == k) for k in range(len(fractions))]

    def gather(self, indices, starts, length, *, out=None, pad="none", fill=0, threads=0,
               valid=False, io="auto"):
        """Excerpts rows [starts[k], starts[k] + length) of items indices[k], stacked in one
        C-contiguous array ``(len(indices), length, *trailing)``, new or ``out``.

        ``pad`` says what happens where an excerpt runs past its item's end: "none" refuses
        (ValueError), "fill" fills with ``fill``, "wrap" continues from the item's first row.
        With ``valid=True`` also returns how many rows of each excerpt came from the item.
        Every request is checked before anything is copied; the copy runs in C++ on
        ``threads`` threads (0: every core) without the GIL. Items must share dtype and
        trailing shape (TypeError / ValueError naming the first that does not).

        ``io`` says how stored members' bytes are copied: "read" with positional reads from
        the file (no page faults; pieces not in the page cache are read ahead together),
        "map" through the memory mapping, "auto" (default) as the Dataset's ``io`` says,
        whose "auto" copies through the mapping what this process has faulted in, reads
        pieces not in the page cache, and reads other parts of the file until reading them
        again would cost more than faulting them in (by the costs measured so far), then
        faults them in; sooner, at first touch, once this process's gathers come back to
        the parts they touched often enough to repay the faults. An archive truncated after
        it was opened raises mmnpz.FormatError naming the member (a truncation inside the
        file's last page can give zeros through the mapping: use "read" for files that may
        shrink).
        """
        # The one-field case without gather_fields' generality: this runs once per batch.
        try:
            length = _core.integer(length, "length")
            options = _excerpt_options(length, pad, _core.integer(threads, "threads"), io)
            indices = self._to_base(_int64_vector(indices, "indices", IndexError))
            starts = _int64_vector(starts, "starts")
            dtype, trailing = self._batch_layout(indices)
            out = _out_array(out, (len(indices), length) + trailing, dtype)
            rows = np.empty(len(indices), np.int64) if valid else None
            fill_bytes = _fill_bytes(pad, fill, dtype)
            if rows is None and not fill_bytes:  # keywords cost time in pybind11
                field = _mmnpz.GatherField(self._d, indices, out)
            else:
                field = _mmnpz.GatherField(self._d, indices, out, valid=rows, fill=fill_bytes)
            _mmnpz.gather([field], starts, options)
        except _USER_ERRORS as e:
            raise _in_user_words(e, "Dataset.gather", self.paths) from None
        return (out, rows) if valid else out

    def _batch_layout(self, base_indices):
        """The (dtype, trailing) of the items at ``base_indices`` (of the base dataset)."""
        layouts = self._layout_table()[0]
        if len(layouts) == 1:
            return layouts[0]  # every item has it (the C++ gather checks each anyway)
        if len(base_indices) == 0:
            return np.dtype(np.float32), ()
        return _layout(*self._d.batch_layout(base_indices))


class _Base:
    """What a dataset and its views share: the C++ dataset, its per-item tables (made on
    first use) and the readers of __getitem__."""

    def __init__(self, d):
        self._d = d
        self.readers = {}
        self._lengths = self._names = self._layouts = self._layout_ids = None

    @property
    def lengths(self):
        if self._lengths is None:
            lengths = self._d.lengths().astype(np.int64)
            lengths.flags.writeable = False
            self._lengths = lengths
        return self._lengths

    @property
    def names(self):
        if self._names is None:
            names = np.array(self._d.names(), dtype=str)
            names.flags.writeable = False
            self._names = names
        return self._names

    @property
    def layouts(self):
        if self._layouts is None:
            self._layouts = [_layout(d, t) for d, t in self._d.layouts()]
        return self._layouts

    @property
    def layout_ids(self):
        if self._layout_ids is None:
            ids = self._d.layout_ids()
            ids.flags.writeable = False
            self._layout_ids = ids
        return self._layout_ids


def _name_hash(names, seed):
    """A stable position in [0, 1) for each name: its BLAKE2b hash keyed by ``seed``
    (hashlib.blake2b(name, digest_size=8, key=seed as 16 bytes), as a fraction of 2**64;
    computed in C++)."""
    if not -(1 << 127) <= seed < 1 << 127:
        raise ValueError(f"split: seed {seed} does not fit in 128 bits (a signed integer)")
    key = seed.to_bytes(16, "little", signed=True)
    names = np.ascontiguousarray(names)
    if names.dtype.kind != "U":
        names = names.astype(str)
    return _mmnpz._name_positions(names.reshape(-1), key)


def concat(datasets):
    """One dataset of the items of ``datasets``, one after the other (a view). Datasets that
    are views of the same archives share them; others are opened together (they must agree
    on ``select`` and ``io``; the first one's ``threads`` is kept)."""
    datasets = list(datasets)
    if not datasets:
        raise ValueError("concat: no datasets given")
    for ds in datasets:
        if not isinstance(ds, Dataset):
            raise TypeError(f"concat: datasets must be mmnpz.Dataset, not {type(ds).__name__}")
    first = datasets[0]
    whole = lambda ds: np.arange(len(ds), dtype=np.int64)  # noqa: E731
    if all(ds._d is first._d for ds in datasets):
        return first._view(np.concatenate([ds._to_base(whole(ds)) for ds in datasets]))
    selects = {ds._options.select for ds in datasets}
    if len(selects) != 1:
        raise ValueError(f"concat: the datasets select different members ({sorted(selects)})")
    specs = [p for ds in datasets for p in ds.paths]
    ios = {ds._options.io for ds in datasets}
    if len(ios) != 1:
        raise ValueError(f"concat: the datasets copy by different io ({sorted(ios)}); open them "
                         f"with the same io, or view them as Dataset(ds, io=...) first")
    merged = Dataset(specs, select=first._options.select or None,
                     threads=first._options.threads, io=first._options.io)
    # Each input's base items are numbered archive by archive in `merged`: find each item's
    # archive and its rank among the items of that archive.
    maps, offset = [], 0
    for ds in datasets:
        archive, rank = _archive_ranks(ds._d)
        counts = np.bincount(archive, minlength=len(ds.paths))
        starts = offset + np.concatenate([[0], np.cumsum(counts)[:-1]])
        maps.append((starts[archive] + rank)[ds._to_base(whole(ds))])
        offset += len(ds._d)
    return merged._view(np.concatenate(maps))


def _archive_ranks(d):
    """For each item of the C++ dataset ``d``: its archive and its rank among that archive's
    items (in member order)."""
    paths = list(d.paths)
    where = {p: k for k, p in enumerate(paths)}
    archive = np.array([where[d.locate(i)[0]] for i in range(len(d))], dtype=np.int64)
    rank = np.empty(len(d), np.int64)
    seen = np.zeros(len(paths), np.int64)
    for i, a in enumerate(archive.tolist()):  # items of an archive keep their member order
        rank[i] = seen[a]
        seen[a] += 1
    return archive, rank


_SUBJECT = re.compile(r"^<(?:sampler|gather|loader|dataset)>: ")


# The errors of a call's arguments, told in the user's words by _in_user_words.
_USER_ERRORS = (ValueError, IndexError, TypeError, OverflowError)


def _in_user_words(error, function, paths=()):
    """``error`` with its message told as the Python call ``function`` the user made, without
    the C++ subject ("<sampler>: ..."). Messages that begin with one of ``paths`` name the
    archive and member at fault and stay as they are. An OverflowError (an int that does not
    fit the C++ argument) becomes a ValueError."""
    if type(error) is OverflowError:
        return ValueError(f"{function}: a number given is too large for a 64-bit integer "
                          f"({error})")
    if type(error) not in (ValueError, IndexError, TypeError):
        return error  # FormatError, OSError, KeyError: they name the file or the item
    message = str(error)
    if message.startswith((function + ": ", function + "(")) or (
            paths and message.startswith(tuple(paths))):
        return error
    return type(error)(f"{function}: {_SUBJECT.sub('', message)}")


def _beyond_int64(given):
    """(given, the first of its values that no int64 holds, or None). An array of Python ints
    (numpy holds those past 2^64 as objects) comes back as int64 when they all fit; an
    unsigned array's values past 2^63 would wrap when cast (2^64 - 1 to -1)."""
    if given.size and given.dtype == object and all(
            isinstance(v, numbers.Integral) for v in given.flat):
        big = next((v for v in given.flat if not -(1 << 63) <= v < 1 << 63), None)
        return (given, big) if big is not None else (given.astype(np.int64), None)
    if given.size and given.dtype.kind == "u" and given.max() >= 1 << 63:
        return given, given.max()
    return given, None


def _int64_vector(values, what, too_large=ValueError):
    """``values`` as a contiguous one-dimensional int64 array: TypeError for what is not
    integers, ``too_large`` for a value no int64 holds (cast, it would have wrapped)."""
    if not (isinstance(values, np.ndarray) and values.dtype == np.int64):
        values, big = _beyond_int64(np.asarray(values))
        if big is not None:
            raise too_large(f"{what}: {big} does not fit in a 64-bit signed integer")
        if values.size and values.dtype.kind not in "iu":
            raise TypeError(f"{what} must be integers, not {values.dtype}")
    values = np.ascontiguousarray(values, dtype=np.int64)
    if values.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional")
    return values


@functools.lru_cache(maxsize=64)
def _excerpt_options(length, pad, threads, io="auto"):
    """An ExcerptOptions, shared by the calls that give the same arguments (none changes it)."""
    return _mmnpz.ExcerptOptions(length=length, pad=pad, threads=threads, io=io)


def _fill_bytes(pad, fill, dtype):
    """The fill element in `dtype` (empty: zeros, or no filling). ValueError for a value out of
    the dtype's range (300 in uint8, 1e300 in float32), which numpy would wrap or overflow with
    only a warning."""
    if pad != "fill" or (isinstance(fill, (int, float, np.number)) and fill == 0
                         and not np.signbit(fill)):
        return b""  # zeros, in every dtype (0 in a string dtype would be the character "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # numpy 1.x: an int out of bounds
        warnings.simplefilter("error", RuntimeWarning)  # an overflow in the cast
        try:
            element = np.array(fill, dtype=dtype).tobytes()
        except (DeprecationWarning, RuntimeWarning, OverflowError):
            raise ValueError(f"fill {fill!r} is out of the range of the data's dtype "
                             f"{np.dtype(dtype)}") from None
    return element


def _out_array(out, shape, dtype):
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if out.dtype != dtype or out.shape != shape:
        raise ValueError(f"out has dtype {out.dtype} and shape {out.shape}, the batch needs "
                         f"{dtype} and {shape}")
    return out


def _archives_of(ds):
    """What a pickle of ``ds`` checks where it is opened again: (device, inode, size) of each
    archive as ``ds`` opened it, and a CRC-32 of its base items' lengths."""
    return ds._d.identities(), _core.lengths_crc32(ds._base.lengths)


def _check_same_archives(ds, archives):
    """ValueError when an archive ``ds`` opened is not the file a pickled dataset had open
    (``archives``, from _archives_of), unless only its size changed (an append) and the items
    are still the same: a spawned worker read the archive renamed over the path since, whose
    items were others."""
    identities, lengths_crc32 = archives
    for path, was, now in zip(ds._d.paths, identities, ds._d.identities()):
        if was is None or now is None or tuple(was) == tuple(now):
            continue
        if tuple(was[:2]) != tuple(now[:2]):
            what = "another file was renamed over it"
        elif _core.lengths_crc32(ds._base.lengths) == lengths_crc32:
            continue  # appended to, the items the same
        else:
            what = f"it changed ({was[2]} bytes, now {now[2]}) and its items with it"
        raise ValueError(f"{path}: {what} since the pickled dataset opened it: its items here "
                         f"would not be the ones that dataset had")


def _reopen_dataset(specs, select, order, threads, mapping=None, io="auto", archives=None):
    """The dataset a pickle names, opened again (checked against ``archives``, when given)."""
    ds = Dataset(specs, select=select or None, order=order, threads=threads, io=io)
    if archives is not None:
        _check_same_archives(ds, archives)
    return ds if mapping is None else ds._view(mapping)


def gather_fields(fields, starts, length, *, outs=None, pad="none", fill=0, threads=0,
                  valid=False, io="auto"):
    """The same excerpt windows taken from several aligned datasets in one call.

    ``fields`` lists ``(dataset, indices, rate)``: field f's excerpt k is rows
    [floor(starts[k] * rate), + length * rate) of ``dataset`` item ``indices[k]``, so a label
    track at a quarter of the frame rate takes ``rate=1/4`` (``length * rate`` must be whole).
    Returns one array per field (and, with ``valid=True``, one valid-rows array per field).
    See Dataset.gather for the rest.
    """
    try:
        options = _excerpt_options(_core.integer(length, "length"), pad,
                                   _core.integer(threads, "threads"), io)
        if outs is None:
            out_for = _new_out
        elif len(outs) != len(fields):
            raise ValueError(f"there are {len(fields)} fields but {len(outs)} outs")
        else:
            def out_for(f, shape, dtype):
                return _out_array(outs[f], shape, dtype)
        specs, starts, results, valids = _prepare(fields, starts, options, out_for, fill, valid)
        _mmnpz.gather(specs, starts, options)  # everything checked, then copied
    except _USER_ERRORS as e:
        paths = [p for f in fields if _is_field(f) for p in f[0].paths]
        raise _in_user_words(e, "gather_fields", paths) from None
    return (results, valids) if valid else results


def _is_field(field):
    """Whether `field` is a tuple or list that starts with a Dataset."""
    return isinstance(field, (tuple, list)) and bool(field) and isinstance(field[0], Dataset)


def _new_out(field, shape, dtype):
    return np.empty(shape, dtype)


def _prepare(fields, starts, options, out_for, fill, valid):
    """gather_fields' arguments as _mmnpz.GatherFields for ``options`` (an ExcerptOptions),
    with the int64 starts, the output arrays (``out_for(field, shape, dtype)`` gives each) and
    the valid-rows arrays (None unless ``valid``)."""
    starts = _int64_vector(starts, "starts")
    specs, results, valids = [], [], []
    for f, field in enumerate(fields):
        if not (_is_field(field) and len(field) == 3):
            given = (f"a {type(field).__name__} of {len(field)} items, the first of type "
                     f"{type(field[0]).__name__}" if isinstance(field, (tuple, list)) and field
                     else type(field).__name__)
            raise TypeError(f"fields[{f}] must be a triple (mmnpz.Dataset, indices, rate), not "
                            f"{given}")
        ds, indices, rate = field
        indices = ds._to_base(_int64_vector(indices, "indices", IndexError))
        r = _core.rate(rate)
        rows = _mmnpz.field_length(options.length, r.numerator, r.denominator)
        dtype, trailing = ds._batch_layout(indices)
        out = out_for(f, (len(indices), rows) + trailing, dtype)
        v = np.empty(len(indices), np.int64) if valid else None
        specs.append(_mmnpz.GatherField(ds._d, indices, out, rate_num=r.numerator,
                                        rate_den=r.denominator, valid=v,
                                        fill=_fill_bytes(options.pad, fill, dtype)))
        results.append(out)
        valids.append(v)
    return specs, starts, results, valids


class Sampler:
    """A deterministic stream of (item index, excerpt start) pairs.

    ``kind``: "sequential" (index order), "shuffle" (each item once per epoch, a new order
    each epoch, from an O(1)-memory random-access permutation), "replacement" (uniform, with
    replacement), "sliding" (every window [k*hop, k*hop+length) inside an item, in order, or
    shuffled with ``shuffle_windows``) or "weighted" (every excerpt position inside an item
    equally likely, so items count in proportion to their length).

    Starts: a random crop (uniform over the positions where the excerpt fits) unless
    ``random_crop=False`` (start 0); items shorter than ``length`` start at 0. The sample at
    (epoch, position) depends only on the lengths, the options and those two integers.
    ``rank`` / ``world_size`` (defaults: torch.distributed's when initialised, else 0 / 1)
    give this process positions rank, rank + world_size, ... of each epoch: with
    ``drop_remainder=True`` each rank gets floor(epoch_size / world_size) samples and the
    parts are disjoint; with False, ceil(...) by repeating the epoch's first samples.
    ``num_samples``: draws per epoch for "replacement" and "weighted" (default: one per item).
    An option the kind has no use for is refused (ValueError), not ignored: ``hop`` or
    ``shuffle_windows`` but with "sliding", ``num_samples`` but with "replacement" and
    "weighted", ``random_crop=False`` with "sliding" and "weighted".

    Items shorter than ``length`` are decided here, with ``pad``, the pad rule of the gather
    that will use the samples (a Loader checks its own ``pad`` when it is made; pass it here
    when you gather yourself). With ``pad="none"``, "sequential", "shuffle" and
    "replacement" refuse them (ValueError naming the shortest: pad them, or leave them out
    with ``Dataset(..., min_length=)``). "sliding" and "weighted" draw only excerpts inside an
    item, so they never draw a short item unless ``pad`` is "fill" or "wrap" (then a short
    item is one excerpt starting at row 0); "weighted" warns (UserWarning, with the count)
    when some items can never be drawn. ``pad=None`` (the default) checks nothing and
    draws no short items with "sliding" and "weighted".
    """

    def __init__(self, lengths, kind="shuffle", *, seed=0, length=0, hop=0,
                 shuffle_windows=False, random_crop=True, num_samples=0, rank=None,
                 world_size=None, drop_remainder=True, pad=None):
        dataset = lengths if isinstance(lengths, Dataset) else None
        try:
            rank, world_size = _core.rank_and_world(rank, world_size)
            if pad not in (None, "none", "fill", "wrap"):
                raise ValueError(f"pad must be one of 'none', 'fill', 'wrap' or None, not "
                                 f"{pad!r}")
            options = _mmnpz.SamplerOptions(
                kind=kind, seed=_core.integer(seed, "seed"),
                length=_core.integer(length, "length"), hop=_core.integer(hop, "hop"),
                shuffle_windows=shuffle_windows, random_crop=random_crop,
                num_samples=_core.integer(num_samples, "num_samples"),
                rank=_core.integer(rank, "rank"),
                world_size=_core.integer(world_size, "world_size"),
                drop_remainder=drop_remainder, pad_short_items=pad in ("fill", "wrap"))
            lengths = _int64_vector(dataset.lengths if dataset is not None else lengths,
                                    "lengths")
            if pad == "none":
                _refuse_short(lengths, options.length, options.kind, dataset,
                              "Sampler(pad='none')")
            self._made(_mmnpz.Sampler(lengths, options), lengths, pad)
        except _USER_ERRORS as e:
            raise _in_user_words(e, "Sampler") from None
        if options.kind == "weighted" and pad in (None, "none"):
            never = int(np.count_nonzero(lengths < options.length))
            if never:
                warnings.warn(
                    f"Sampler(kind='weighted'): {never} of {len(lengths)} items are shorter "
                    f"than length={options.length} and are never drawn; pass pad='fill' or "
                    f"pad='wrap' to draw them padded, or leave them out with "
                    f"Dataset(..., min_length={options.length})", stacklevel=2)

    def _made(self, core, lengths, pad):
        """Takes the core's sampler and what it was made of (also when unpickled)."""
        options = core.options
        self._s, self._lengths, self.pad = core, lengths, pad
        self.kind, self.seed, self.length = options.kind, options.seed, options.length
        self.rank, self.world_size = options.rank, options.world_size

    @property
    def options(self):
        """The sampler's options (an mmnpz._mmnpz.SamplerOptions, a copy)."""
        return self._s.options

    def __reduce__(self):
        # Pickles (for spawned processes) carry the lengths and options: the samples depend on
        # nothing else. Made again without the checks and warnings it passed once.
        o = self._s.options
        fields = {k: getattr(o, k) for k in _SAMPLER_FIELDS}
        return _remake_sampler, (self._lengths, fields, self.pad)

    @property
    def epoch_size(self):
        """Samples per epoch across all ranks."""
        return self._s.epoch_size

    def __len__(self):
        """Samples per epoch for this rank."""
        return self._s.rank_size

    def sample(self, epoch, position=0, count=None):
        """(indices, starts) int64 arrays: this rank's samples [position, position + count) of
        ``epoch`` (count: to the end of the epoch)."""
        epoch = _core.integer(epoch, "Sampler.sample: epoch")
        position = _core.integer(position, "Sampler.sample: position")
        count = (max(0, len(self) - position) if count is None
                 else _core.integer(count, "Sampler.sample: count"))
        for what, value in (("epoch", epoch), ("position", position), ("count", count)):
            if value < 0:
                raise ValueError(f"Sampler.sample: {what} must not be negative, not {value}")
            if value >= 1 << 64:
                raise ValueError(f"Sampler.sample: {what} {value} is too large for a 64-bit "
                                 f"integer")
        try:
            return self._s.sample(epoch, position, count)
        except _USER_ERRORS as e:
            raise _in_user_words(e, "Sampler.sample") from None


_SAMPLER_FIELDS = ("kind", "seed", "length", "hop", "shuffle_windows", "random_crop",
                   "num_samples", "rank", "world_size", "drop_remainder", "pad_short_items")


def _remake_sampler(lengths, fields, pad):
    sampler = Sampler.__new__(Sampler)
    sampler._made(_mmnpz.Sampler(lengths, _mmnpz.SamplerOptions(**fields)), lengths, pad)
    return sampler


_DRAWS_EVERY_ITEM = ("sequential", "shuffle", "replacement")


def _refuse_short(lengths, length, kind, dataset, call):
    """Raises ValueError when ``kind`` would draw items shorter than ``length`` and the
    gather (pad "none") would refuse them: how many, the shortest, and the fixes."""
    if kind not in _DRAWS_EVERY_ITEM or length == 0 or len(lengths) == 0:
        return
    short = lengths < length
    count = int(np.count_nonzero(short))
    if not count:
        return
    shortest = int(np.argmin(lengths))
    what = f"item {shortest}" if dataset is None else repr(dataset.name(shortest))
    raise ValueError(
        f"{call}: {count} of {len(lengths)} items are shorter than length={length}, the "
        f"shortest {what} with {int(lengths[shortest])} rows; pass pad='fill' or pad='wrap' "
        f"to pad them, or leave them out with Dataset(..., min_length={length})")


_EACH_PASS = type("EachPass", (), {"__repr__": lambda self: "<each pass is one epoch>"})()

Batch = collections.namedtuple("Batch", "data indices starts valid epoch position")
Batch.__doc__ = """One batch from a Loader.

data: the excerpts ``(batch, length, *trailing)``, or a tuple with one such array per field;
indices, starts: the samples; valid: rows of each excerpt taken from its item (the rest is
padding), one array per field like data; epoch, position: where in the sample stream the
batch begins (this rank's position)."""


_HUGE_PAGE = 2 << 20  # bytes of a transparent huge page (x86-64, and 4 KiB-page arm64)
_SMALL_BATCH = 64 << 10  # below: a bytearray (a few pages, whose first writes cost little)


def _aligned(n, to):
    """``n`` rounded up to a multiple of ``to``."""
    return -(-n // to) * to


def _huge_memory(nbytes, advised):
    """(mmap, offset): ``nbytes`` of private anonymous memory, zeroed and not yet touched, at
    ``offset`` in the mmap, starting on a huge page, whose first ``advised`` bytes are advised
    for transparent huge pages (MADV_HUGEPAGE; 4 KiB pages where the kernel refuses)."""
    # Room to align the start: address space only, never touched.
    memory = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    offset = -np.frombuffer(memory, np.uint8, count=1).ctypes.data % _HUGE_PAGE
    try:
        memory.madvise(mmap.MADV_HUGEPAGE, offset, advised)
    except OSError:  # a kernel without transparent huge pages
        pass
    return memory, offset


def _batch_memory(nbytes):
    """(mmap, offset): ``nbytes`` of zeroed memory at ``offset`` in the mmap, for a batch
    array of at least 2 MiB about to be written whole (smaller batches are cut from an
    _Arena): private anonymous memory whose huge-page-aligned part is advised for transparent
    huge pages: its whole 2 MiB extents, and the last, partial one too when that adds at most
    an eighth of ``nbytes``. Each fresh 4 KiB page costs a page fault at its first write, and
    on some virtual machines once more at the first write of the other kind (the kernel's, a
    read, after the process's own, a copy, or the other way round): 9-12 ms for the first
    batch of 3.9 MB read into fresh 4 KiB pages on the development VM, 1.2-1.9 ms in huge
    pages. Needs mmap.MADV_HUGEPAGE."""
    whole = _aligned(nbytes, _HUGE_PAGE)
    if whole - nbytes > nbytes // 8:
        whole -= _HUGE_PAGE  # the last extent stays in 4 KiB pages
    return _huge_memory(max(whole, nbytes), whole)


class _Arena:
    """Batch memory for batches of 64 KiB to 2 MiB, cut in order from huge pages: a mapping of
    whole 2 MiB extents advised for transparent huge pages (MADV_HUGEPAGE), in chunks of one
    size, each starting on a page. An arena holds the fewest extents of which at most an
    eighth is left over (two batches of 1 MB in one extent; never more than 7 extents). A
    huge page is allocated at its first write: an arena holds no more memory than the extents
    its chunks reached into. Its memory is freed once _Buffers has moved on to a new arena for
    its size (every chunk taken) and none of its chunks is referenced, neither by a batch nor
    among the released buffers _Buffers keeps.

    On the development VM, batches of 1 MB in 4 KiB pages of their own cost the demo a third
    of its stream in first writes (a fault at a page's first write by a copy, another at its
    first write by a read), and those first writes made reads look 4-10x dearer than they are
    to the gather's automatic choice, which then faulted the archive in where reading was
    faster: the demo streamed 59-74k excerpts/s, 117-142k in huge pages (five alternating
    runs each)."""

    def __init__(self, nbytes):
        self.chunk = _aligned(nbytes, mmap.PAGESIZE)
        extents = -(-self.chunk // _HUGE_PAGE)
        while (extents * _HUGE_PAGE) % self.chunk > extents * _HUGE_PAGE // 8:
            extents += 1
        self.memory, self.next = _huge_memory(extents * _HUGE_PAGE, extents * _HUGE_PAGE)
        self.end = self.next + extents * _HUGE_PAGE // self.chunk * self.chunk

    def take(self):
        """(mmap, offset) of the next chunk, or None when every chunk was taken."""
        if self.next == self.end:
            return None
        self.next += self.chunk
        return self.memory, self.next - self.chunk


class _Buffers:
    """The Loader's output memory, recycled by ownership: each batch array is made on memory
    of its own (_batch_memory, or a chunk of an _Arena) and watched by a weak reference, whose
    callback gives the memory back for a later batch once the array is gone, and with it
    every view, Batch and tensor that kept it (a view's base is the array, a tensor holds the
    array). Up to ``limit`` released buffers are kept."""

    def __init__(self, limit):
        self._free = []  # released (nbytes, buffer, offset), each of one batch array
        self._lent = {}  # id(weak reference) -> (weak reference, memory) of live arrays
        self._arenas = {}  # nbytes -> the _Arena that batches of nbytes are cut from
        self._limit = limit

    def array(self, field, shape, dtype):
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        for k, memory in enumerate(self._free):
            if memory[0] == nbytes:
                del self._free[k]
                break
        else:
            # Fresh memory costs a page fault per 4 KiB on its first write, more than the
            # gather itself for large batches: hence the recycling.
            memory = (nbytes,) + self._fresh(nbytes)
        array = np.ndarray(shape, dtype, buffer=memory[1], offset=memory[2])
        watch = weakref.ref(array, self._release)
        self._lent[id(watch)] = watch, memory
        return array

    def _fresh(self, nbytes):
        if nbytes < _SMALL_BATCH or not hasattr(mmap, "MADV_HUGEPAGE"):
            return bytearray(nbytes), 0
        if nbytes >= _HUGE_PAGE:
            return _batch_memory(nbytes)
        arena = self._arenas.get(nbytes)
        chunk = arena.take() if arena else None
        if chunk is None:
            self._arenas[nbytes] = arena = _Arena(nbytes)
            chunk = arena.take()
        return chunk

    def _release(self, watch):  # runs where the array's last reference goes
        _, memory = self._lent.pop(id(watch))
        if len(self._free) < self._limit:
            self._free.append(memory)


class Loader:
    """Batches of excerpts, gathered in the background and yielded in order.

    Batch b of an epoch holds this rank's samples [b * batch_size, (b + 1) * batch_size) of
    ``sampler``; a last partial batch is left out with ``drop_last=True``. ``fields`` adds
    aligned datasets as ``(dataset, rate)`` pairs gathered with the same indices and windows
    (see gather_fields). ``prefetch`` batches beyond the next are gathered ahead, in the
    background on the C++ thread pool (no Python thread: the GIL is not needed), while the
    caller uses the current one.

    Epochs never repeat by accident; each pass (``for batch in loader``) continues where the
    last one stopped. ``epochs`` left out: each pass is the next epoch (0, 1, 2, ...), for
    ``for epoch in range(E): for batch in loader:``. ``epochs=E``: one pass runs epochs
    0 .. E-1 (a pass after a ``break`` runs the rest), after which the loader is used up and
    iterating it raises RuntimeError. ``epochs=None``: one endless pass.
    ``state_dict()`` after a batch says where the next one begins; a Loader given that state
    with ``load_state_dict`` yields exactly the batches that would have followed.

    One pass at a time: a new ``iter()`` or ``load_state_dict`` ends the pass under way (the
    next batch asked of it raises RuntimeError), so that two passes never yield the same
    batches and a loaded place is not overwritten by a pass begun before it.

    Short items are decided when the Loader is made: with ``pad="none"``, a sampler that
    would draw an item shorter than ``length`` is a ValueError saying how many there are and
    naming the shortest (see Sampler).

    A batch's arrays are new to it; their memory is recycled for a later batch only once the
    arrays are gone: no Batch, view or torch.from_numpy tensor of them is left.
    """

    def __init__(self, dataset, sampler, batch_size, *, length=None, pad="none", fill=0,
                 fields=(), epochs=_EACH_PASS, prefetch=2, threads=0, drop_last=True):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"Loader: dataset must be an mmnpz.Dataset, not "
                            f"{type(dataset).__name__}")
        if not isinstance(sampler, Sampler):
            raise TypeError(f"Loader: sampler must be an mmnpz.Sampler, not "
                            f"{type(sampler).__name__}")
        lengths = dataset.lengths
        if len(sampler._lengths) != len(lengths) or not np.array_equal(sampler._lengths, lengths):
            # Its draws would be another dataset's items: an IndexError at some batch, or
            # windows past the items' ends, or silently other items' rows.
            if len(sampler._lengths) != len(lengths):
                why = f"{len(sampler._lengths)} items, the dataset has {len(lengths)}"
            else:
                k = int(np.flatnonzero(sampler._lengths != lengths)[0])
                why = (f"item {k} of {int(sampler._lengths[k])} rows, the dataset's "
                       f"{dataset.name(k)!r} has {int(lengths[k])}")
            raise ValueError(f"Loader: the sampler was made for other items ({why}); make it "
                             f"of this dataset: Sampler(dataset, ...)")
        self._each_pass = epochs is _EACH_PASS
        if self._each_pass:
            epochs = 1
        try:
            excerpt = _mmnpz.ExcerptOptions(
                length=sampler.length if length is None else _core.integer(length, "length"),
                pad=pad,
                threads=_core.integer(threads, "threads"))
            options = _mmnpz.LoaderOptions(
                batch_size=_core.integer(batch_size, "batch_size"), excerpt=excerpt,
                epochs=None if epochs is None else _core.integer(epochs, "epochs"),
                prefetch=_core.integer(prefetch, "prefetch"),
                drop_last=drop_last)
            self.batches_per_epoch = _mmnpz.batches_per_epoch(options, sampler._s)
            if excerpt.pad == "none":
                if sampler.pad in ("fill", "wrap") and np.any(sampler._lengths < sampler.length):
                    raise ValueError(f"the sampler draws items shorter than its length padded "
                                     f"(Sampler(pad={sampler.pad!r})); pass the Loader the "
                                     f"same pad")
                _refuse_short(dataset.lengths, excerpt.length, sampler.kind, dataset,
                              "Loader(pad='none')")
                crops = sampler.options.random_crop or sampler.kind not in _DRAWS_EVERY_ITEM
                if 0 < sampler.length < excerpt.length and crops:
                    # Its starts keep windows of its own length inside the items: a longer
                    # excerpt ran past an item's end some batches later.
                    raise ValueError(f"length={excerpt.length} is longer than the sampler's "
                                     f"excerpts ({sampler.length}), whose starts keep only "
                                     f"those inside the items: make the sampler with "
                                     f"length={excerpt.length}, or pad ('fill', 'wrap')")
        except _USER_ERRORS as e:
            raise _in_user_words(e, "Loader") from None
        fields = list(fields)  # a generator was used up by the checks: no field was kept
        for k, pair in enumerate(fields):
            is_pair = isinstance(pair, (tuple, list)) and len(pair) == 2
            field = pair[0] if is_pair else pair
            if not is_pair or not isinstance(field, Dataset):
                given = f"({type(field).__name__}, ...)" if is_pair else type(pair).__name__
                raise TypeError(f"Loader: fields[{k}] must be a pair (mmnpz.Dataset, rate), not "
                                f"{given}")
            if len(field) != len(dataset):  # item i of a field goes with item i of the data
                raise ValueError(f"Loader: fields[{k}] has {len(field)} items, the data "
                                 f"{len(dataset)}")
            try:  # the rate, and the field's whole rows per excerpt, now rather than at a batch
                r = _core.rate(pair[1])
                _mmnpz.field_length(excerpt.length, r.numerator, r.denominator)
            except _USER_ERRORS as e:
                raise _in_user_words(e, "Loader") from None
        self.dataset, self.sampler, self.batch_size = dataset, sampler, options.batch_size
        self.length, self.pad, self.fill, self.threads = excerpt.length, excerpt.pad, fill, threads
        self.epochs, self.prefetch, self.drop_last = options.epochs, options.prefetch, drop_last
        self.fields = [(dataset, 1)] + [(d, r) for d, r in fields]
        self.epoch, self.position = 0, 0
        self._passes = 0  # passes begun: a pass that is not the last one begun is ended
        self._excerpt = excerpt
        self._buffers = _Buffers((self.prefetch + 3) * len(self.fields))

    def __reduce__(self):
        raise TypeError("a Loader cannot be pickled: pickle its dataset and sampler, and make a "
                        "Loader of them where they arrive")

    def __len__(self):
        """Batches the next pass yields (TypeError when endless)."""
        if self.epochs is None:
            raise TypeError("Loader(epochs=None): an endless Loader has no length")
        done = self.position // self.batch_size
        if not self._each_pass:
            done += self.epoch * self.batches_per_epoch
        return max(0, self.epochs * self.batches_per_epoch - done)

    def state_dict(self):
        """Where the next batch begins, plus the options that must agree on resume."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.sampler.seed,
                "kind": self.sampler.kind, "batch_size": self.batch_size,
                "rank": self.sampler.rank, "world_size": self.sampler.world_size,
                **_core.resume_options(self.sampler, self.drop_last)}

    def load_state_dict(self, state):
        """Resumes where ``state`` (from :meth:`state_dict`) says: the next batch begins at its
        epoch and position. ValueError when its seed, kind, batch_size, rank or world_size, the
        sampler's other options, drop_last or the items' lengths differ from this loader's (a
        state saved by an older version lacks some of them, and is not checked for those), or
        its epoch and position are no place in an epoch of this loader (a position from 0 to
        the rank's epoch size); TypeError when it is no dict of integers. The loader is
        unchanged when the state is refused."""
        try:
            epoch, position = _core.saved_place(state, self.state_dict())
            if position > len(self.sampler):
                raise ValueError(f"the saved state's position {position} is past the end of an "
                                 f"epoch of {len(self.sampler)} samples for rank "
                                 f"{self.sampler.rank}")
        except (TypeError, ValueError) as e:
            raise type(e)(f"Loader.load_state_dict: {e}") from None
        self._passes += 1
        self.epoch, self.position = epoch, position
        self._next_epoch_when_done()

    def _schedule(self):
        """(epoch, position, count) of every batch of a pass from the current state on."""
        epoch, position = self.epoch, self.position
        end = self.epoch + 1 if self._each_pass else self.epochs
        if end is not None and epoch >= end:
            raise RuntimeError(
                f"Loader(epochs={self.epochs}): the loader is used up (its {self.epochs} "
                f"epoch{'s' if self.epochs != 1 else ''} ran); leave epochs= out to make each "
                f"pass over the loader the next epoch, pass epochs=None for an endless "
                f"loader, or go back with load_state_dict()")
        per_rank = len(self.sampler)
        while end is None or epoch < end:
            count = min(self.batch_size, per_rank - position)
            if count <= 0 or (self.drop_last and count < self.batch_size):
                epoch, position = epoch + 1, 0
                continue
            yield epoch, position, count
            position += count

    def _start(self, epoch, position, count):
        """Samples a batch and starts gathering it on the C++ pool: (batch, pending)."""
        indices, starts = self.sampler.sample(epoch, position, count)
        specs, starts, data, valid = _prepare([(d, indices, r) for d, r in self.fields], starts,
                                              self._excerpt, self._buffers.array, self.fill,
                                              True)
        pending = _mmnpz.gather_async(specs, starts, self._excerpt)
        if len(self.fields) == 1:
            data, valid = data[0], valid[0]
        else:
            data, valid = tuple(data), tuple(valid)
        return Batch(data, indices, starts, valid, epoch, position), pending

    def _advance(self, batch):
        self.epoch, self.position = batch.epoch, batch.position + len(batch.indices)
        self._next_epoch_when_done()

    def _next_epoch_when_done(self):
        """Moves the place to the next epoch's start when no batch of this epoch is left."""
        if self.position >= len(self.sampler) or (
                self.drop_last and len(self.sampler) - self.position < self.batch_size):
            self.epoch, self.position = self.epoch + 1, 0

    def __iter__(self):
        self._passes += 1
        return self._pass(self._passes)

    def _pass(self, mine):
        # The batch to yield next and `prefetch` more are being gathered by the C++ pool's
        # workers while the caller works; waiting for one lends a hand with it.
        jobs = self._schedule()
        window = collections.deque()  # (batch, pending) or (exception, None), in order
        try:
            while True:
                if self._passes != mine:
                    raise RuntimeError("Loader: this pass was ended by a newer iter() or "
                                       "load_state_dict() of the same loader; iterate the "
                                       "loader again to go on from its place")
                while len(window) <= self.prefetch and not (window and window[-1][1] is None):
                    job = next(jobs, None)
                    if job is None:
                        break
                    try:
                        window.append(self._start(*job))
                    except Exception as e:  # raised in its turn, after the batches before it
                        paths = [p for d, _ in self.fields for p in d.paths]
                        window.append((_in_user_words(e, "Loader", paths), None))
                if not window:
                    return
                batch, pending = window.popleft()
                if pending is None:
                    raise batch
                pending.wait()
                self._advance(batch)
                yield batch
                batch = pending = None  # the caller's batch alone keeps its memory
        finally:
            window.clear()  # a pending gather waits for its copy when dropped
