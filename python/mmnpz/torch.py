"""PyTorch integration: whole batches of excerpts as a map-style ``torch.utils.data.Dataset``.

>>> import mmnpz.torch
>>> batches = mmnpz.torch.ExcerptBatches("train@16.npz", length=100, batch_size=64, seed=1)
>>> for batch in mmnpz.torch.loader(batches, num_workers=4, multiprocessing_context="spawn"):
...     batch["data"]                              # tensor (64, 100, *trailing)

Item b of an ``ExcerptBatches`` is batch b of the current epoch, gathered in C++ by
:func:`mmnpz.gather_fields` into one array and handed over with ``torch.from_numpy`` (no copy).
Use it with ``DataLoader(batches, batch_size=None)``, or :func:`loader`. Pickling (for spawned
DataLoader workers) sends the archive names and options only: a worker opens the archives
itself, and gathers into a tensor in shared memory so that the batch reaches the main process
without another copy. Under :func:`loader` the workers are mmnpz's own (torch's per-batch
queues cost about as much as the gather itself): each claims the pass's next batch whenever
it is free and gathers it into a ring of buffers made once per worker, only semaphores pass
between the processes, and a slot is reused once the main process has let go of every tensor
of its batch. This module imports torch; ``import mmnpz`` does not.
"""

import collections.abc
import itertools
import mmap
import multiprocessing
import os
import queue as queue_module
import random
import time
import weakref

import numpy as np
import torch
import torch.distributed
import torch.multiprocessing
import torch.utils.data
from torch._utils import ExceptionWrapper
from torch.utils.data._utils.pin_memory import pin_memory

from . import _core, _mmnpz
from .data import (_USER_ERRORS, Dataset, Sampler, _aligned, _archives_of,
                   _check_same_archives, _in_user_words, _refuse_short, gather_fields)

__all__ = ["ExcerptBatches", "ExcerptLoader", "loader"]

# The keys of a batch besides the extra fields' (which may not take these names).
_RESERVED = ("data", "valid", "indices", "starts", "epoch", "batch")


def _torch_dtype(dtype, where):
    """The torch dtype of numpy ``dtype``; TypeError naming ``where`` when torch has none."""
    try:
        return torch.from_numpy(np.empty(0, dtype)).dtype
    except (TypeError, ValueError):  # ValueError: a byte order torch does not take
        raise TypeError(f"{where}: items of dtype {dtype.str} cannot become torch tensors "
                        f"(torch takes bool, (u)int8, int16/32/64, float16/32/64 and "
                        f"complex64/128 in native byte order)") from None


