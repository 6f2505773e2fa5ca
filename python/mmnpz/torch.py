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
without another copy. Under :func:`loader` that shared memory is a ring of buffers made once
per worker: a batch crosses the worker queue as a slot number, and its slot is reused once the
main process has let go of every tensor of the batch. This module imports torch; ``import
mmnpz`` does not.
"""

import collections.abc
import itertools
import mmap
import operator
import os
import weakref

import numpy as np
import torch
import torch.distributed
import torch.utils.data

from . import _core, _mmnpz
from .data import Dataset, Sampler, _refuse_short, gather_fields

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


def _aligned(n, to=_ALIGN):
    return -(-n // to) * to


# The rings of this process's live DataLoader iterators, by token: where a batch that crossed
# a worker queue as a slot number finds its memory.
_RINGS = weakref.WeakValueDictionary()
_TOKENS = itertools.count()


class _Ring:
    """Output memory for the batches of one DataLoader iterator's workers, made once in the
    main process before the workers start (forked ones inherit it, spawned ones receive it
    pickled, as torch shares tensors): ``slots`` buffers of ``slot_bytes`` per worker in one
    shared tensor, and a shared int32 flag per slot, 0 when free, 1 when lent.

    A worker takes the free slot released last: its bytes are the likeliest to be still in a
    CPU cache (a batch is megabytes, and writing over memory that has left the caches costs
    the worker about half as much again as the copy itself). ``released`` holds the order in
    which the main process gave the slots back.

    Only the worker sets a flag (when it takes the slot for a batch), and only the main process
    clears it: when the last tensor of the batch made on the slot is gone (a weak reference to
    the memoryview all of them rest on, so no reference counting). The stores of the next
    batch cannot pass the main process's last reads of the slot: there, the flag is cleared
    after torch's atomic (acquire-release) drop of the storage reference; in the worker, the
    slot is written only once its flag was read as 0 (a control dependency: no CPU makes a
    store visible ahead of the branch it depends on)."""

    def __init__(self, workers, slots, slot_bytes):
        self.token = f"{os.getpid()}:{next(_TOKENS)}"
        self.slots, self.slot_bytes = slots, slot_bytes
        self.memory = _shared_empty((workers * slots * slot_bytes,), torch.uint8)
        self.flags = _shared_empty((workers, slots), torch.int32).zero_()
        self.released = _shared_empty((workers, slots), torch.int64).zero_()
        self._releases = itertools.count(1)
        self._views = None
        _RINGS[self.token] = self

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_views"] = None  # numpy views would be pickled by value
        state["_releases"] = None  # the main process numbers the releases
        return state

    def _arrays(self):
        if self._views is None:
            self._views = self.memory.numpy(), self.flags.numpy(), self.released.numpy()
        return self._views

    def take(self, worker):
        """The free slot of ``worker``'s released last, now lent (worker side), or None when
        all are lent."""
        _, flags, released = self._arrays()
        flags, order = flags[worker], released[worker].tolist()
        slot = None
        for s, lent in enumerate(flags.tolist()):
            if not lent and (slot is None or order[s] > order[slot]):
                slot = s
        if slot is not None:
            flags[slot] = 1
        return slot

    def give_back(self, worker, slot):
        _, flags, released = self._arrays()
        if self._releases is not None:
            released[worker, slot] = next(self._releases)
        flags[worker, slot] = 0

    def slot(self, worker, slot):
        """The bytes of a slot as a uint8 array resting on a memoryview of its own."""
        start = (worker * self.slots + slot) * self.slot_bytes
        return np.frombuffer(memoryview(self._arrays()[0])[start:start + self.slot_bytes],
                             np.uint8)


def _field_views(memory, layouts):
    """Arrays of (dtype, shape) laid one after another in ``memory`` (uint8), each aligned."""
    views, offset = [], 0
    for dtype, shape in layouts:
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        views.append(memory[offset:offset + nbytes].view(dtype).reshape(shape))
        offset = _aligned(offset + nbytes)
    return views


class _SlotBatch:
    """What a worker returns for a batch gathered into its ring: it crosses the queue as the
    slot number, the layouts and the small per-excerpt arrays (pickled by value), and the
    main process unpickles it as the batch dict of tensors on the ring's memory."""

    def __init__(self, token, worker, slot, layouts, rest):
        self.token, self.worker, self.slot = token, worker, slot
        self.layouts, self.rest = layouts, rest

    def __reduce__(self):
        layouts = [(dtype.str, shape) for dtype, shape in self.layouts]
        return _slot_batch, (self.token, self.worker, self.slot, layouts, self.rest)


