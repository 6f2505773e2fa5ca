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
import fractions
import os
import sys

import numpy as np

from . import _core, _mmnpz
from ._npz import NpzReader

__all__ = ["Batch", "Dataset", "Loader", "Sampler", "gather_fields"]

_PADS = ("none", "fill", "wrap")
_ONE = fractions.Fraction(1)


def _specs(source):
    if isinstance(source, (str, bytes, os.PathLike)):
        source = [source]
    specs = []
    for s in source:
        if not isinstance(s, (str, bytes, os.PathLike)):
            raise TypeError(f"archives must be given as str or os.PathLike, not {type(s).__name__}")
        specs.append(os.fsdecode(os.fspath(s)))
    if not specs:
        raise ValueError("no archives given")
    return specs


def _layout(descr, trailing):
    return _core.dtype(descr), tuple(trailing)


class Dataset:
    """Archives opened as one sequence of array items with global indices 0..len-1.

    ``source`` is a path, a shell pattern (``"train-*.npz"``, sorted), a shard spec
    (``"train@16.npz"`` for ``train-00000-of-00016.npz`` ... ``train-00015-of-00016.npz``), or
    a list of these. Items are numbered archive after archive (``order="concatenate"``) or
    taking one from each archive in turn (``order="interleave"``). ``select`` is a shell
    pattern on member names (without ".npy") choosing the items; every chosen member must be
    an array with at least one axis. Opening decodes every chosen member's .npy header (in
    parallel, without the GIL) and nothing else. Pickling sends the archive names only: the
    other process opens them itself.
    """

    def __init__(self, source, *, select=None, order="concatenate", threads=0):
        self._specs = _specs(source)
        self._select = select or ""
        self._order = order
        self._threads = threads
        self._d = _mmnpz.Dataset(self._specs, self._select, order, threads)
        self._lengths = None
        self._layouts = None
        self._readers = {}

    def __reduce__(self):
        return (_reopen_dataset, (self._specs, self._select, self._order, self._threads))

    def __len__(self):
        return len(self._d)

    def __repr__(self):
        return f"<mmnpz.Dataset of {len(self)} items in {len(self.paths)} archives>"

    @property
    def paths(self):
        """The archives, in the order their items are numbered."""
        return tuple(self._d.paths)

    @property
    def lengths(self):
        """Each item's length along axis 0 (read-only int64 array)."""
        if self._lengths is None:
            lengths = self._d.lengths().astype(np.int64)
            lengths.flags.writeable = False
            self._lengths = lengths
        return self._lengths

    @property
    def layouts(self):
        """The distinct (dtype, trailing shape) pairs among the items."""
        if self._layouts is None:
            self._layouts = [_layout(d, t) for d, t in self._d.layouts()]
        return list(self._layouts)

    @property
    def layout_ids(self):
        """Each item's index into ``layouts`` (uint32 array)."""
        return self._d.layout_ids()

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
        return self._d.name(self._check(index))

    def index(self, name):
        """The index of the item named ``name`` (the first one when archives share it)."""
        found = self._d.find(name)
        if found is None:
            raise KeyError(f"no item named {name!r}")
        return found

    def locate(self, index):
        """(archive path, member name) of item ``index``."""
        return self._location(index)

    def _location(self, index):
        return tuple(self._d.locate(self._check(index)))

    def _reader(self, path):
        reader = self._readers.get(path)
        if reader is None:
            reader = self._readers[path] = NpzReader(path)
        return reader

    def _check(self, index):
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for a dataset of {len(self)} items")
        return index

    def __getitem__(self, key):
        """Item ``key`` (an index or a name) as its reader returns it: a read-only memmap."""
        index = self.index(key) if isinstance(key, str) else self._check(key)
        path, member = self._location(index)
        reader = self._reader(path)
        return reader[member]

    def gather(self, indices, starts, length, *, out=None, pad="none", fill=0, threads=0,
               valid=False):
        """Excerpts rows [starts[k], starts[k] + length) of items indices[k], stacked in one
        C-contiguous array (len(indices), length, *trailing), new or ``out``.

        ``pad`` says what happens where an excerpt runs past its item's end: "none" refuses
        (ValueError), "fill" fills with ``fill``, "wrap" continues from the item's first row.
        With ``valid=True`` also returns how many rows of each excerpt came from the item.
        Every request is checked before anything is copied; the copy runs in C++ on
        ``threads`` threads (0: every core) without the GIL. Items must share dtype and
        trailing shape (TypeError / ValueError naming the first that does not).
        """
        # The one-field case without gather_fields' generality: this runs once per batch.
        if pad not in _PADS:
            raise ValueError(f"pad must be one of {_PADS}, not {pad!r}")
        indices, starts = _int64_vector(indices, "indices"), _int64_vector(starts, "starts")
        if indices.shape != starts.shape:
            raise ValueError(f"there are {indices.size} indices but {starts.size} starts")
        length = _length(length)
        dtype, trailing = self._batch_layout(indices)
        out = _out_array(out, (len(indices), length) + trailing, dtype)
        rows = np.empty(len(indices), np.int64) if valid else None
        fill_bytes = np.array(fill, dtype=dtype).tobytes() if pad == "fill" and fill != 0 else b""
        _mmnpz.gather([(self._d, indices, 1, 1, out, rows)], starts, length, pad, fill_bytes,
                      threads)
        return (out, rows) if valid else out

    def _batch_layout(self, indices):
        layouts = self._layouts if self._layouts is not None else self.layouts
        if len(layouts) == 1:
            return layouts[0]  # every item has it (the C++ gather checks each anyway)
        if len(indices) == 0:
            return np.dtype(np.float32), ()
        return _layout(*self._d.batch_layout(indices))


