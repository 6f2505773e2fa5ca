"""Reading and writing .npz archives: NpzReader (mmnpz.load), NpzWriter, savez and recover."""

import collections
import collections.abc
import io
import os
import threading
import warnings

import numpy as np

from . import _core, _mmnpz

__all__ = [
    "InterruptedAppendWarning", "MemberInfo", "NpzReader", "NpzWriter", "load", "recover", "savez",
]


class InterruptedAppendWarning(UserWarning):
    """An archive ends in members an interrupted append left: it was opened as it was before
    the append, and :func:`recover` restores the appended members."""


MemberInfo = collections.namedtuple(
    "MemberInfo",
    "name kind dtype shape fortran_order offset nbytes compressed alignment",
)
MemberInfo.__doc__ = """What NpzReader.info() says of a member.

kind is 'array', 'bytes' (no .npy magic) or 'object' (a pickled object array); dtype, shape
and fortran_order are None unless kind is 'array'; offset (of the array data in the file) and
alignment (the largest power of two up to 65536 dividing offset) are None unless, moreover,
the data is stored. compressed is True for deflated members."""


def _reopen(cls, path, mmap_mode, cache, preload, allow_pickle):
    return cls(path, mmap_mode, cache=cache, preload=preload, allow_pickle=allow_pickle)


class _BagObj:
    """Attribute access to a reader's members, as numpy's ``NpzFile.f``."""

    def __init__(self, reader):
        self._reader = reader

    def __getattr__(self, key):
        try:
            return self._reader[key]
        except KeyError:
            raise AttributeError(key) from None

    def __dir__(self):
        return list(self._reader.files)


