"""Writing a dataset as sharded aligned archives: :class:`ShardWriter`."""

import operator
import threading

import numpy as np

from . import _core, _mmnpz
from ._core import member_name as _member_name
from ._core import path as _path
from ._npz import _raw_bytes

__all__ = ["ShardWriter"]


def _limit(value, what, path):
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int or None, not bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int or None, not {type(value).__name__}") from None
    if value <= 0:
        raise ValueError(f"{path}: {what} must be positive, not {value}")
    if value >= 1 << 64:
        raise ValueError(f"{path}: {what} {value} is too large for a 64-bit integer")
    return value


class ShardWriter:
    """Writes items as sharded aligned archives: for ``"out/train.npz"`` the shards
    ``out/train-00000-of-00012.npz`` ... ``out/train-00011-of-00012.npz``, which
    ``mmnpz.Dataset("out/train@12.npz")`` opens. The count is known at :meth:`close`.

    :param file: the archive name the shards are named after; must end in ``.npz``
    :param max_bytes: a shard's file stays within this many bytes, except a shard holding a
        single item that alone needs more (each item is counted with an upper bound of its ZIP
        headers and padding, a few hundred bytes); ``None``: no limit
    :param max_items: at most this many members per shard; ``None``: no limit
    :param align: as :class:`NpzWriter`'s: array data starts at a multiple of this many bytes
    :param allow_duplicate_names: allow a name that this or an earlier shard already holds

    A new shard begins when adding an item would pass ``max_bytes`` or ``max_items``. While
    writing, shard k is named ``train-0000k.npz.partial``, which no pattern for the final names
    matches; each shard is written like :class:`NpzWriter` writes an archive (members committed
    as ``write()`` returns, :func:`recover` restores them if the process dies) and closed before
    the next begins. :meth:`close` (also on leaving a ``with`` block, exception or not) closes
    the last shard and renames every shard to its final name. Existing files of those names are
    replaced; an exception leaving the ``with`` block before the first item was written
    discards instead (:meth:`discard`), so that no empty shard replaces one of an earlier run.
    A ``.partial`` that a run which died left is refused (ValueError, when the shard of its
    name would begin): it may hold that run's items (:func:`recover` it, or remove it).
    Calls from several threads take turns (a group is written whole before another
    thread's write).
    """

    def __init__(self, file, *, max_bytes=None, max_items=None, align=64,
                 allow_duplicate_names=False):
        path, limits = self._check_options(file, max_bytes, max_items, align)
        # Held by every call: the core's shard writer is for one thread at a time (two
        # threads at once corrupted the heap).
        self._lock = threading.RLock()
        self._writer = _mmnpz.ShardWriter(path, *limits, bool(allow_duplicate_names))

    @staticmethod
    def _check_options(file, max_bytes, max_items, align):
        """(path, (max_bytes, max_items, align)) as the core takes them, after refusing what
        the constructor would refuse, without touching a file."""
        path = _path(file)
        limits = (_limit(max_bytes, "max_bytes", path), _limit(max_items, "max_items", path),
                  _core.alignment(align, path))
        _mmnpz.validate_shard_writer_options(path, *limits)
        return path, limits

    @property
    def path(self):
        """The path given (``out/train.npz``)."""
        return self._writer.path

    @property
    def closed(self):
        """True once :meth:`close` was called."""
        with self._lock:
            return self._writer.closed

    @property
    def shards(self):
        """Shards begun so far (the final count once closed)."""
        with self._lock:
            return self._writer.shards

    @property
    def items_written(self):
        """Members written to all shards."""
        with self._lock:
            return self._writer.items_written

    @property
    def paths(self):
        """The final shard paths, sorted; known once the writer is closed."""
        with self._lock:
            if not self._writer.closed:
                raise ValueError(f"{self.path}: the shard names are known once the writer is "
                                 f"closed")
            return list(self._writer.paths)

    @property
    def spec(self):
        """The shard spec of the closed shards, such as ``"out/train@12.npz"``, for
        :class:`Dataset`; known once the writer is closed."""
        with self._lock:
            if not self._writer.closed:
                raise ValueError(f"{self.path}: the shard names are known once the writer is "
                                 f"closed")
            return self._writer.spec

    def _array(self, name, array):
        """(bytes, descr, shape, fortran_order) of what write() writes."""
        self._check_name(name)
        array = np.asarray(array)  # subclasses as their plain data, as numpy.savez writes
        if array.dtype.hasobject:  # refused before any byte of it is taken, as the core would
            raise ValueError(f"{self.path}: member {name + '.npy'!r}: object arrays cannot be "
                             f"written (they need pickle)")
        descr = repr(np.lib.format.dtype_to_descr(array.dtype))
        if array.flags.f_contiguous and not array.flags.c_contiguous:
            return _raw_bytes(array.T), descr, array.shape, True
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        return _raw_bytes(array), descr, array.shape, False

    @staticmethod
    def _check_name(name):
        _member_name(name)

    def write(self, name, array):
        """Writes ``array`` (anything ``numpy.asarray`` takes) as member ``name + '.npy'`` of
        the current shard or a new one. C- and Fortran-contiguous arrays are written from their
        memory; other arrays are copied to C order first."""
        prepared = self._array(name, array)
        with self._lock:
            self._writer.write(name, *prepared)

    def write_bytes(self, name, data):
        """Writes ``data`` (bytes or any contiguous buffer) as member ``name``, nothing
        appended: a JSON or text sidecar, for example."""
        self._check_name(name)
        data = _core.byte_buffer(data, name)
        with self._lock:
            self._writer.write_bytes(name, data)

    def write_group(self, members):
        """Writes ``(name, value)`` pairs into one shard (an array and its JSON sidecar, say):
        ``bytes``, ``bytearray`` and ``memoryview`` values as :meth:`write_bytes` does, others
        as :meth:`write`. A new shard begins first unless the current one has room for all of
        them; members that together pass the limits get a shard of their own. A member that
        would be refused for its name (invalid, written before or repeated in the group) or its
        value (an object array) refuses the whole group before any of it is written."""
        prepared, checked = [], []
        for member in members:
            if not (isinstance(member, (tuple, list)) and len(member) == 2):
                raise TypeError(f"write_group: members must be (name, value) pairs, not "
                                f"{type(member).__name__}"
                                + (f" of {len(member)}" if isinstance(member, (tuple, list))
                                   else ""))
            name, value = member
            if isinstance(value, (bytes, bytearray, memoryview)):
                self._check_name(name)
                prepared.append((name, _core.byte_buffer(value, name), None))
                checked.append((name, False))
            else:
                prepared.append((name, None, self._array(name, value)))
                checked.append((name, True))
        with self._lock:
            total = sum(self._writer.bound_bytes(name, memoryview(data).nbytes)
                        if array is None else self._writer.bound(name, *array[1:])
                        for name, data, array in prepared)
            self._writer.check_names(checked)
            self._writer.keep_together(len(prepared), min(total, 2**64 - 1))
            for name, data, array in prepared:
                if array is None:
                    self._writer.write_bytes(name, data)
                else:
                    self._writer.write(name, *array)

    def __reduce__(self):
        raise TypeError("a ShardWriter cannot be pickled or copied: it holds its shards open "
                        "and locked; make a writer where it is used (or one per process, each "
                        "with its own name)")

    def close(self):
        """Closes the last shard and renames the shards to their final names (idempotent)."""
        with self._lock:
            self._writer.close()

    def discard(self):
        """Closes the writer leaving the final shard names as they were before it: the shards
        it began are removed, none is renamed (idempotent; a no-op after :meth:`close`)."""
        with self._lock:
            self._writer.discard()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        with self._lock:
            nothing = self._writer.items_written == 0
        # An exception before the first item leaves nothing to keep: no empty shard replaces
        # a shard of an earlier run.
        if exc_type is not None and nothing:
            self.discard()
        else:
            self.close()

    def __repr__(self):
        with self._lock:
            if self._writer.closed:
                return f"<mmnpz.ShardWriter {self._writer.spec!r}, closed>"
            return (f"<mmnpz.ShardWriter {self.path!r}, {self.items_written} items in "
                    f"{self.shards} shards so far>")