def _slot_batch(token, worker, slot, layouts, rest):
    """The main process's batch dict of the batch in ``worker``'s ring slot ``slot``."""
    ring = _RINGS.get(token)
    if ring is None:
        raise RuntimeError("a batch came from a DataLoader worker whose loader is gone")
    memory = ring.slot(worker, slot)
    # Every tensor below holds (through its numpy array) the memoryview under `memory`:
    # when the last is gone the slot is free for the worker's next batch.
    weakref.finalize(memory.base, ring.give_back, worker, slot).atexit = False
    layouts = [(np.dtype(d), tuple(shape)) for d, shape in layouts]
    data = [torch.from_numpy(a) for a in _field_views(memory, layouts)]
    return _batch_dict(data, *rest)


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
        options = _mmnpz.LoaderOptions(
            batch_size=batch_size, drop_last=drop_last,
            excerpt=_mmnpz.ExcerptOptions(length=length, pad=pad, threads=threads or 0))
        rank, world_size = _core.rank_and_world(rank, world_size)
        if isinstance(fields, collections.abc.Mapping):
            fields = list(fields.items())
        else:
            fields = [(f"field{k}", field) for k, field in enumerate(fields, 1)]
        self._fields = []
        for name, field in fields:
            if not isinstance(name, str) or name in _RESERVED:
                raise ValueError(f"a field cannot be named {name!r} (reserved: {_RESERVED})")
            field_source, field_select, rate = field
            self._fields.append((name, source if field_source is None else field_source,
                                 field_select, rate))
        names = [f[0] for f in self._fields]
        clashes = set(names) & {n + "_valid" for n in names}
        if len(set(names)) != len(names) or clashes:
            raise ValueError(f"field names must be distinct and not clash with "
                             f"'<name>_valid': {names}")
        self._source, self._select, self._order, self._io = source, select, order, io
        self._sampler_options = dict(
            kind=kind, seed=int(seed), length=int(length), hop=int(hop),
            shuffle_windows=bool(shuffle_windows), random_crop=bool(random_crop),
            num_samples=int(num_samples), rank=int(rank), world_size=int(world_size),
            drop_remainder=bool(drop_remainder), pad=None if pad == "none" else pad)
        self.batch_size, self.length = options.batch_size, options.excerpt.length
        self.pad, self.fill, self.drop_last, self.threads = pad, fill, bool(drop_last), threads
        self.epoch = 0
        self._next = None  # (epoch, batch) where the next pass begins, when chosen
        self._passes = 0  # passes begun by sampler()'s keys
        self._pass = None  # (epoch, first batch) of the last
        self._ring = None  # a DataLoader iterator's _Ring while its workers start
        self._datasets = self._sampler = self._layouts = None
        datasets = self._open()
        self._items, self._epoch_size = len(datasets[0]), self._sampler.epoch_size
        self._per_rank = len(self._sampler)
        self._batches = _mmnpz.batches_per_epoch(options, self._sampler._s)
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

    def set_epoch(self, epoch):
        """Makes items b (plain integers) batches of ``epoch``, and ``epoch`` the epoch of the
        next pass over ``sampler()`` (a DataLoader made by :func:`loader`). Without it each
        such pass takes the epoch after the last one's; a DataLoader without that sampler
        (plain integer keys) takes ``epoch`` every pass, as with DistributedSampler. The epoch
        reaches the workers, persistent or not, with each key."""
        if operator.index(epoch) < 0:
            raise ValueError(f"epoch must not be negative, not {epoch}")
        self.epoch = int(epoch)
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
        sampler = Sampler(datasets[0], **self._sampler_options)
        if hasattr(self, "_items"):  # unpickled: are the archives those it was made with?
            if (len(datasets[0]), sampler.epoch_size) != (self._items, self._epoch_size):
                raise RuntimeError(
                    f"the archives changed since the batches were defined: {self._items} items "
                    f"and {self._epoch_size} samples per epoch then, {len(datasets[0])} and "
                    f"{sampler.epoch_size} now")
        # Each field's one (dtype, trailing) of every item, or (layouts, per-item layout ids).
        self._layouts = [ds.layouts[0] if len(ds.layouts) == 1 else (ds.layouts, ds.layout_ids)
                         for ds in datasets]
        self._datasets, self._sampler = datasets, sampler
        return datasets

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_datasets=None, _sampler=None, _layouts=None)
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
            epoch, b = key
            epoch = operator.index(epoch)
            if epoch < 0:
                raise ValueError(f"epoch must not be negative, not {epoch}")
        else:
            epoch, b = self.epoch, key
        b = operator.index(b)
        if b < 0:
            b += self._batches
        if not 0 <= b < self._batches:
            raise IndexError(f"batch {b} is out of range for an epoch of {self._batches} batches")
        return epoch, b

    def _rates(self):
        return [1] + [rate for *_, rate in self._fields]

    def _out_layout(self, f, indices, rate):
        """(dtype, shape) of field f's batch of items ``indices``, or None when gather_fields
        will refuse it (items of several layouts, a fractional number of rows)."""
        rows = self.length * _core.rate(rate)
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

    def _slot_bytes(self):
        """Bytes of the largest batch (every field, each aligned), in whole pages."""
        self._open()
        total = 0
        for f, rate in enumerate(self._rates()):
            rows = self.length * _core.rate(rate)
            if rows.denominator != 1:
                continue
            layout = self._layouts[f]
            layouts = layout[0] if isinstance(layout[1], np.ndarray) else [layout]
            row = max(d.itemsize * int(np.prod(t, dtype=np.int64)) for d, t in layouts)
            total = _aligned(total + row * int(rows) * self.batch_size)
        return _aligned(max(total, 1), mmap.PAGESIZE)

    def __getitem__(self, key):
        """Batch b of the current epoch (key b) or of ``epoch`` (key ``(epoch, b)``)."""
        epoch, b = self._key(key)
        datasets = self._open()
        position = b * self.batch_size
        count = min(self.batch_size, self._per_rank - position)
        indices, starts = self._sampler.sample(epoch, position, count)
        rates = self._rates()
        outs = tensors = slot = None
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            layouts = [self._out_layout(f, indices, r) for f, r in enumerate(rates)]
            ring = self._ring
            if ring is not None and None not in layouts:
                slot = ring.take(worker.id)  # None when the main process holds every slot
            if slot is not None:
                outs = _field_views(ring.slot(worker.id, slot), layouts)
            else:
                # Gathered straight into shared memory, the batch crosses to the main process
                # as is (in a new shared segment).
                tensors = [None if out is None else _shared_empty(out[1], _torch_dtype(out[0],
                                                                                     "data"))
                           for out in layouts]
                outs = [None if t is None else t.numpy() for t in tensors]
        try:
            data, valid = gather_fields([(ds, indices, r) for ds, r in zip(datasets, rates)],
                                        starts, self.length, outs=outs, pad=self.pad,
                                        fill=self.fill, threads=self._gather_threads(),
                                        valid=True)
        except BaseException:
            if slot is not None:
                ring.give_back(worker.id, slot)
            raise
        rest = (valid, indices, starts, epoch, b, [name for name, *_ in self._fields])
        if slot is not None:
            return _SlotBatch(ring.token, worker.id, slot, layouts, rest)
        # The tensors themselves, not torch.from_numpy of their views: only they are shared.
        tensors = tensors or [None] * len(data)
        data = [torch.from_numpy(a) if t is None else t for t, a in zip(tensors, data)]
        return _batch_dict(data, *rest)

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

    def __iter__(self):
        # A generator: the pass begins with the first key drawn, not at iter(), which a
        # DataLoader iterator calls twice as it starts its workers.
        epoch, first = self.batches._begin_pass()
        for b in range(first, len(self.batches)):
            yield epoch, b

    def __len__(self):
        return len(self.batches)