def _shared_empty(shape, dtype):
    """An uninitialised tensor whose storage is in shared memory, as DataLoader's own collate
    makes in workers: a tensor sent from a worker is moved to shared memory (copied) unless
    it is there already. ``share_memory_()`` would copy the uninitialised bytes once more."""
    tensor = torch.empty(0, dtype=dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * tensor.element_size()
    try:
        return tensor.set_(torch.UntypedStorage._new_shared(nbytes), 0, shape)
    except (AttributeError, TypeError, RuntimeError):  # a torch without that private API
        return torch.empty(shape, dtype=dtype).share_memory_()


_ALIGN = 64  # bytes: where each field of a batch starts within its slot


class _Ring:
    """Output memory for the batches of one loader's workers, made once in the main process
    before the workers start (forked ones inherit it, spawned ones receive it pickled, as
    torch shares tensors): ``slots`` buffers of ``slot_bytes`` per worker in one shared
    tensor, and a shared int32 flag per slot, 0 when free, 1 when lent.

    A worker takes the free slot released last: its bytes are the likeliest to be still in a
    CPU cache (a batch is megabytes, and writing over memory that has left the caches costs
    the worker about half as much again as the copy itself). ``released`` holds the order in
    which the main process gave the slots back.

    Only the worker sets a flag (when it takes the slot for a batch), and the main process
    clears it: when the last tensor of the batch made on the slot is gone (a weak reference to
    the memoryview all of them rest on, so no reference counting), or once the workers have
    stopped, for slots they took for batches never handed out (reclaim). A worker clears the
    flag of a slot it took only when its gather failed before the slot left it. The stores of
    the next batch cannot pass the main process's last reads of the slot: there, the flag is
    cleared after torch's atomic (acquire-release) drop of the storage reference; in the
    worker, the slot is written only once its flag was read as 0 (a control dependency: no
    CPU makes a store visible ahead of the branch it depends on)."""

    def __init__(self, workers, slots, slot_bytes):
        self.slots, self.slot_bytes = slots, slot_bytes
        self.memory = _shared_empty((workers * slots * slot_bytes,), torch.uint8)
        self.flags = _shared_empty((workers, slots), torch.int32).zero_()
        self.released = _shared_empty((workers, slots), torch.int64).zero_()
        self._releases = itertools.count(1)
        self._held = set()  # (worker, slot) of batches the main process handed out
        self._views = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_views"] = None  # numpy views would be pickled by value
        state["_releases"] = None  # the main process numbers the releases
        state["_held"] = None
        return state

    def _arrays(self):
        if self._views is None:
            self._views = self.memory.numpy(), self.flags.numpy(), self.released.numpy()
        return self._views

    def take(self, worker):
        """The free slot of ``worker``'s released last, now lent (worker side), or None when
        all are lent. Slots never released come after, the lowest first, so no more of them
        are ever written (and backed by memory) than were lent at once."""
        _, flags, released = self._arrays()
        flags, order = flags[worker], released[worker].tolist()
        slot = None
        for s, lent in enumerate(flags.tolist()):
            if not lent and (slot is None or order[s] > order[slot]):
                slot = s
        if slot is not None:
            flags[slot] = 1
        return slot

    def untake(self, worker, slot):
        """Frees a slot taken but never handed to the main process (worker side)."""
        self._arrays()[1][worker, slot] = 0

    def lend(self, worker, slot, memory):
        """Notes that the main process handed out the batch in the slot (main side), whose
        tensors all rest on ``memory`` (the array slot() gave). Returns the weak reference to
        the memoryview under it that gives the slot back once the last of them is gone (so no
        reference counting), to be kept by the caller while the ring is in use: lighter than
        weakref.finalize (14 us a batch with cold caches against 10 with the slot), and
        without a cycle through the ring, which is freed once its loader is."""
        self._held.add((worker, slot))
        return weakref.ref(memory.base, lambda _, worker=worker, slot=slot:
                           self.give_back(worker, slot))

    def give_back(self, worker, slot):
        """Frees a slot once the batch handed out from it is gone (main side)."""
        _, flags, released = self._arrays()
        if self._releases is not None:
            released[worker, slot] = next(self._releases)
        if self._held is not None:
            self._held.discard((worker, slot))
        flags[worker, slot] = 0

    def reclaim(self):
        """Frees the slots that stopped workers took for batches the main process never got
        (main side, once those workers have exited)."""
        flags = self._arrays()[1]
        for worker, slot in zip(*np.nonzero(flags)):
            if (int(worker), int(slot)) not in self._held:
                flags[worker, slot] = 0

    def slot(self, worker, slot):
        """The bytes of a slot as a uint8 array resting on a memoryview of its own."""
        start = (worker * self.slots + slot) * self.slot_bytes
        return np.frombuffer(memoryview(self._arrays()[0])[start:start + self.slot_bytes],
                             np.uint8)


def _field_places(layouts):
    """(start, end, dtype, shape) of arrays of (dtype, shape) laid one after another, each
    aligned."""
    places, offset = [], 0
    for dtype, shape in layouts:
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        places.append((offset, offset + nbytes, dtype, shape))
        offset = _aligned(offset + nbytes, _ALIGN)
    return places


def _views_at(memory, places):
    """The arrays at ``places`` (from _field_places) in ``memory`` (uint8)."""
    return [memory[start:end].view(dtype).reshape(shape) for start, end, dtype, shape in places]


def _field_views(memory, layouts):
    """Arrays of (dtype, shape) laid one after another in ``memory`` (uint8), each aligned."""
    return _views_at(memory, _field_places(layouts))


def _batch_dict(data, valid, indices, starts, epoch, b, names):
    batch = {"data": data[0], "valid": torch.from_numpy(valid[0]),
             "indices": torch.from_numpy(indices), "starts": torch.from_numpy(starts),
             "epoch": epoch, "batch": b}
    for name, d, v in zip(names, data[1:], valid[1:]):
        batch[name], batch[name + "_valid"] = d, torch.from_numpy(v)
    return batch


class ExcerptBatches(torch.utils.data.Dataset):
    """Batches of excerpts of one epoch of an :class:`mmnpz.Sampler`, one batch per item.

    ``source``, ``select``, ``order``: the archives, as :class:`mmnpz.Dataset` takes them.
    ``kind``, ``seed``, ``length``, ``hop``, ``shuffle_windows``, ``random_crop``,
    ``num_samples``, ``drop_remainder``: the sampler (see :class:`mmnpz.Sampler`).
    ``rank`` / ``world_size`` default to torch.distributed's when it is initialised, else 0 / 1,
    and are fixed here, in the process that makes the dataset, so that workers agree.

    Item b (0 <= b < len) is this rank's samples [b * batch_size, (b + 1) * batch_size) of
    the current epoch (``set_epoch``); item ``(epoch, b)`` names the epoch explicitly. The last
    batch may be partial unless ``drop_last``. A batch is a dict of tensors:

    * ``"data"``: ``(count, length, *trailing)`` excerpts; ``"valid"``: int64 (count,) rows of each
      excerpt taken from its item (the rest is ``fill`` with ``pad="fill"``, or wraps around
      with ``pad="wrap"``; ``pad="none"`` refuses excerpts that run past an item's end);
    * ``"indices"``, ``"starts"``: int64 (count,) the samples; ``"epoch"``, ``"batch"``: ints;
    * for each extra field ``name``: ``name`` and ``name + "_valid"`` likewise.

    ``fields`` adds aligned datasets gathered with the same indices and windows, as a mapping
    ``{name: (source, select, rate)}`` or a sequence of such triples (named ``"field1"``,
    ``"field2"``...). A source of None means the main ``source``; field excerpts span
    ``length * rate`` rows from ``floor(start * rate)`` (see :func:`mmnpz.gather_fields`).

    ``threads``: threads per gather (None: every core in the main process, the cores divided
    among the workers in a DataLoader worker, spawned or forked: a forked process makes its
    own gather thread pool on first use). ``io``: how the gathers copy (see
    :class:`mmnpz.Dataset`): "auto", "read" (positional reads: no page faults, which each fresh
    worker process otherwise takes on the archive's pages) or "map".

    Pickling sends the options only (a few hundred bytes): the archives are opened again, on
    first use, in the process that unpickles. In a DataLoader worker the excerpts are gathered
    straight into tensors in shared memory.
    """

    def __init__(self, source, *, length, batch_size, kind="shuffle", seed=0, hop=0,
                 shuffle_windows=False, random_crop=True, num_samples=0, drop_remainder=True,
                 rank=None, world_size=None, pad="none", fill=0, drop_last=True, select=None,
                 order="concatenate", fields=(), threads=None, io="auto"):
        try:
            options = _mmnpz.LoaderOptions(
                batch_size=_core.integer(batch_size, "batch_size"), drop_last=drop_last,
                excerpt=_mmnpz.ExcerptOptions(
                    length=_core.integer(length, "length"), pad=pad,
                    threads=0 if threads is None else _core.integer(threads, "threads")))
        except _USER_ERRORS as e:
            raise _in_user_words(e, "ExcerptBatches") from None
        rank, world_size = _core.rank_and_world(rank, world_size)
        if isinstance(fields, collections.abc.Mapping):
            fields = list(fields.items())
        else:
            fields = [(f"field{k}", field) for k, field in enumerate(fields, 1)]
        self._fields = []
        for name, field in fields:
            if not isinstance(name, str) or name in _RESERVED:
                raise ValueError(f"a field cannot be named {name!r} (reserved: {_RESERVED})")
            is_sequence = isinstance(field, (tuple, list))
            if not (is_sequence and len(field) == 3):
                given = type(field).__name__ + (f" of {len(field)}" if is_sequence else "")
                raise TypeError(f"ExcerptBatches: field {name!r} must be a triple (source, "
                                f"select, rate), not {given}")
            field_source, field_select, rate = field
            self._fields.append((name, source if field_source is None else field_source,
                                 field_select, rate))
        names = [f[0] for f in self._fields]
        clashes = set(names) & {n + "_valid" for n in names}
        if len(set(names)) != len(names) or clashes:
            raise ValueError(f"field names must be distinct and not clash with "
                             f"'<name>_valid': {names}")
        self._source, self._select, self._order, self._io = source, select, order, io
        try:
            self._sampler_options = dict(
                kind=kind, seed=_core.integer(seed, "seed"), length=options.excerpt.length,
                hop=_core.integer(hop, "hop"), shuffle_windows=bool(shuffle_windows),
                random_crop=bool(random_crop),
                num_samples=_core.integer(num_samples, "num_samples"),
                rank=_core.integer(rank, "rank"),
                world_size=_core.integer(world_size, "world_size"),
                drop_remainder=bool(drop_remainder), pad=None if pad == "none" else pad)
        except _USER_ERRORS as e:
            raise _in_user_words(e, "ExcerptBatches") from None
        self.batch_size, self.length = options.batch_size, options.excerpt.length
        self.pad, self.fill, self.drop_last, self.threads = pad, fill, bool(drop_last), threads
        # The epoch of plain integer keys, in shared memory: a DataLoader's persistent workers
        # (forked, or spawned: it crosses as they start) see set_epoch's, where their copy of
        # this object kept the epoch it had when they started (every pass was epoch 0).
        self._epoch_cell = multiprocessing.RawValue("Q", 0)
        self.epoch = 0
        self._next = None  # (epoch, batch) where the next pass begins, when chosen
        self._passes = 0  # passes begun by sampler()'s keys
        self._pass = None  # (epoch, first batch) of the last
        self._datasets = self._sampler = self._layouts = self._rows = self._data_size = None
        self._plans = {}
        datasets = self._open()
        self._items, self._epoch_size = len(datasets[0]), self._sampler.epoch_size
        self._per_rank = len(self._sampler)
        try:
            self._batches = _mmnpz.batches_per_epoch(options, self._sampler._s)
        except _USER_ERRORS as e:
            raise _in_user_words(e, "ExcerptBatches") from None
        for ds, name in zip(datasets, ["data"] + names):
            if len(ds) != self._items:
                raise ValueError(f"field {name!r} has {len(ds)} items, the data {self._items}")
            for dtype, _ in ds.layouts:
                _torch_dtype(dtype, f"field {name!r}")
        if pad == "none":  # short items refused now, not in the middle of an epoch
            o = self._sampler_options
            _refuse_short(datasets[0].lengths, o["length"], o["kind"], datasets[0],
                          "mmnpz.torch.ExcerptBatches(pad='none')")

    @property
    def rank(self):
        """This process's rank: its part of every epoch (fixed when the dataset was made)."""
        return self._sampler_options["rank"]

    @property
    def world_size(self):
        """The number of ranks sharing every epoch (fixed when the dataset was made)."""
        return self._sampler_options["world_size"]

    @property
    def seed(self):
        """The sampler's seed."""
        return self._sampler_options["seed"]

    @property
    def dataset(self):
        """The :class:`mmnpz.Dataset` of the data (opened in this process on first use)."""
        return self._open()[0]

    @property
    def epoch(self):
        """The epoch of plain integer keys (see set_epoch)."""
        cell = self._epoch_cell
        return self._epoch if cell is None else cell.value

    @epoch.setter
    def epoch(self, epoch):
        if epoch >= 1 << 64:
            raise ValueError(f"epoch {epoch} is too large for a 64-bit integer")
        self._epoch = epoch
        if self._epoch_cell is not None:
            self._epoch_cell.value = epoch

    def set_epoch(self, epoch):
        """Makes items b (plain integers) batches of ``epoch``, and ``epoch`` the epoch of the
        next pass over ``sampler()`` (a DataLoader made by :func:`loader`). Without it each
        such pass takes the epoch after the last one's; a DataLoader without that sampler
        (plain integer keys) takes ``epoch`` every pass, as with DistributedSampler. The epoch
        reaches the workers, persistent or not: with each key of sampler(), and through
        shared memory for plain integer keys."""
        epoch = _core.integer(epoch, "set_epoch: epoch")
        if epoch < 0:
            raise ValueError(f"epoch must not be negative, not {epoch}")
        self.epoch = epoch
        self._next = (self.epoch, 0)

    def _begin_pass(self):
        """(epoch, first batch) of a new pass over sampler()'s keys: where set_epoch or a
        loaded state put it, else the epoch after the last pass's (the first pass: ``epoch``)."""
        if self._next is not None:
            epoch, b = self._next
        else:
            epoch, b = self.epoch + (1 if self._passes else 0), 0
        self._next, self._passes, self.epoch = None, self._passes + 1, epoch
        self._pass = (epoch, b)
        return epoch, b

    def __len__(self):
        """Batches per epoch for this rank."""
        return self._batches

    def sampler(self):
        """A torch Sampler yielding ``(epoch, b)`` for every batch of the epoch current when
        iteration begins: the epoch travels with each key, so that persistent workers (which
        keep the copy of this dataset they were started with) follow ``set_epoch``."""
        return _EpochKeys(self)

    def _open(self):
        """[data dataset, field datasets...], opened in this process on first use."""
        if self._datasets is not None:
            return self._datasets
        datasets = [Dataset(self._source, select=self._select, order=self._order, io=self._io)]
        for _, source, select, _ in self._fields:
            datasets.append(Dataset(source, select=select, order=self._order, io=self._io))
        unpickled = hasattr(self, "_items")
        if unpickled:  # are the archives those it was made with? (spawned workers)
            try:  # not another file renamed over a path since (a pickle of 0.1.0 has none)
                for ds, archives in zip(datasets, getattr(self, "_archives", None) or ()):
                    _check_same_archives(ds, archives)
            except ValueError as e:
                raise RuntimeError(f"the archives changed since the batches were defined: "
                                   f"{e}") from None
        else:
            self._archives = [_archives_of(ds) for ds in datasets]
        sampler = Sampler(datasets[0], **self._sampler_options)
        if unpickled and (len(datasets[0]), sampler.epoch_size) != (self._items,
                                                                    self._epoch_size):
            raise RuntimeError(
                f"the archives changed since the batches were defined: {self._items} items "
                f"and {self._epoch_size} samples per epoch then, {len(datasets[0])} and "
                f"{sampler.epoch_size} now")
        # Each field's one (dtype, trailing) of every item, or (layouts, per-item layout ids).
        self._layouts = [ds.layouts[0] if len(ds.layouts) == 1 else (ds.layouts, ds.layout_ids)
                         for ds in datasets]
        # Rows of each field's excerpt (a Fraction: whole or not), asked for every batch.
        self._rows = [self.length * _core.rate(rate) for rate in self._rates()]
        self._datasets, self._sampler = datasets, sampler
        return datasets

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_datasets=None, _sampler=None, _layouts=None, _rows=None, _data_size=None,
                     _plans={})
        if multiprocessing.context.get_spawning_popen() is None:
            # Pickled for keeping, not for a process being started: the epoch, not the cell.
            state.update(_epoch=self.epoch, _epoch_cell=None)
        return state

    def _gather_threads(self):
        if self.threads is not None:
            return self.threads
        info = torch.utils.data.get_worker_info()
        if info is None:
            return 0  # every core
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return max(1, (cores or os.cpu_count() or 1) // max(1, info.num_workers))

    def _key(self, key):
        if isinstance(key, tuple):
            if len(key) != 2:
                raise TypeError(f"ExcerptBatches: a key is a batch b or a pair (epoch, b), "
                                f"not a tuple of {len(key)}")
            epoch, b = key
            epoch = _core.integer(epoch, "ExcerptBatches: the key's epoch")
            if epoch < 0:
                raise ValueError(f"epoch must not be negative, not {epoch}")
        else:
            epoch, b = self.epoch, key
        given = _core.integer(b, "ExcerptBatches: a batch")
        b = given + self._batches if given < 0 else given
        if not 0 <= b < self._batches:
            raise IndexError(f"batch {given} is out of range for an epoch of {self._batches} "
                             "batches")
        return epoch, b

    def _rates(self):
        return [1] + [rate for *_, rate in self._fields]

    def _out_layout(self, f, indices):
        """(dtype, shape) of field f's batch of items ``indices``, or None when gather_fields
        will refuse it (items of several layouts, a fractional number of rows)."""
        rows = self._rows[f]
        if rows.denominator != 1:
            return None
        layout = self._layouts[f]
        if isinstance(layout[1], np.ndarray):  # several layouts: does the batch have one?
            layouts, ids = layout
            used = np.unique(ids[indices])
            if len(used) != 1:
                return None
            layout = layouts[used[0]]
        dtype, trailing = layout
        return dtype, (len(indices), int(rows)) + tuple(trailing)

    def _data_bytes(self):
        """Bytes of the largest batch's fields (each aligned); reckoned once per process (the
        main process and each worker ask for every batch)."""
        if self._data_size is not None:
            return self._data_size
        self._open()
        total = 0
        for f, rows in enumerate(self._rows):
            if rows.denominator != 1:
                continue
            layout = self._layouts[f]
            layouts = layout[0] if isinstance(layout[1], np.ndarray) else [layout]
            row = max(d.itemsize * int(np.prod(t, dtype=np.int64)) for d, t in layouts)
            total = _aligned(total + row * int(rows) * self.batch_size, _ALIGN)
        self._data_size = total
        return total

    def _slot_bytes(self):
        """Bytes of a ring slot, in whole pages: the largest batch, then its int64 valid rows
        of each field, indices and starts (_slot_meta)."""
        return _aligned(max(self._meta_bytes()[1], 1), mmap.PAGESIZE)

    def _meta_bytes(self):
        """Where a slot's meta rows lie (_slot_meta): [start, end) after its data."""
        at = self._data_bytes()
        return at, at + (len(self._rates()) + 2) * self.batch_size * 8

    def _slot_meta(self, memory):
        """The int64 (fields + 2, batch_size) rows of a slot after its data: valid rows of
        each field, then indices, then starts."""
        at, end = self._meta_bytes()
        return memory[at:end].view(np.int64).reshape(-1, self.batch_size)

    def _sample(self, epoch, b):
        """(indices, starts) of batch b of epoch."""
        self._open()
        position = b * self.batch_size
        return self._sampler.sample(epoch, position,
                                    min(self.batch_size, self._per_rank - position))

    def _layouts_of(self, indices):
        self._open()
        return [self._out_layout(f, indices) for f in range(len(self._rows))]

    def _gather(self, indices, starts, outs):
        datasets = self._open()
        return gather_fields([(ds, indices, r) for ds, r in zip(datasets, self._rates())],
                             starts, self.length, outs=outs, pad=self.pad, fill=self.fill,
                             threads=self._gather_threads(), valid=True)

    def _names(self):
        return [name for name, *_ in self._fields]

    def __getitem__(self, key):
        """Batch b of the current epoch (key b) or of ``epoch`` (key ``(epoch, b)``)."""
        epoch, b = self._key(key)
        # In a worker of a plain DataLoader, gathered straight into shared memory: the batch
        # crosses to the main process as is (in a new shared segment).
        return self._batch(epoch, b, shared=torch.utils.data.get_worker_info() is not None)

    def _batch(self, epoch, b, shared=False):
        """Batch b of epoch as a dict of tensors, their memory shared when ``shared``."""
        indices, starts = self._sample(epoch, b)
        tensors = outs = None
        if shared:
            tensors = [None if out is None else _shared_empty(out[1], _torch_dtype(out[0],
                                                                                 "data"))
                       for out in self._layouts_of(indices)]
            outs = [None if t is None else t.numpy() for t in tensors]
        data, valid = self._gather(indices, starts, outs)
        # The tensors themselves, not torch.from_numpy of their views: only they are shared.
        tensors = tensors or [None] * len(data)
        data = [torch.from_numpy(a) if t is None else t for t, a in zip(tensors, data)]
        return _batch_dict(data, valid, indices, starts, epoch, b, self._names())

    def _gather_into(self, memory, indices, starts, layouts):
        """Gathers the batch of samples (indices, starts), whose fields have ``layouts`` (none
        None), into ``memory`` (a ring slot: uint8), with its valid rows, indices and starts
        after the data."""
        _, valid = self._gather(indices, starts, _field_views(memory, layouts))
        meta, count = self._slot_meta(memory), len(indices)
        for f, v in enumerate(valid):
            meta[f, :count] = v
        meta[-2, :count], meta[-1, :count] = indices, starts

    def _slot_plan(self, count):
        """Where the fields of a batch of ``count`` excerpts lie in a slot (_field_places, or
        None when a field has several layouts, which the batch's indices choose from).
        Reckoned once per count: the consumer asks for every batch, its caches cold from the
        batch before, where each numpy call costs several times what it does warm (the old
        per-batch path 60-70 us, this 25-39, in two series)."""
        if count not in self._plans:
            self._open()
            several = any(isinstance(layout[1], np.ndarray) for layout in self._layouts)
            places = None if several else _field_places(self._layouts_of(np.zeros(count,
                                                                                  np.int64)))
            self._plans[count] = places
        return self._plans[count]

    def _from_slot(self, memory, epoch, b):
        """The batch dict of batch b of epoch, gathered into ``memory`` by _gather_into: the
        data tensors rest on it, the small per-excerpt arrays are copied out (in one array,
        a row each)."""
        count = min(self.batch_size, self._per_rank - b * self.batch_size)
        meta = self._slot_meta(memory)[:, :count].copy()
        places = self._slot_plan(count)
        views = (_field_views(memory, self._layouts_of(meta[-2])) if places is None
                 else _views_at(memory, places))
        data = [torch.from_numpy(a) for a in views]
        return _batch_dict(data, meta[:-2], meta[-2], meta[-1], epoch, b, self._names())

    def __repr__(self):
        return (f"<mmnpz.torch.ExcerptBatches: {self._batches} batches of {self.batch_size} "
                f"excerpts of {self.length} rows, epoch {self.epoch}, rank {self.rank} of "
                f"{self.world_size}>")


class _EpochKeys(torch.utils.data.Sampler):
    """Keys (epoch, b) of the batches of one pass: every batch of the epoch the dataset
    chooses when the pass begins (ExcerptBatches._begin_pass), from where set_epoch or a
    loaded state put it."""

    def __init__(self, batches):
        self.batches = batches
        self._first = None  # the first batch of the pass under way

    def __iter__(self):
        # A generator: the pass begins with the first key drawn, not at iter(), which a
        # DataLoader iterator calls twice as it starts its workers.
        epoch, self._first = self.batches._begin_pass()
        try:
            for b in range(self._first, len(self.batches)):
                yield epoch, b
        finally:
            self._first = None

    def __len__(self):
        """Batches of the pass under way, else of the next one (from where set_epoch or a
        loaded state put it)."""
        first = self._first
        if first is None:
            first = self.batches._next[1] if self.batches._next is not None else 0
        return len(self.batches) - first


class ExcerptLoader(torch.utils.data.DataLoader):
    """The ``torch.utils.data.DataLoader`` that :func:`loader` makes: items are whole batches
    of an :class:`ExcerptBatches` (``batch_size=None``), keyed ``(epoch, b)`` by
    ``dataset.sampler()``.

    Each ``iter()`` is a pass over a new epoch: the epoch after the last pass's, or the one
    given to ``dataset.set_epoch`` (or by ``load_state_dict``) since. ``state_dict()`` says
    where the batch after the last one taken begins; a loader over the same archives and
    options given it with ``load_state_dict`` begins its next pass there, yielding exactly
    the batches that would have followed, with any number of workers.

    With workers, the batches do not travel through torch's worker queues: each iterator
    starts its own worker processes (with the loader's ``multiprocessing_context``,
    ``worker_init_fn``, seeds and ``torch.utils.data.get_worker_info()`` as torch sets them)
    and one ring of shared buffers, ``num_workers * prefetch_factor + 3`` batches per worker
    (a slot is backed by memory once written, and only as many are written as are lent at
    once: with a consumer keeping one batch, none falls out of the ring). Each
    worker, whenever free, claims the pass's next batch and gathers it into its free slot
    given back last (the likeliest to be in a CPU cache), at most ``num_workers *
    prefetch_factor`` batches ahead of the consumer in all (as in torch), so a worker slowed
    down (sharing a core with the consumer) holds back none of the others; only semaphores
    cross between the processes, and the consumer takes the batches in order. Workers run
    under ``SCHED_BATCH`` where Linux allows it (see _batch_policy). The batch's tensors in the
    main process rest on that slot until the last of them (or of their views) is gone, and
    only then may the worker reuse it. When the main process holds every slot of a worker (a
    consumer keeping batches), the worker sends the next batch in a new shared-memory
    segment, as a DataLoader does by default. A worker's exception is raised in the main
    process with its traceback, a ``worker_init_fn``'s by the end of the pass (a worker whose
    init failed claims no batch); a worker that dies, or ``timeout`` seconds without a batch
    (or, at the end of the pass, without every worker begun), is a RuntimeError. Persistent
    workers wait for the next pass; a pass left before its end stops them, and the next pass
    starts new ones.
    """

    def __init__(self, dataset, **options):
        super().__init__(dataset, batch_size=None, sampler=dataset.sampler(), **options)
        self._taken = None  # (epoch, b) of the last batch taken in the last pass
        self._passes_before = 0  # the dataset's passes begun before the last pass
        self._iterations = 0  # iter() and load_state_dict() calls: the last one's pass is live

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        return _Workers(self)

    def __iter__(self):
        self._taken, self._passes_before = None, self.dataset._passes
        self._iterations += 1
        return _Pass(super().__iter__(), self, self._iterations)

    def state_dict(self):
        """Where the next batch begins (this rank's sample position in its epoch), plus the
        options that must agree on resume: the keys of :meth:`mmnpz.Loader.state_dict`."""
        batches = self.dataset
        if batches._next is not None:  # set_epoch or load_state_dict since
            epoch, b = batches._next
        elif self._taken is not None:
            epoch, b = self._taken[0], self._taken[1] + 1
        elif batches._passes > self._passes_before:  # the last pass began, none of it taken yet
            epoch, b = batches._pass
        else:
            epoch, b = batches.epoch + (1 if batches._passes else 0), 0
        if b >= len(batches):
            epoch, b = epoch + 1, 0
        return {"epoch": epoch, "position": b * batches.batch_size, "seed": batches.seed,
                "kind": batches._sampler_options["kind"], "batch_size": batches.batch_size,
                "rank": batches.rank, "world_size": batches.world_size,
                **_core.resume_options(batches._sampler, batches.drop_last)}

    def load_state_dict(self, state):
        """Makes the next pass begin where ``state`` (from state_dict) says."""
        epoch, position = _core.saved_place(state, self.state_dict())
        batches = self.dataset
        if position % batches.batch_size or position // batches.batch_size > len(batches):
            raise ValueError(f"the saved state's epoch {epoch} and position {position} are "
                             f"not the start of a batch of {batches.batch_size} in an epoch "
                             f"of {len(batches)} batches")
        b = position // batches.batch_size
        if b == len(batches):  # the end of the epoch: the start of the next
            epoch, b = epoch + 1, 0
        batches.epoch, batches._next = epoch, (epoch, b)
        self._iterations += 1  # ends the pass under way


# Seconds between checks that the other side of a worker protocol still lives (torch's
# MP_STATUS_CHECK_INTERVAL).
_POLL = 5.0
# A _Workers control array (shared int64, read and written under its claim lock but the last
# two): the pass (epoch, first and end batch), the next batch no worker has claimed, stop, and
# 1 + a worker whose worker_init_fn failed (0 while none did).
_EPOCH, _FIRST, _END, _NEXT, _STOP, _BROKEN = range(6)
# A worker's state (its row of a _Workers' shared int64 array), once it has begun.
_STARTING, _RUNNING, _INIT_FAILED = range(3)
# Mailbox codes besides a slot number: the batch or the worker's exception is in its queue.
_BY_QUEUE, _FAILED = -1, -2


def _seed_torch(seed):
    """``torch.manual_seed(seed)``, as torch's own workers call it. torch 1.x seeds the default
    generator there and queues a seed for CUDA, to be set if CUDA is initialised, with a stack
    trace for its error message: formatting it took 4-12 ms of a forked worker's start here (up
    to 23). A torch 1.x built without CUDA can never run that seed, so only the generator is
    seeded then; other builds and versions (torch 2 seeds more devices) call manual_seed."""
    if torch.__version__.split(".")[0] == "1" and not torch.cuda._is_compiled():
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _batch_policy():
    """Schedules this process (a worker) as SCHED_BATCH where Linux has it: the same share of
    the CPUs at the same nice value, but a worker woken (its credit back) no longer preempts
    the consumer, which is the pipeline's bottleneck once the workers keep up: on two cores,
    2,000 batches took 1.30-1.36 s against 1.47-1.70 s under SCHED_OTHER (five alternating
    rounds). A worker_init_fn runs after it and may choose otherwise; a system that refuses
    the call (a seccomp policy) leaves the policy as it was."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        try:
            if os.sched_getscheduler(0) == os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass


def _worker_loop(batches, ring, control, state, claim, mailbox, start, credit, ready, queue,
                 worker, workers, base_seed, init_fn):
    """Worker process ``worker`` of a _Workers: for each pass the main process starts (via
    ``control`` and ``start``), claims the pass's next batch whenever ``credit`` allows it (one
    semaphore for all the workers), gathers it into a free slot of its own in ``ring`` (or,
    when none is free or the batch's layout is only known once gathered, sends it through
    ``queue``), writes which worker and slot hold it in the batch's ``mailbox`` row and
    releases that row's ``ready``. Its ``state`` says whether it began; a worker whose
    ``worker_init_fn`` failed sends the exception through its queue and claims nothing.
    Returns when the loader stops or the main process is gone.

    Batches are claimed, not dealt: with two workers and the consumer on two cores, the
    scheduler kept the consumer and one worker on one core and the other worker alone on the
    other, and batches dealt in turn (w, w + n, ...) went at the pace of the slower one while
    the faster waited for credit half the time."""
    from torch.utils.data._utils import worker as torch_worker

    # The main process is gone when its sentinel (a pipe or socket it holds open, under every
    # start method) reads as closed. os.getppid() compared with its value at start is not
    # enough alone: a forked worker first scheduled after the main process died starts with
    # the reaper as its parent and would wait forever.
    parent, first_parent = multiprocessing.parent_process(), os.getppid()

    def orphaned():
        return os.getppid() != first_parent or (parent is not None and not parent.is_alive())
    if torch.get_num_threads() != 1:  # the call took 3-13 ms in a new process here
        torch.set_num_threads(1)
    _batch_policy()
    seed = base_seed + worker
    random.seed(seed)
    _seed_torch(seed)
    np.random.seed(torch_worker._generate_state(base_seed, worker))
    torch_worker._worker_info = torch_worker.WorkerInfo(id=worker, num_workers=workers,
                                                        seed=seed, dataset=batches)
    where = f"in DataLoader worker process {worker}"
    control, state, mailbox = control.numpy(), state.numpy(), mailbox.numpy()
    rows = mailbox.shape[0]
    queue.cancel_join_thread()  # a worker stopped with batches unread must not hang exiting
    try:
        if init_fn is not None:
            init_fn(worker)
    except Exception:
        queue.put(ExceptionWrapper(where=where))
        state[worker] = _INIT_FAILED
        control[_BROKEN] = worker + 1  # one store: which worker, its error already queued

    def wait(semaphore):  # False once the loader stops or its process is gone
        while not semaphore.acquire(timeout=_POLL):
            if control[_STOP] or orphaned():
                return False
        return not control[_STOP]

    if state[worker] == _INIT_FAILED:
        while wait(start):  # alive until stopped: its exit would be another error
            pass
        return
    state[worker] = _RUNNING

    def next_batch():  # (epoch, first, b) claimed, None once the pass has none, False to stop
        while not claim.acquire(timeout=_POLL):
            if control[_STOP] or orphaned():
                return False
        try:
            if control[_STOP]:
                return False
            epoch, first, end, b = control[:_STOP].tolist()
            if b >= end:
                return None
            control[_NEXT] = b + 1
            return epoch, first, b
        finally:
            claim.release()

    try:
        while wait(start):
            while True:
                if not wait(credit):
                    return
                claimed = next_batch()
                if claimed is False:
                    return
                if claimed is None:  # the pass is over: the credit is the next claim's
                    credit.release()
                    break
                epoch, first, b = claimed
                code, slot = _FAILED, None
                try:
                    indices, starts = batches._sample(epoch, b)
                    layouts = batches._layouts_of(indices)
                    slot = None if None in layouts else ring.take(worker)
                    if slot is not None:
                        batches._gather_into(ring.slot(worker, slot), indices, starts, layouts)
                        code, slot = slot, None
                    else:
                        queue.put(batches._batch(epoch, b, shared=True))
                        code = _BY_QUEUE
                except Exception:
                    if slot is not None:
                        ring.untake(worker, slot)
                    queue.put(ExceptionWrapper(where=where))
                row = (b - first) % rows
                mailbox[row] = worker, code
                ready[row].release()
    except KeyboardInterrupt:
        pass  # Ctrl-C reaches the whole process group: the main process reports it


class _Workers:
    """The iterator of an ExcerptLoader with workers: its own worker processes (see
    ExcerptLoader) and the main process's side of their protocol."""

    def __init__(self, loader):
        batches = self._batches = loader.dataset
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor or 2
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._keys = loader.sampler  # told which pass is under way, for len(loader)
        self._pin_device = loader.pin_memory_device or None
        self._pin_memory = loader.pin_memory and bool(self._pin_device or
                                                      torch.cuda.is_available())
        self._context = loader.multiprocessing_context or torch.multiprocessing
        self._init_fn = loader.worker_init_fn
        self._base_seed = torch.empty((), dtype=torch.int64).random_(
            generator=loader.generator).item()
        # Batches claimed and not yet taken: at most prefetch_factor per worker, as torch has
        # them, but any worker may hold all of them.
        self._rows = self._num_workers * self._prefetch
        # Slots per worker: all the batches in flight may be one worker's (another starting
        # late, a spawned one), and while they are, the consumer holds the batch it was handed
        # last, the one before (still bound while `for` takes the next) and one it keeps.
        # A slot never needed is never written, so costs no memory (see _Ring.take).
        self._mmnpz_ring = _Ring(self._num_workers, self._rows + 3, batches._slot_bytes())
        self._releases_of = {}  # (worker, slot) lent: the weak reference that gives it back
        self._workers = []
        self._next = self._end = 0
        self._start_workers()
        self._reset(loader, first_iter=True)

    def _start_workers(self):
        context, workers, rows = self._context, self._num_workers, self._rows
        self._control = _shared_empty((6,), torch.int64).zero_()
        self._state = _shared_empty((workers,), torch.int64).zero_()
        self._mailbox = _shared_empty((rows, 2), torch.int64).zero_()
        self._control_np, self._mailbox_np = self._control.numpy(), self._mailbox.numpy()
        self._state_np = self._state.numpy()
        self._check_at = time.monotonic() + _POLL
        self._claim = context.Semaphore(1)
        self._start = [context.Semaphore(0) for _ in range(workers)]
        self._credit = context.Semaphore(rows)
        self._ready = [context.Semaphore(0) for _ in range(rows)]
        self._queues = [context.Queue() for _ in range(workers)]
        try:
            for w in range(workers):
                process = context.Process(
                    target=_worker_loop, daemon=True,
                    args=(self._batches, self._mmnpz_ring, self._control, self._state,
                          self._claim, self._mailbox, self._start[w], self._credit,
                          self._ready, self._queues[w], w, workers, self._base_seed,
                          self._init_fn))
                process.start()
                self._workers.append(process)
        except BaseException:
            self._stop_workers()
            raise

    def _stop_workers(self, grace=None):
        """Stops the workers (each finishes the batch it is gathering, if it does within
        `grace` seconds for all of them; else it is terminated) and frees the slots they took
        for batches never handed out."""
        if not self._workers:
            return
        self._control_np[_STOP] = 1
        for semaphore in self._start + [self._credit] * len(self._workers) + [self._claim]:
            semaphore.release()
        deadline = time.monotonic() + (_POLL if grace is None else grace)
        for process in self._workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join()
        self._workers = []
        for queue in self._queues:
            queue.close()
            queue.cancel_join_thread()
        self._mmnpz_ring.reclaim()

    def _reset(self, loader, first_iter=False):
        """Begins a pass (the epoch that ExcerptBatches chooses): persistent workers are told
        to go on, unless the last pass was left before its end (they are restarted then)."""
        if not first_iter and (self._next < self._end or not self._workers):
            self._stop_workers()
            self._start_workers()
        epoch, first = self._batches._begin_pass()
        self._epoch, self._first, self._next, self._end = epoch, first, first, len(self._batches)
        self._keys._first = first
        # Under the claim lock: a worker finding the last pass over may be reading the control.
        self._wait(lambda timeout: self._claim.acquire(timeout=timeout))
        self._control_np[:_STOP] = epoch, first, self._end, first
        self._claim.release()
        for semaphore in self._start:  # a worker that claimed this pass's batches already
            semaphore.release()         # finds none left when it takes its start

    def __iter__(self):
        return self

    def __len__(self):
        """Batches of the pass under way."""
        return self._end - self._first

    def _wait(self, take):
        """take(timeout) until it returns True (a batch is ready, its queue item here, or the
        claim lock taken), checking meanwhile that every worker lives, and the loader's
        timeout."""
        deadline = None if self._timeout <= 0 else time.monotonic() + self._timeout
        while True:
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))
            if take(wait):
                return
            self._check_workers()
            if deadline is not None and time.monotonic() >= deadline:
                self._stop_workers(grace=0.0)  # the late workers are not waited for again
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")

    def _get(self, w, timeout, got):
        try:
            got.append(self._queues[w].get(timeout=timeout))
            return True
        except queue_module.Empty:
            return False

    def _check_workers(self):
        """Raises a worker's worker_init_fn error, or a RuntimeError for a worker gone."""
        if self._control_np[_BROKEN]:
            w = int(self._control_np[_BROKEN]) - 1
            try:  # put before the flag was set, so in the queue or on its way
                error = self._queues[w].get(timeout=_POLL)
            except queue_module.Empty:
                error = None
            self._stop_workers()
            if error is None:
                raise RuntimeError(f"the worker_init_fn of DataLoader worker {w} failed")
            error.reraise()
        for process in self._workers:
            if not process.is_alive():
                self._stop_workers()
                raise RuntimeError(f"DataLoader worker (pid {process.pid}) exited "
                                   f"unexpectedly with exit code {process.exitcode}")
        self._check_at = time.monotonic() + _POLL

    def _began(self, timeout):
        """True once every worker has run its worker_init_fn (waits up to timeout)."""
        deadline = time.monotonic() + timeout
        while (self._state_np == _STARTING).any() and not self._control_np[_BROKEN]:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def __next__(self):
        if self._next >= self._end or not self._workers:
            if self._workers:
                # Workers claim batches: one that never began (or died without a batch) would
                # go unnoticed in a pass the others finished. It is an error, as in torch.
                self._wait(self._began)
                self._check_workers()
            self._keys._first = None
            if not self._persistent:
                self._stop_workers()
            raise StopIteration
        if self._control_np[_BROKEN] or time.monotonic() >= self._check_at:
            self._check_workers()
        b, ring = self._next, self._mmnpz_ring
        row = (b - self._first) % self._rows
        ready = self._ready[row]
        if not ready.acquire(False):
            self._wait(lambda timeout: ready.acquire(timeout=timeout))
        w, code = self._mailbox_np[row].tolist()
        if code >= 0:
            memory = ring.slot(w, code)
            self._releases_of[w, code] = ring.lend(w, code, memory)
            batch = self._batches._from_slot(memory, self._epoch, b)
        else:
            got = []
            self._wait(lambda timeout: self._get(w, timeout, got))
            batch = got[0]
            if isinstance(batch, ExceptionWrapper):
                self._stop_workers()
                batch.reraise()
        self._credit.release()
        self._next += 1
        if self._pin_memory:
            batch = pin_memory(batch, self._pin_device)
        return batch

    def __del__(self):
        if getattr(self, "_keys", None) is not None:
            self._keys._first = None
        if getattr(self, "_workers", None):
            self._stop_workers()