def _int64_vector(values, what):
    if not (isinstance(values, np.ndarray) and values.dtype == np.int64):
        given = np.asarray(values)
        if given.size and given.dtype.kind not in "iu":
            raise TypeError(f"{what} must be integers, not {given.dtype}")
    values = np.ascontiguousarray(values, dtype=np.int64)
    if values.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional")
    return values


def _length(length):
    length = int(length)
    if length < 0:
        raise ValueError(f"length must not be negative, not {length}")
    return length


def _out_array(out, shape, dtype):
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if out.dtype != dtype or out.shape != shape:
        raise ValueError(f"out has dtype {out.dtype} and shape {out.shape}, the batch needs "
                         f"{dtype} and {shape}")
    return out


def _reopen_dataset(specs, select, order, threads):
    return Dataset(specs, select=select or None, order=order, threads=threads)


def _rate(rate):
    if rate == 1:
        return _ONE  # the common case, without building a Fraction
    r = fractions.Fraction(rate).limit_denominator(1 << 20)
    if r <= 0:
        raise ValueError(f"a field's rate must be positive, not {rate!r}")
    return r


def gather_fields(fields, starts, length, *, outs=None, pad="none", fill=0, threads=0,
                  valid=False):
    """The same excerpt windows taken from several aligned datasets in one call.

    ``fields`` lists ``(dataset, indices, rate)``: field f's excerpt k is rows
    [floor(starts[k] * rate), + length * rate) of ``dataset`` item ``indices[k]``, so a label
    track at a quarter of the frame rate takes ``rate=1/4`` (``length * rate`` must be whole).
    Returns one array per field (and, with ``valid=True``, one valid-rows array per field).
    See Dataset.gather for the rest.
    """
    specs, starts, results, valids = _prepare(fields, starts, length, outs, pad, fill, valid)
    _mmnpz.gather(specs, starts, length, pad, b"", threads)  # everything checked, then copied
    return (results, valids) if valid else results


def _prepare(fields, starts, length, outs, pad, fill, valid):
    """gather_fields' arguments checked and converted for _mmnpz.gather[_async], with the
    output arrays (new where ``outs`` has None) and valid-rows arrays (None unless ``valid``)."""
    if pad not in _PADS:
        raise ValueError(f"pad must be one of {_PADS}, not {pad!r}")
    starts = _int64_vector(starts, "starts")
    length = _length(length)
    if outs is not None and len(outs) != len(fields):
        raise ValueError(f"there are {len(fields)} fields but {len(outs)} outs")
    specs, results, valids = [], [], []
    for f, (ds, indices, rate) in enumerate(fields):
        if not isinstance(ds, Dataset):
            raise TypeError(f"fields must hold mmnpz.Dataset, not {type(ds).__name__}")
        indices = _int64_vector(indices, "indices")
        if indices.shape != starts.shape:
            raise ValueError(f"there are {indices.size} indices but {starts.size} starts")
        r = _rate(rate)
        rows = length * r
        if rows.denominator != 1:
            raise ValueError(f"an excerpt of {length} rows at rate {r} is not a whole number "
                             f"of rows")
        dtype, trailing = ds._batch_layout(indices)
        out = _out_array(None if outs is None else outs[f], (len(indices), int(rows)) + trailing,
                         dtype)
        v = np.empty(len(indices), np.int64) if valid else None
        # Each field's fill element in its own dtype (empty: zeros).
        fill_bytes = np.array(fill, dtype=dtype).tobytes() if pad == "fill" and fill != 0 else b""
        specs.append((ds._d, indices, r.numerator, r.denominator, out, v, fill_bytes))
        results.append(out)
        valids.append(v)
    return specs, starts, results, valids


