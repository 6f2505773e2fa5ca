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
without another copy. This module imports torch; ``import mmnpz`` does not.
"""

import collections.abc
import operator
import os

import numpy as np
import torch
import torch.distributed
import torch.utils.data

from . import _core, _mmnpz
from .data import Dataset, Sampler, gather_fields

__all__ = ["ExcerptBatches", "loader"]

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
    own gather thread pool on first use).

    Pickling sends the options only (a few hundred bytes): the archives are opened again, on
    first use, in the process that unpickles. In a DataLoader worker the excerpts are gathered
    straight into tensors in shared memory.
    """

    def __init__(self, source, *, length, batch_size, kind="shuffle", seed=0, hop=0,
                 shuffle_windows=False, random_crop=True, num_samples=0, drop_remainder=True,
                 rank=None, world_size=None, pad="none", fill=0, drop_last=True, select=None,
                 order="concatenate", fields=(), threads=None):
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
        self._source, self._select, self._order = source, select, order
        self._sampler_options = dict(
            kind=kind, seed=int(seed), length=int(length), hop=int(hop),
            shuffle_windows=bool(shuffle_windows), random_crop=bool(random_crop),
            num_samples=int(num_samples), rank=int(rank), world_size=int(world_size),
            drop_remainder=bool(drop_remainder))
        self.batch_size, self.length = options.batch_size, options.excerpt.length
        self.pad, self.fill, self.drop_last, self.threads = pad, fill, bool(drop_last), threads
        self.epoch = 0
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
        """Makes items b (plain integers) batches of ``epoch``. As DistributedSampler's: call
        it before iterating each epoch; a DataLoader made by :func:`loader` (or given
        ``sampler=batches.sampler()``) passes the epoch to its workers, persistent or not."""
        if operator.index(epoch) < 0:
            raise ValueError(f"epoch must not be negative, not {epoch}")
        self.epoch = int(epoch)

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
        datasets = [Dataset(self._source, select=self._select, order=self._order)]
        for _, source, select, _ in self._fields:
            datasets.append(Dataset(source, select=select, order=self._order))
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

    def _shared_out(self, f, indices, rows):
        """A shared-memory tensor for field f's batch, or None when its items differ."""
        layout = self._layouts[f]
        if isinstance(layout[1], np.ndarray):  # several layouts: does the batch have one?
            layouts, ids = layout
            used = np.unique(ids[indices])
            if len(used) != 1:
                return None  # gather_fields raises, naming the odd item
            layout = layouts[used[0]]
        dtype, trailing = layout
        return _shared_empty((len(indices), rows) + tuple(trailing), _torch_dtype(dtype, "data"))

    def __getitem__(self, key):
        """Batch b of the current epoch (key b) or of ``epoch`` (key ``(epoch, b)``)."""
        epoch, b = self._key(key)
        datasets = self._open()
        position = b * self.batch_size
        count = min(self.batch_size, self._per_rank - position)
        indices, starts = self._sampler.sample(epoch, position, count)
        rates = [1] + [rate for *_, rate in self._fields]
        tensors = [None] * len(datasets)
        if torch.utils.data.get_worker_info() is not None:
            # Gathered straight into shared memory, the batch crosses to the main process as is.
            for f, rate in enumerate(rates):
                rows = self.length * _core.rate(rate)
                if rows.denominator == 1:  # else gather_fields raises
                    tensors[f] = self._shared_out(f, indices, int(rows))
        outs = [None if t is None else t.numpy() for t in tensors]
        data, valid = gather_fields([(ds, indices, r) for ds, r in zip(datasets, rates)], starts,
                                    self.length, outs=outs, pad=self.pad, fill=self.fill,
                                    threads=self._gather_threads(), valid=True)
        # The tensors themselves, not torch.from_numpy of their views: only they are shared.
        data = [torch.from_numpy(a) if t is None else t for t, a in zip(tensors, data)]
        batch = {"data": data[0], "valid": torch.from_numpy(valid[0]),
                 "indices": torch.from_numpy(indices), "starts": torch.from_numpy(starts),
                 "epoch": epoch, "batch": b}
        for (name, *_), d, v in zip(self._fields, data[1:], valid[1:]):
            batch[name], batch[name + "_valid"] = d, torch.from_numpy(v)
        return batch

    def __repr__(self):
        return (f"<mmnpz.torch.ExcerptBatches: {self._batches} batches of {self.batch_size} "
                f"excerpts of {self.length} rows, epoch {self.epoch}, rank {self.rank} of "
                f"{self.world_size}>")


class _EpochKeys(torch.utils.data.Sampler):
    """Keys (epoch, b) of every batch of the dataset's epoch when iteration begins."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        epoch, count = self.batches.epoch, len(self.batches)
        return ((epoch, b) for b in range(count))

    def __len__(self):
        return len(self.batches)


def loader(source, *, num_workers=0, multiprocessing_context=None, pin_memory=False,
           persistent_workers=False, prefetch_factor=None, timeout=0, worker_init_fn=None,
           **options):
    """A ``torch.utils.data.DataLoader`` over :class:`ExcerptBatches`.

    ``source`` is an ExcerptBatches, or the archives to make one from with ``options`` (see
    ExcerptBatches). The loader has ``batch_size=None`` (its items are batches already) and
    ``sampler=batches.sampler()``: call ``loader.dataset.set_epoch(e)`` before each epoch.
    Workers may be spawned or forked; spawned ones open the archives themselves.
    """
    if isinstance(source, ExcerptBatches):
        if options:
            raise TypeError(f"options {sorted(options)} are for making an ExcerptBatches, "
                            f"and one was given")
        batches = source
    else:
        batches = ExcerptBatches(source, **options)
    extra = {} if prefetch_factor is None else {"prefetch_factor": prefetch_factor}
    return torch.utils.data.DataLoader(
        batches, batch_size=None, sampler=batches.sampler(), num_workers=num_workers,
        multiprocessing_context=multiprocessing_context if num_workers else None,
        pin_memory=pin_memory, persistent_workers=persistent_workers and num_workers > 0,
        timeout=timeout, worker_init_fn=worker_init_fn, **extra)