class _Pass:
    """A DataLoader iterator noting for state_dict which batch was taken last; ended (its
    next batch a RuntimeError) by a newer iter() or load_state_dict() of its loader, which
    would otherwise see its place overwritten by this pass (or, with persistent workers, this
    pass take the batches of the newer one, whose iterator torch reuses)."""

    def __init__(self, iterator, loader, iteration):
        self._iterator, self._loader, self._iteration = iterator, loader, iteration

    def __iter__(self):
        return self

    def __next__(self):
        if self._loader._iterations != self._iteration:
            raise RuntimeError("ExcerptLoader: this pass was ended by a newer iter() or "
                               "load_state_dict() of the same loader; iterate the loader "
                               "again to go on from its place")
        batch = next(self._iterator)
        self._loader._taken = batch["epoch"], batch["batch"]
        return batch

    def __len__(self):
        return len(self._iterator)


def loader(source, *, num_workers=0, multiprocessing_context=None, pin_memory=False,
           persistent_workers=False, prefetch_factor=None, timeout=0, worker_init_fn=None,
           **options):
    """An :class:`ExcerptLoader` (a ``torch.utils.data.DataLoader``) over an
    :class:`ExcerptBatches`.

    ``source`` is an ExcerptBatches, or the archives to make one from with ``options`` (see
    ExcerptBatches). Each pass over the loader is a new epoch (or the one given to
    ``loader.dataset.set_epoch``); ``state_dict()`` / ``load_state_dict()`` resume mid-epoch.
    Workers may be spawned or forked; spawned ones open the archives themselves. Batches
    from workers arrive through rings of shared buffers reused once released (see
    ExcerptLoader).
    """
    num_workers = _core.integer(num_workers, "loader: num_workers")
    if prefetch_factor is not None:
        # torch 1.13 asserts prefetch_factor > 0 (an AssertionError without a message) and
        # takes a float until the ring's size is computed from it.
        prefetch_factor = _core.integer(prefetch_factor, "loader: prefetch_factor")
        if prefetch_factor <= 0:
            raise ValueError(f"loader: prefetch_factor must be positive, not {prefetch_factor}")
    if timeout and not num_workers:
        # torch asserts it away (a bare AssertionError) at iter().
        raise ValueError(f"loader: timeout={timeout!r} applies to worker processes "
                         f"(num_workers > 0); batches made in this process have none")
    if isinstance(source, ExcerptBatches):
        if options:
            raise TypeError(f"options {sorted(options)} are for making an ExcerptBatches, "
                            f"and one was given")
        batches = source
    else:
        batches = ExcerptBatches(source, **options)
    extra = {} if prefetch_factor is None else {"prefetch_factor": prefetch_factor}
    return ExcerptLoader(
        batches, num_workers=num_workers,
        multiprocessing_context=multiprocessing_context if num_workers else None,
        pin_memory=pin_memory, persistent_workers=persistent_workers and num_workers > 0,
        timeout=timeout, worker_init_fn=worker_init_fn, **extra)