class ExcerptLoader(torch.utils.data.DataLoader):
    """The ``torch.utils.data.DataLoader`` that :func:`loader` makes: items are whole batches
    of an :class:`ExcerptBatches` (``batch_size=None``), keyed ``(epoch, b)`` by
    ``dataset.sampler()``.

    Each ``iter()`` is a pass over a new epoch: the epoch after the last pass's, or the one
    given to ``dataset.set_epoch`` (or by ``load_state_dict``) since. ``state_dict()`` says
    where the batch after the last one taken begins; a loader over the same archives and
    options given it with ``load_state_dict`` begins its next pass there, yielding exactly
    the batches that would have followed, with any number of workers.

    With workers, each DataLoader iterator makes one ring of shared buffers per worker,
    ``prefetch_factor + 2`` batches each: a worker gathers a batch into the free slot given
    back last (the likeliest to be in a CPU cache) and sends the slot number; the batch's
    tensors in the main process rest on that slot until the last of them (or of their
    views) is gone, and only then may the worker reuse it. When
    the main process holds every slot of a worker (a consumer keeping batches), the worker
    sends the next batch in a new shared-memory segment, as a DataLoader does by default.
    """

    def __init__(self, dataset, **options):
        super().__init__(dataset, batch_size=None, sampler=dataset.sampler(), **options)
        self._taken = None  # (epoch, b) of the last batch taken in the last pass
        self._passes_before = 0  # the dataset's passes begun before the last pass

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        ring = _Ring(self.num_workers, (self.prefetch_factor or 2) + 2,
                     self.dataset._slot_bytes())
        self.dataset._ring = ring  # forked or pickled into each worker as it starts
        try:
            iterator = super()._get_iterator()
        finally:
            self.dataset._ring = None
        iterator._mmnpz_ring = ring  # its batches find it while the workers live
        return iterator

    def __iter__(self):
        self._taken, self._passes_before = None, self.dataset._passes
        return _Pass(super().__iter__(), self)

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
                "rank": batches.rank, "world_size": batches.world_size}

    def load_state_dict(self, state):
        """Makes the next pass begin where ``state`` (from state_dict) says."""
        mine = self.state_dict()
        for key in ("seed", "kind", "batch_size", "rank", "world_size"):
            if state.get(key, mine[key]) != mine[key]:
                raise ValueError(f"the saved state has {key}={state[key]!r}, this loader "
                                 f"{mine[key]!r}")
        batches = self.dataset
        epoch, position = operator.index(state["epoch"]), operator.index(state["position"])
        if epoch < 0 or position < 0 or position % batches.batch_size or (
                position // batches.batch_size > len(batches)):
            raise ValueError(f"the saved state's epoch {epoch} and position {position} are "
                             f"not the start of a batch of {batches.batch_size} in an epoch "
                             f"of {len(batches)} batches")
        b = position // batches.batch_size
        if b == len(batches):  # the end of the epoch: the start of the next
            epoch, b = epoch + 1, 0
        batches.epoch, batches._next = epoch, (epoch, b)


class _Pass:
    """A DataLoader iterator noting for state_dict which batch was taken last."""

    def __init__(self, iterator, loader):
        self._iterator, self._loader = iterator, loader

    def __iter__(self):
        return self

    def __next__(self):
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