_KINDS = ("sequential", "shuffle", "replacement", "sliding", "weighted")


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
    """

    def __init__(self, lengths, kind="shuffle", *, seed=0, length=0, hop=0,
                 shuffle_windows=False, random_crop=True, num_samples=0, rank=None,
                 world_size=None, drop_remainder=True):
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, not {kind!r}")
        if isinstance(lengths, Dataset):
            lengths = lengths.lengths
        if rank is None or world_size is None:
            auto_rank, auto_world = _distributed()
            rank = auto_rank if rank is None else rank
            world_size = auto_world if world_size is None else world_size
        self.kind, self.seed, self.length = kind, int(seed), int(length)
        self.rank, self.world_size = int(rank), int(world_size)
        for name, value in (("seed", seed), ("length", length), ("hop", hop),
                            ("num_samples", num_samples), ("rank", rank),
                            ("world_size", world_size)):
            if int(value) < 0:
                raise ValueError(f"{name} must not be negative, not {value}")
        self._s = _mmnpz.Sampler(_int64_vector(lengths, "lengths"), kind, self.seed,
                                 self.length, int(hop), bool(shuffle_windows),
                                 bool(random_crop), int(num_samples), self.rank,
                                 self.world_size, bool(drop_remainder))

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
        if count is None:
            count = len(self) - position
        return self._s.sample(int(epoch), int(position), int(count))


def _distributed():
    torch = __import__("sys").modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    return 0, 1


Batch = collections.namedtuple("Batch", "data indices starts valid epoch position")
Batch.__doc__ = """One batch from a Loader.