class NpzReader(collections.abc.Mapping):
    """A memory-mapped .npz archive; also available as ``mmnpz.load``.

    Opening maps the file once and parses the ZIP central directory only (without the GIL).
    Items are decoded on first access: stored ``.npy`` members are read-only ``numpy.memmap``
    views sharing memory with ``self.mmap`` (nothing is copied), deflated ones ordinary arrays,
    others ``bytes``. Keys are member names with or without ``.npy``; when names repeat, the
    last one wins. Arrays stay valid after ``close()`` and after the reader is gone.

    :param file: path (``str`` or ``os.PathLike``)
    :param mmap_mode: ``"r"``, or ``None`` (numpy's default): both map read-only
    :param cache: keep every item loaded in ``self.arrays`` and return it again
    :param preload: load every item now (pickled object arrays only with ``allow_pickle``)
    :param allow_pickle: load pickled object arrays (as numpy does; never do this with
        untrusted files)
    """

    def __init__(self, file, mmap_mode="r", *, cache=True, preload=False, allow_pickle=False):
        if mmap_mode not in ("r", None):
            raise ValueError(f"mmap_mode must be 'r' (read-only) or None, not {mmap_mode!r}")
        self._path = _core.path(file)
        self._options = (mmap_mode, bool(cache), bool(preload), bool(allow_pickle))
        self._reader = _mmnpz.Reader(self._path)
        if self._reader.was_interrupted:
            warnings.warn(
                f"{self._path}: an interrupted append left {self._reader.bytes_after_archive} "
                "bytes after the archive's end record; opened the archive as it was before the "
                f"append. `mmnpz recover {self._path}` restores the appended members.",
                InterruptedAppendWarning, stacklevel=2)
        whole = np.frombuffer(self._reader.mapping(), dtype=np.uint8).view(np.memmap)
        whole.filename, whole.offset, whole.mode = os.path.abspath(self._path), 0, "r"
        #: A read-only uint8 ``numpy.memmap`` of the whole file.
        self.mmap = whole
        self._reader.configure(whole)
        #: Member names with ``.npy`` removed, in archive order (numpy's ``files``).
        self.files = self._reader.names()
        #: Items loaded so far (all of them with ``preload``), by name.
        self.arrays = {}
        self.allow_pickle = bool(allow_pickle)
        self._cache = bool(cache)
        self._by_key = {}
        self._by_index = {}
        #: Attribute access to members: ``reader.f.x`` is ``reader["x"]``.
        self.f = _BagObj(self)
        if preload:
            for index, name in enumerate(self.files):
                if not self.allow_pickle and self._reader.array(index)[0] == "object":
                    continue  # raises on access, as without preload
                self._by_index[index] = self.arrays[name] = self._item(index)

    @property
    def path(self):
        """The archive's path, as a ``str``."""
        return self._path

    def _open_reader(self):
        if self._reader is None:
            raise ValueError(f"{self._path}: the reader is closed")
        return self._reader

    def _index(self, key):
        index = self._open_reader().find(key) if isinstance(key, str) else None
        if index is None:
            raise KeyError(f"{key} is not a file in the archive")
        return index

    def _item(self, index):
        reader = self._reader
        info = reader.array(index)
        kind = info[0]
        if kind == "bytes":
            return reader.bytes(index)
        if kind == "object":
            if not self.allow_pickle:
                raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
            return np.lib.format.read_array(io.BytesIO(reader.bytes(index)), allow_pickle=True)
        _, descr, shape, fortran_order, _, _, inflated = info
        if inflated is None:
            return reader.view(index)  # a memmap based on self.mmap
        # numpy gives writable arrays for deflated members: copy out of the shared cache.
        order = "F" if fortran_order else "C"
        return np.ndarray(shape, _core.dtype(descr), buffer=inflated, order=order).copy(order="K")

    def _lookup(self, key):
        """(index, item): one call to the core finds, decodes and maps stored arrays."""
        found = self._open_reader().lookup(key)
        if found is None:
            raise KeyError(f"{key} is not a file in the archive")
        index, item = found
        if item is None:  # deflated, not .npy, or pickled
            item = self._by_index.get(index)
            if item is None:
                item = self._item(index)
        return index, item

    def load(self, name):
        """The item ``name``, loaded now and not cached."""
        return self._item(self._index(name))

    def __getitem__(self, key):
        # Cached by the key as given (the fast path) and by member index, so that "x" and
        # "x.npy" share one item while a member named "x" without .npy stays distinct.
        if not self._cache:
            return self._lookup(key)[1]
        item = self._by_key.get(key)
        if item is not None:
            return item
        index, item = self._lookup(key)
        # Threads racing on a first access all get the item stored first (setdefault is
        # atomic under the GIL; the core releases it while inflating).
        item = self._by_index.setdefault(index, item)
        self.arrays[self.files[index]] = item
        self._by_key[key] = item
        return item

    def __contains__(self, key):
        reader = self._open_reader()
        return isinstance(key, str) and reader.find(key) is not None

    def __iter__(self):
        return iter(self.files)

    def __len__(self):
        return len(self.files)

    def info(self, name):
        """A :class:`MemberInfo` for member ``name`` (decodes its headers, reads no data)."""
        reader = self._open_reader()
        index = self._index(name)
        member = reader.member(index)
        compressed = member["method"] != 0
        info = reader.array(index)
        if info[0] != "array":
            return MemberInfo(member["name"], info[0], None, None, None, None,
                              member["uncompressed_size"], compressed, None)
        _, descr, shape, fortran_order, offset, nbytes, inflated = info
        if inflated is not None:
            offset = alignment = None
        else:
            alignment = min(offset & -offset, 65536) if offset else 65536
        return MemberInfo(member["name"], "array", _core.dtype(descr), shape, fortran_order, offset,
                          nbytes, compressed, alignment)

    def verify(self, name=None):
        """Checks CRC-32s without the GIL. With a name, raises :class:`FormatError` when that
        member is bad; without, checks every member and returns ``{name: message}`` of the
        bad ones (empty when all is well)."""
        reader = self._open_reader()
        if name is None:
            return reader.verify()
        reader.verify_one(self._index(name))
        return None

    def close(self):
        """Releases the reader's reference to the mapping; arrays already loaded stay valid."""
        self._reader = None
        self.mmap = None
        self.arrays = {}
        self._by_key = {}
        self._by_index = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        # Pickles (for multiprocessing and DataLoader workers) carry the path, not the data.
        return _reopen, (type(self), self._path) + self._options

    def __repr__(self):
        state = "closed" if self._reader is None else f"{len(self.files)} members"
        return f"<mmnpz.NpzReader {self._path!r}, {state}>"


load = NpzReader

# Writing a strided array copies at most this many bytes at a time.
_STREAM_CHUNK = 16 << 20


def _raw_bytes(array):
    """The bytes of a C-contiguous array as a flat uint8 array (no copy)."""
    return array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)


class _MemberStream:
    """A member being written in pieces; see :meth:`NpzWriter.begin`."""

    def __init__(self, stream, dtype):
        self._stream = stream
        self.dtype = dtype

    @property
    def remaining(self):
        """Bytes still expected."""
        return self._stream.remaining

    def write(self, chunk):
        """Appends array data (an array of the member's dtype, or bytes) in the member's order."""
        if isinstance(chunk, np.ndarray):
            if chunk.dtype != self.dtype:
                raise TypeError(f"chunk of dtype {chunk.dtype} for a member of dtype {self.dtype}")
            chunk = _raw_bytes(np.ascontiguousarray(chunk))
        self._stream.write(chunk)

    def commit(self):
        """Completes the member; raises ValueError (and abandons it) when bytes are missing."""
        self._stream.commit()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.commit()
        self._stream = None  # abandons an uncommitted member


