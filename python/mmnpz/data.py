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
import functools
import operator
import os
import weakref

import numpy as np

from . import _core, _mmnpz
from ._npz import NpzReader

__all__ = ["Batch", "Dataset", "Loader", "Sampler", "gather_fields"]


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
    other process opens them itself. ``io`` ("auto", "read" or "map") is how gather copies
    stored members by default (see Dataset.gather); ``ds[i]`` is a memory map whatever it says.
    """

    def __init__(self, source, *, select=None, order="concatenate", threads=0, io="auto"):
        self._specs = _specs(source)
        self._options = _mmnpz.DatasetOptions(select=select or "", order=order, threads=threads,
                                              io=io)
        self._d = _mmnpz.Dataset(self._specs, self._options)
        self._lengths = None
        self._layouts = None
        self._readers = {}

    def __reduce__(self):
        o = self._options
        return (_reopen_dataset, (self._specs, o.select, o.order, o.threads, o.io))

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
               valid=False, io="auto"):
        """Excerpts rows [starts[k], starts[k] + length) of items indices[k], stacked in one
        C-contiguous array (len(indices), length, *trailing), new or ``out``.

        ``pad`` says what happens where an excerpt runs past its item's end: "none" refuses
        (ValueError), "fill" fills with ``fill``, "wrap" continues from the item's first row.
        With ``valid=True`` also returns how many rows of each excerpt came from the item.
        Every request is checked before anything is copied; the copy runs in C++ on
        ``threads`` threads (0: every core) without the GIL. Items must share dtype and
        trailing shape (TypeError / ValueError naming the first that does not).

        ``io`` says how stored members' bytes are copied: "read" with positional reads from
        the file (no page faults; pieces not in the page cache are read ahead together),
        "map" through the memory mapping, "auto" (default) as the Dataset's ``io`` says,
        whose "auto" copies through the mapping the excerpts whose pages are in the page
        cache and reads the others. An archive truncated
        after it was opened raises mmnpz.FormatError naming the member with "read" (with
        "map" the process gets SIGBUS).
        """
        # The one-field case without gather_fields' generality: this runs once per batch.
        length = int(length)
        options = _excerpt_options(length, pad, operator.index(threads), io)
        indices, starts = _int64_vector(indices, "indices"), _int64_vector(starts, "starts")
        dtype, trailing = self._batch_layout(indices)
        out = _out_array(out, (len(indices), length) + trailing, dtype)
        rows = np.empty(len(indices), np.int64) if valid else None
        fill_bytes = _fill_bytes(pad, fill, dtype)
        if rows is None and not fill_bytes:  # keywords cost time in pybind11: only when needed
            field = _mmnpz.GatherField(self._d, indices, out)
        else:
            field = _mmnpz.GatherField(self._d, indices, out, valid=rows, fill=fill_bytes)
        _mmnpz.gather([field], starts, options)
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


@functools.lru_cache(maxsize=64)
def _excerpt_options(length, pad, threads, io="auto"):
    """An ExcerptOptions, shared by the calls that give the same arguments (none changes it)."""
    return _mmnpz.ExcerptOptions(length=length, pad=pad, threads=threads, io=io)


def _fill_bytes(pad, fill, dtype):
    """The fill element in `dtype` (empty: zeros, or no filling)."""
    return np.array(fill, dtype=dtype).tobytes() if pad == "fill" and fill != 0 else b""


def _out_array(out, shape, dtype):
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if out.dtype != dtype or out.shape != shape:
        raise ValueError(f"out has dtype {out.dtype} and shape {out.shape}, the batch needs "
                         f"{dtype} and {shape}")
    return out


def _reopen_dataset(specs, select, order, threads, io="auto"):
    return Dataset(specs, select=select or None, order=order, threads=threads, io=io)


def gather_fields(fields, starts, length, *, outs=None, pad="none", fill=0, threads=0,
                  valid=False, io="auto"):
    """The same excerpt windows taken from several aligned datasets in one call.

    ``fields`` lists ``(dataset, indices, rate)``: field f's excerpt k is rows
    [floor(starts[k] * rate), + length * rate) of ``dataset`` item ``indices[k]``, so a label
    track at a quarter of the frame rate takes ``rate=1/4`` (``length * rate`` must be whole).
    Returns one array per field (and, with ``valid=True``, one valid-rows array per field).
    See Dataset.gather for the rest.
    """
    options = _excerpt_options(int(length), pad, operator.index(threads), io)
    if outs is None:
        out_for = _new_out
    elif len(outs) != len(fields):
        raise ValueError(f"there are {len(fields)} fields but {len(outs)} outs")
    else:
        def out_for(f, shape, dtype):
            return _out_array(outs[f], shape, dtype)
    specs, starts, results, valids = _prepare(fields, starts, options, out_for, fill, valid)
    _mmnpz.gather(specs, starts, options)  # everything checked, then copied
    return (results, valids) if valid else results


def _new_out(field, shape, dtype):
    return np.empty(shape, dtype)


def _prepare(fields, starts, options, out_for, fill, valid):
    """gather_fields' arguments as _mmnpz.GatherFields for ``options`` (an ExcerptOptions),
    with the int64 starts, the output arrays (``out_for(field, shape, dtype)`` gives each) and
    the valid-rows arrays (None unless ``valid``)."""
    starts = _int64_vector(starts, "starts")
    specs, results, valids = [], [], []
    for f, (ds, indices, rate) in enumerate(fields):
        if not isinstance(ds, Dataset):
            raise TypeError(f"fields must hold mmnpz.Dataset, not {type(ds).__name__}")
        indices = _int64_vector(indices, "indices")
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
    """

    def __init__(self, lengths, kind="shuffle", *, seed=0, length=0, hop=0,
                 shuffle_windows=False, random_crop=True, num_samples=0, rank=None,
                 world_size=None, drop_remainder=True):
        rank, world_size = _core.rank_and_world(rank, world_size)
        options = _mmnpz.SamplerOptions(
            kind=kind, seed=int(seed), length=int(length), hop=int(hop),
            shuffle_windows=shuffle_windows, random_crop=random_crop,
            num_samples=int(num_samples), rank=int(rank), world_size=int(world_size),
            drop_remainder=drop_remainder)
        if isinstance(lengths, Dataset):
            lengths = lengths.lengths
        self._s = _mmnpz.Sampler(_int64_vector(lengths, "lengths"), options)
        self.kind, self.seed, self.length = options.kind, options.seed, options.length
        self.rank, self.world_size = options.rank, options.world_size

    @property
    def options(self):
        """The sampler's options (an mmnpz._mmnpz.SamplerOptions, a copy)."""
        return self._s.options

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