data: the excerpts (batch, length, *trailing), or a tuple with one such array per field;
indices, starts: the samples; valid: rows of each excerpt taken from its item (the rest is
padding), one array per field like data; epoch, position: where in the sample stream the
batch begins (this rank's position)."""


class Loader:
    """Batches of excerpts, gathered in the background and yielded in order.

    Batch b of an epoch holds this rank's samples [b * batch_size, (b + 1) * batch_size) of
    ``sampler``; a last partial batch is left out with ``drop_last=True``. ``fields`` adds
    aligned datasets as ``(dataset, rate)`` pairs gathered with the same indices and windows
    (see gather_fields). ``epochs``: how many epochs to run (None: endlessly). ``prefetch``
    batches beyond the next are gathered ahead, in the background on the C++ thread pool
    (no Python thread: the GIL is not needed), while the caller uses the current one. ``state_dict()``
    after a batch says where the next one begins; a Loader given that state with
    ``load_state_dict`` yields exactly the batches that would have followed.

    A batch's arrays are new to it; their memory is recycled for a later batch only once no
    Python object refers to them any more (views and torch.from_numpy tensors of them count).
    """

    def __init__(self, dataset, sampler, batch_size, *, length=None, pad="none", fill=0,
                 fields=(), epochs=1, prefetch=2, threads=0, drop_last=True):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be an mmnpz.Dataset, not {type(dataset).__name__}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if epochs is not None and epochs < 0:
            raise ValueError(f"epochs must be None or at least 0, not {epochs}")
        if pad not in _PADS:
            raise ValueError(f"pad must be one of {_PADS}, not {pad!r}")
        self.dataset, self.sampler, self.batch_size = dataset, sampler, int(batch_size)
        self.length = sampler.length if length is None else int(length)
        if self.length <= 0:
            raise ValueError("an excerpt length is needed (pass length= or a sampler with one)")
        self.fields = [(dataset, 1)] + [(d, r) for d, r in fields]
        self.pad, self.fill, self.threads = pad, fill, threads
        self.epochs, self.prefetch, self.drop_last = epochs, int(prefetch), drop_last
        self.epoch, self.position = 0, 0
        self._spares = []  # output arrays to recycle once their batches are dropped
        self._layouts = []  # per field: (dtype, trailing, rows) when all its items share them
        for d, r in self.fields:
            layouts = d.layouts
            rows = self.length * _rate(r)
            if len(layouts) == 1 and rows.denominator == 1:
                self._layouts.append(layouts[0] + (int(rows),))
            else:
                self._layouts.append(None)
        per_rank = len(sampler)
        self.batches_per_epoch = (per_rank // self.batch_size if drop_last
                                  else -(-per_rank // self.batch_size))
        if self.batches_per_epoch == 0:
            raise ValueError(f"an epoch of {per_rank} samples for this rank has no full batch "
                             f"of {self.batch_size}")

    def __len__(self):
        """Batches still to come (TypeError when endless)."""
        if self.epochs is None:
            raise TypeError("an endless Loader has no length")
        done = self.epoch * self.batches_per_epoch + self.position // self.batch_size
        return max(0, self.epochs * self.batches_per_epoch - done)

    def state_dict(self):
        """Where the next batch begins, plus the options that must agree on resume."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.sampler.seed,
                "kind": self.sampler.kind, "batch_size": self.batch_size,
                "rank": self.sampler.rank, "world_size": self.sampler.world_size}

    def load_state_dict(self, state):
        for key in ("seed", "kind", "batch_size", "rank", "world_size"):
            mine = self.state_dict()[key]
            if state.get(key, mine) != mine:
                raise ValueError(f"the saved state has {key}={state[key]!r}, this loader "
                                 f"{mine!r}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def _schedule(self):
        """(epoch, position, count) of every batch from the current state on."""
        epoch, position = self.epoch, self.position
        per_rank = len(self.sampler)
        while self.epochs is None or epoch < self.epochs:
            count = min(self.batch_size, per_rank - position)
            if count <= 0 or (self.drop_last and count < self.batch_size):
                epoch, position = epoch + 1, 0
                continue
            yield epoch, position, count
            position += count

    def _buffer(self, field, count):
        """An output array for `field`: a spare one nobody else references any more (the
        batch that held it was dropped), else a new one. Fresh memory costs a page fault per
        4 KiB on its first write, more than the gather itself for large batches."""
        layout = self._layouts[field]
        if layout is None:
            return None  # mixed layouts: gather allocates by the batch's own
        dtype, trailing, rows = layout
        shape = (count, rows) + trailing
        for spare in self._spares:
            # References: the list, the loop variable and getrefcount's argument.
            if spare.shape == shape and spare.dtype == dtype and sys.getrefcount(spare) <= 3:
                return spare
        fresh = np.empty(shape, dtype)
        if len(self._spares) < (self.prefetch + 3) * len(self.fields):
            self._spares.append(fresh)
        return fresh

    def _start(self, epoch, position, count):
        """Samples a batch and starts gathering it on the C++ pool: (batch, pending)."""
        indices, starts = self.sampler.sample(epoch, position, count)
        outs = [self._buffer(f, count) for f in range(len(self.fields))]
        specs, starts, data, valid = _prepare([(d, indices, r) for d, r in self.fields], starts,
                                              self.length, outs, self.pad, self.fill, True)
        del outs
        pending = _mmnpz.gather_async(specs, starts, self.length, self.pad, b"", self.threads)
        if len(self.fields) == 1:
            data, valid = data[0], valid[0]
        else:
            data, valid = tuple(data), tuple(valid)
        return Batch(data, indices, starts, valid, epoch, position), pending

    def _advance(self, batch):
        self.epoch, self.position = batch.epoch, batch.position + len(batch.indices)
        if self.position >= len(self.sampler) or (
                self.drop_last and len(self.sampler) - self.position < self.batch_size):
            self.epoch, self.position = self.epoch + 1, 0

    def __iter__(self):
        # The batch to yield next and `prefetch` more are being gathered by the C++ pool's
        # workers while the caller works; waiting for one lends a hand with it.
        jobs = self._schedule()
        window = collections.deque()  # (batch, pending) or (exception, None), in order
        try:
            while True:
                while len(window) <= self.prefetch and not (window and window[-1][1] is None):
                    job = next(jobs, None)
                    if job is None:
                        break
                    try:
                        window.append(self._start(*job))
                    except Exception as e:  # raised in its turn, after the batches before it
                        window.append((e, None))
                if not window:
                    return
                batch, pending = window.popleft()
                if pending is None:
                    raise batch
                pending.wait()
                self._advance(batch)
                yield batch
        finally:
            window.clear()  # a pending gather waits for its copy when dropped