class NpzWriter:
    """Writes a .npz archive of stored members whose array data is aligned in the file.

    :param file: path (``str`` or ``os.PathLike``)
    :param mode: ``"x"`` create (fails if the file exists), ``"w"`` replace (a new file,
        renamed over an existing one by ``close()``), ``"a"`` append
    :param align: array data starts at a multiple of this many bytes in the file (a power of
        two up to 65536)
    :param durable: ``close()`` also fsyncs the file and, for a new or replaced one, its
        directory

    Members are committed as ``write()`` returns; ``close()`` writes the directory. If the
    process dies before, :func:`recover` restores every committed member; a replaced archive
    (mode ``"w"``) is then left as it was, and readers of it keep their data in every case.
    One writer per file: a second one (in any process) raises ValueError. A writer may be
    shared by threads: its calls take turns.
    """

    def __init__(self, file, mode="x", *, align=64, allow_duplicate_names=False, durable=False):
        if mode not in ("x", "w", "a"):
            raise ValueError(f"mode must be 'x', 'w' or 'a', not {mode!r}")
        # Held by every call (a strided write and a begun stream span several core calls).
        self._lock = threading.RLock()
        self._writer = _mmnpz.Writer(_core.path(file), mode, align, allow_duplicate_names,
                                     bool(durable))

    def _open_writer(self):
        if self._writer is None:
            raise ValueError("the writer is closed")
        return self._writer

    @staticmethod
    def _descr(name, array):
        if not isinstance(name, str):
            raise TypeError(f"member names must be str, not {type(name).__name__}")
        if array.dtype.hasobject:
            raise ValueError(f"{name!r}: object arrays cannot be written (they need pickle)")
        return repr(np.lib.format.dtype_to_descr(array.dtype))

    def write(self, name, array):
        """Writes ``array`` (anything ``numpy.asanyarray`` takes) as member ``name + '.npy'``.
        Contiguous arrays are written from their memory, strided ones in chunks."""
        array = np.asanyarray(array)
        descr = self._descr(name, array)
        with self._lock:
            writer = self._open_writer()
            if array.flags.c_contiguous:
                writer.write(name, _raw_bytes(array), descr, array.shape, False)
            elif array.flags.f_contiguous:
                writer.write(name, _raw_bytes(array.T), descr, array.shape, True)
            else:
                with self.begin(name, array.dtype, array.shape) as stream:
                    row_bytes = max(array[:1].nbytes, 1)
                    step = max(1, _STREAM_CHUNK // row_bytes)
                    for start in range(0, array.shape[0], step):
                        stream.write(array[start:start + step])

    def begin(self, name, dtype, shape, fortran_order=False):
        """Starts a member written in pieces (for arrays larger than memory). Use as a context
        manager, or call ``commit()``; the member exists only once all its bytes arrived."""
        dtype = np.dtype(dtype)
        descr = self._descr(name, np.empty(0, dtype))
        shape = tuple(int(n) for n in shape)
        with self._lock:
            stream = self._open_writer().begin(name, descr, shape, bool(fortran_order))
        return _MemberStream(stream, dtype)

    def close(self):
        """Writes the central directory and closes the file (idempotent). With mode ``"w"``,
        renames the new archive over the old one. Raises OSError saying what the file holds
        when that fails."""
        with self._lock:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def savez(file, *args, **kwds):
    """Like ``numpy.savez``, with every array's data 64-byte aligned in the file. Positional
    arrays are named ``arr_0``, ``arr_1``...; ``.npz`` is appended to a name without it."""
    path = _core.path(file)
    if not path.endswith(".npz"):
        path += ".npz"
    named = dict(kwds)
    for i, array in enumerate(args):
        key = f"arr_{i}"
        if key in named:
            raise ValueError(f"Cannot use un-named variables and keyword {key}")
        named[key] = array
    with NpzWriter(path, "w") as writer:
        for key, array in named.items():
            writer.write(key, array)


def recover(file):
    """Rebuilds the central directory of an archive whose writer died before ``close()``.
    Returns a dict: members_recovered, names, bytes_kept, bytes_cut, directory_was_intact."""
    return _mmnpz.recover(_core.path(file))