Batch = collections.namedtuple("Batch", "data indices starts valid epoch position")
Batch.__doc__ = """One batch from a Loader.

data: the excerpts (batch, length, *trailing), or a tuple with one such array per field;
indices, starts: the samples; valid: rows of each excerpt taken from its item (the rest is
padding), one array per field like data; epoch, position: where in the sample stream the
batch begins (this rank's position)."""


class _Buffers:
    """The Loader's output memory, recycled by ownership: each batch array is made on a
    bytearray of its own and watched by a weak reference, whose callback gives the bytearray
    back for a later batch once the array is gone, and with it every view, Batch and tensor
    that kept it (a view's base is the array, a tensor holds the array). Up to ``limit``
    released bytearrays are kept."""

    def __init__(self, limit):
        self._free = []  # released bytearrays, each of one batch array's size
        self._lent = {}  # id(weak reference) -> (weak reference, bytearray) of live arrays
        self._limit = limit

    def array(self, field, shape, dtype):
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        for k, memory in enumerate(self._free):
            if len(memory) == nbytes:
                del self._free[k]
                break
        else:
            # Fresh memory costs a page fault per 4 KiB on its first write, more than the
            # gather itself for large batches: hence the recycling.
            memory = bytearray(nbytes)
        array = np.ndarray(shape, dtype, buffer=memory)
        watch = weakref.ref(array, self._release)
        self._lent[id(watch)] = watch, memory
        return array

    def _release(self, watch):  # runs where the array's last reference goes
        _, memory = self._lent.pop(id(watch))
        if len(self._free) < self._limit:
            self._free.append(memory)


class Loader:
    """Batches of excerpts, gathered in the background and yielded in order.

    Batch b of an epoch holds this rank's samples [b * batch_size, (b + 1) * batch_size) of
    ``sampler``; a last partial batch is left out with ``drop_last=True``. ``fields`` adds
    aligned datasets as ``(dataset, rate)`` pairs gathered with the same indices and windows
    (see gather_fields). ``epochs``: how many epochs to run (None: endlessly). ``prefetch``
    batches beyond the next are gathered ahead, in the background on the C++ thread pool
    (no Python thread: the GIL is not needed), while the caller uses the current one.
    ``state_dict()`` after a batch says where the next one begins; a Loader given that state
    with ``load_state_dict`` yields exactly the batches that would have followed.

    A batch's arrays are new to it; their memory is recycled for a later batch only once the
    arrays are gone: no Batch, view or torch.from_numpy tensor of them is left.
    """

    def __init__(self, dataset, sampler, batch_size, *, length=None, pad="none", fill=0,
                 fields=(), epochs=1, prefetch=2, threads=0, drop_last=True):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be an mmnpz.Dataset, not {type(dataset).__name__}")
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be an mmnpz.Sampler, not {type(sampler).__name__}")
        excerpt = _mmnpz.ExcerptOptions(
            length=sampler.length if length is None else int(length), pad=pad, threads=threads)
        options = _mmnpz.LoaderOptions(
            batch_size=int(batch_size), excerpt=excerpt,
            epochs=None if epochs is None else int(epochs), prefetch=int(prefetch),
            drop_last=drop_last)
        self.batches_per_epoch = _mmnpz.batches_per_epoch(options, sampler._s)
        self.dataset, self.sampler, self.batch_size = dataset, sampler, options.batch_size
        self.length, self.pad, self.fill, self.threads = excerpt.length, excerpt.pad, fill, threads
        self.epochs, self.prefetch, self.drop_last = options.epochs, options.prefetch, drop_last
        self.fields = [(dataset, 1)] + [(d, r) for d, r in fields]
        self.epoch, self.position = 0, 0
        self._excerpt = excerpt
        self._buffers = _Buffers((self.prefetch + 3) * len(self.fields))

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
                batch = pending = None  # the caller's batch alone keeps its memory
        finally:
            window.clear()  # a pending gather waits for its copy when dropped
