"""Reading and writing .npz archives: NpzReader, load (also .npy files, file objects and bytes,
as numpy.load), NpzWriter, savez, savez_compressed and recover."""

import collections
import collections.abc
import io
import mmap
import numbers
import os
import pickle
import shutil
import stat
import sys
import tempfile
import threading
import warnings
import weakref

import numpy as np

from . import _core, _methods, _mmnpz

__all__ = [
    "InterruptedAppendWarning", "MemberInfo", "NpzReader", "NpzWriter", "load", "recover", "savez",
    "savez_compressed",
]

_MMAP_MODES = ("r", "c", "r+", None)
#: numpy's default max_header_size (numpy.lib.format._MAX_HEADER_SIZE).
_MAX_HEADER_SIZE = 10000
_NPY_MAGIC = b"\x93NUMPY"


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
the data is stored. compressed is True for deflated members (and bzip2 or LZMA ones, which are
decoded whole by info(), read and verify())."""


def _reopen(cls, path, mmap_mode, cache, preload, allow_pickle, *more):
    max_header_size, encoding, fix_imports, recover = (
        tuple(more) + (_MAX_HEADER_SIZE, "ASCII", True, False)[len(more):])
    return cls(path, mmap_mode, cache=cache, preload=preload, allow_pickle=allow_pickle,
               max_header_size=max_header_size, encoding=encoding, fix_imports=fix_imports,
               recover=recover)


def _check_numpy_options(mmap_mode, encoding):
    if mmap_mode not in _MMAP_MODES:
        raise ValueError(f"mmap_mode must be 'r', 'c', 'r+' or None, not {mmap_mode!r}")
    if encoding not in ("ASCII", "latin1", "bytes"):
        # numpy's check and message
        raise ValueError("encoding must be 'ASCII', 'latin1', or 'bytes'")


def _file_object_name(fileobj):
    name = getattr(fileobj, "name", None)
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else f"<{type(fileobj).__name__}>"


def _check_readable(fileobj):
    """Refuses a file object that cannot be read, or reads text (before a read decodes the
    archive's bytes as text)."""
    readable = getattr(fileobj, "readable", None)
    if readable is not None and not readable():
        raise io.UnsupportedOperation(
            f"{_file_object_name(fileobj)}: the file object is not open for reading")
    if isinstance(fileobj, io.TextIOBase):
        raise TypeError(f"{_file_object_name(fileobj)}: the file is open in text mode (open "
                        f"the file in binary mode)")


def _file_io(fileobj):
    """The io.FileIO under a file object whose bytes are its descriptor's (a binary file that
    open() made, a tempfile wrapper of one), or None. A file object that
    transforms the bytes (gzip.GzipFile, bz2.BZ2File, lzma.LZMAFile, ...) may hand out the
    descriptor of the file it transforms: that one is not its bytes."""
    if isinstance(fileobj, tempfile._TemporaryFileWrapper):
        fileobj = fileobj.file
    if isinstance(fileobj, (io.BufferedReader, io.BufferedRandom, io.BufferedWriter)):
        fileobj = fileobj.raw
    return fileobj if isinstance(fileobj, io.FileIO) else None


def _regular_fileno(fileobj):
    """The descriptor of a file object over a seekable regular file whose bytes it reads
    unchanged (see _file_io), or None."""
    if _file_io(fileobj) is None:
        return None
    try:
        fd = fileobj.fileno()
        seekable = fileobj.seekable() if hasattr(fileobj, "seekable") else True
        return fd if seekable and stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError, ValueError):
        return None


def _is_data(file):
    """True when `file` is an archive or .npy in memory rather than a path (bytes that start
    with a ZIP or .npy magic; any bytearray or memoryview)."""
    if isinstance(file, (bytearray, memoryview)):
        return True
    return isinstance(file, bytes) and (file.startswith(_NPY_MAGIC) or _mmnpz.looks_like_zip(file))


class _Source:
    """Where an archive comes from: the C++ reader, the display path, the file to map
    writable ("c", "r+"), and what a pickle of the reader carries."""

    def __init__(self, file, mmap_mode, recover=False):
        self.fd = None         # a descriptor to map for "c" and "r+", owned by the caller
        self.lock_fd = None    # "r+": a descriptor holding the writers' lock (see _Edits)
        self.memory = None     # the archive's bytes when it was given in memory
        self.reopen = None     # what pickling carries (a path), or None when it cannot
        if isinstance(file, _mmnpz.Reader):  # an archive a Dataset holds open (mmnpz.data)
            self.reader = file
            self.path = self.reopen = file.path
            return
        if _is_data(file):
            self.memory = memoryview(file).cast("B") if not isinstance(file, bytes) else file
            self.path = "<memory>"
            self.reader = _mmnpz.Reader.from_bytes(self.memory)
            return
        if hasattr(file, "read") or hasattr(file, "fileno"):
            _check_readable(file)
            self.path = _file_object_name(file)
            fd = _regular_fileno(file)
            if fd is not None:  # mapped, also when the file was renamed or deleted
                self.reader = _mmnpz.Reader.from_descriptor(fd, self.path)
                self.fd = fd
                return
            data = _read_whole(file)
            self.memory = data
            self.reader = _mmnpz.Reader.from_bytes(data, self.path)
            return
        self.path = _core.path(file)
        self.reopen = self.path
        self.reader = _mmnpz.Reader(self.path, recover=recover)

    def writable_mapping(self, mmap_mode):
        """The buffer views are made from in "c" and "r+" modes."""
        if self.memory is not None:
            if mmap_mode == "r+":
                raise ValueError(f"{self.path}: 'r+' needs a file to write into; the archive "
                                 "was given in memory")
            return bytearray(self.memory)  # "c": a private copy
        access = mmap.ACCESS_WRITE if mmap_mode == "r+" else mmap.ACCESS_COPY
        cloexec = getattr(os, "O_CLOEXEC", 0)
        if self.fd is not None:
            try:
                mapping = mmap.mmap(self.fd, 0, access=access)
            except PermissionError as e:
                raise PermissionError(e.errno, "'r+' needs the file object open for reading "
                                      "and writing ('r+b')", self.path) from None
            if mmap_mode == "r+":
                # The lock on a description of our own (the caller's may outlive the reader).
                try:
                    lock_fd = os.open(f"/proc/self/fd/{self.fd}", os.O_RDWR | cloexec)
                except OSError:  # no /proc: edited without the lock
                    self.lock_fd = os.dup(self.fd)  # still the file to update CRC-32s in
                    return mapping
                self._lock(lock_fd, self.path)
            return mapping
        flags = os.O_RDWR if mmap_mode == "r+" else os.O_RDONLY
        if mmap_mode == "r+":
            # Locked first, on a description of its own (the mapping's descriptor, which mmap
            # duplicates, would hold the lock as long as any view), then mapped.
            self._lock(os.open(self.path, flags | cloexec), self.path)
        fd = os.open(self.path, flags | cloexec)
        try:
            if self.lock_fd is not None:
                held, mapped = os.fstat(self.lock_fd), os.fstat(fd)
                if (held.st_dev, held.st_ino) != (mapped.st_dev, mapped.st_ino):
                    raise ValueError(f"{self.path}: the archive was replaced while it was "
                                     "being opened; open it again")
            return mmap.mmap(fd, 0, access=access)  # holds its own descriptor
        finally:
            os.close(fd)

    def _lock(self, fd, path):
        """Edits in place hold the writers' lock: a writer appending meanwhile would leave the
        new CRC-32s in a directory its own supersedes, and one replacing the archive would
        drop the edits. A writer already at work makes this raise ValueError."""
        try:
            _mmnpz.lock_for_writing(fd, path)
        except BaseException:
            os.close(fd)
            raise
        self.lock_fd = fd


def _read_whole(fileobj):
    """The whole archive of a file object without a usable descriptor: from its start when it
    is seekable (zipfile does the same), else what remains."""
    try:
        if fileobj.seekable():
            fileobj.seek(0)
    except (AttributeError, OSError):
        pass
    data = fileobj.read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"{_file_object_name(fileobj)}: read() returned "
                        f"{type(data).__name__}, not bytes (open the file in binary mode)")
    return bytes(data)


def _memmap_of(buffer, shape, dtype, offset, fortran_order, mode, filename):
    """A numpy.memmap of `dtype` and `shape` at `offset` in `buffer` (an mmap or bytearray),
    as numpy.memmap would make it."""
    array = np.ndarray.__new__(np.memmap, shape, dtype, buffer=buffer, offset=offset,
                               order="F" if fortran_order else "C")
    array._mmap = buffer if isinstance(buffer, mmap.mmap) else None
    array.filename, array.offset, array.mode = filename, offset, mode
    return array


def _update_crcs(state, buf):
    """After writes through 'r+' views of ``buf``: the CRC-32 of every stored member handed out
    is computed again and, where it changed, written into its local header and directory entry
    (by the core), so that numpy, zipfile and verify() read the archive as it now is."""
    members, name = _edited(state), state["name"]
    if not members or buf.closed:
        return
    lock_fd = state["lock_fd"]
    if lock_fd is not None and os.fstat(lock_fd).st_size > len(buf):
        # Grown by another program (the lock stops mmnpz's writers): the directory mapped is
        # no longer the archive's. (A file cut short is the core's to report.)
        raise ValueError(f"{name}: the archive is {os.fstat(lock_fd).st_size} bytes now, "
                         f"{len(buf)} when it was opened with 'r+': another program wrote "
                         "to it, and the CRC-32s of the members edited were not updated")
    _mmnpz.update_member_crcs(buf, sorted(members), name)  # one reading of the directory
    buf.flush()


def _edited(state):
    """Indices of the members handed out writable, by this process or another that shares the
    edits (a forked worker: its exit runs no hook that could bring their CRC-32s up to date)."""
    handed = np.frombuffer(bytes(state["shared"]), np.uint8)
    return set(state["members"]) | set(np.flatnonzero(handed).tolist())


def _finish_edits(state, mapping):
    """The last flush of an 'r+' reader's edits, when no view of its mapping is left (close(),
    or when the last view or the reader is collected, or at exit); lets go of the lock.
    ``mapping`` is a weak reference, dead when this runs for the mapping's collection (after
    the views' last writes): the archive is then mapped again to bring its CRC-32s up to date,
    and so it is when writers, let in by close(), appended to it since (the mapping is too
    short for its new directory)."""
    try:
        buf = mapping()
        fd = state["lock_fd"]
        appended = (state["unlocked"] and fd is not None
                    and os.fstat(fd).st_size > state["size"])
        if buf is not None and not appended:
            _update_crcs(state, buf)
        elif _edited(state) and fd is not None:
            now = os.fstat(fd).st_size
            if now < state["size"]:
                raise ValueError(f"{state['name']}: the archive was truncated after it was "
                                 "opened with 'r+': the CRC-32s of the members edited were not "
                                 "updated")
            with mmap.mmap(fd, now, access=mmap.ACCESS_WRITE) as again:
                if now > state["size"]:
                    _check_appended(state, again)
                    state = dict(state, size=now)  # the directory to update is the new one
                _update_crcs(state, again)
    finally:
        _close_lock(state)


def _check_appended(state, buf):
    """The archive grew after close() let writers in: an append keeps the members before it
    where they were, which the new directory must say (else nothing is updated)."""
    directory = _mmnpz.Reader.from_bytes(buf, state["name"])
    for index in _edited(state) - set(state["members"]):  # known by index only
        if index >= len(directory):
            raise ValueError(f"{state['name']}: the archive changed after it was closed (it "
                             f"has no entry {index} now): the CRC-32s of the members edited "
                             "since were not updated")
    for index, (name, offset) in state["members"].items():
        if index >= len(directory) or (directory.member(index)["name"],
                                         directory.member(index)["local_header_offset"]) != (
                                             name, offset):
            raise ValueError(f"{state['name']}: the archive changed after it was closed (member "
                             f"{name!r} is no longer entry {index} at byte {offset}): the "
                             "CRC-32s of the members edited since were not updated")


def _close_lock(state):
    if state["lock_fd"] is not None:
        os.close(state["lock_fd"])
        state["lock_fd"] = None


def _let_go_of_the_lock(state):
    """Swaps the locked descriptor for one of the same file without the lock (a description
    of its own: the lock belongs to the description); None when /proc cannot give one."""
    locked = state["lock_fd"]
    state["unlocked"] = True
    if locked is None:
        return
    try:
        state["lock_fd"] = os.open(f"/proc/self/fd/{locked}", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        state["lock_fd"] = None
    finally:
        os.close(locked)


class _BagObj:
    """Attribute access to a reader's members, as numpy's ``NpzFile.f``."""

    def __init__(self, reader):
        # A weak reference, as numpy's: a strong one made a cycle, so a reader that was never
        # closed kept its descriptor (and, "r+", the writers' lock) until a garbage collection.
        self._reader = weakref.proxy(reader)

    def __getattr__(self, key):
        try:
            return self._reader[key]
        except KeyError:
            raise AttributeError(key) from None

    def __dir__(self):
        return list(self._reader.files)


class NpzReader(collections.abc.Mapping):
    """A memory-mapped .npz archive; ``mmnpz.load`` opens one (and also reads .npy files).

    Opening reads and parses the ZIP central directory only (without the GIL); the file is
    mapped by the first stored item (or ``mmap``). Items are decoded on first access, each
    with one small read of its headers. Keys are member names with or without ``.npy``; when
    names repeat, the last one wins. Arrays stay valid after ``close()`` and after the reader
    is gone. Members that are not ``.npy`` are ``bytes``.

    :param file: a path (``str``, ``bytes`` or ``os.PathLike``); a binary file object (mapped
        through its descriptor when it is a regular file, else read whole); or the archive
        itself as ``bytes`` (starting with the ZIP magic), ``bytearray`` or ``memoryview``
        (copied once)
    :param mmap_mode: what stored arrays are, as in ``numpy.load``: ``"r"`` (the default)
        read-only ``numpy.memmap`` views sharing memory with ``self.mmap`` (nothing copied);
        ``None`` ordinary writable arrays, a new copy at every access (numpy's default);
        ``"c"`` writable copy-on-write memmaps whose writes never reach the file; ``"r+"``
        memmaps that write into the stored member in the file, whose CRC-32s are brought up
        to date by ``flush()``, ``close()`` and when the reader is collected (also those of
        members a forked process handed out and wrote before: close after the workers are
        done). Deflated arrays are writable copies (refused with ``"r+"``, which cannot write
        them back).
    :param cache: keep every item loaded in ``self.arrays`` and return it again (not with
        ``mmap_mode=None``, which copies at every access as numpy does)
    :param preload: load every item now (pickled object arrays only with ``allow_pickle``)
    :param allow_pickle: load pickled object arrays (as numpy does; never do this with
        untrusted files); also lifts ``max_header_size``, as in numpy
    :param max_header_size: refuse .npy headers longer than this (numpy's ``ValueError``)
    :param encoding: for pickles written by Python 2: ``"ASCII"``, ``"latin1"`` or ``"bytes"``
    :param fix_imports: for pickles written by Python 2, as ``pickle.load`` takes it
    :param recover: open a path whose writer died (no directory, or an interrupted append) as
        :func:`recover` would make it, in memory, without writing to the file
    """

    def __init__(self, file, mmap_mode="r", *, cache=True, preload=False, allow_pickle=False,
                 max_header_size=_MAX_HEADER_SIZE, encoding="ASCII", fix_imports=True,
                 recover=False):
        _check_numpy_options(mmap_mode, encoding)
        if recover and (mmap_mode in ("c", "r+") or not isinstance(file, (str, bytes,
                                                                           os.PathLike))):
            raise ValueError("recover=True reads a path, with mmap_mode 'r' or None: it opens "
                             "an in-memory copy of what `mmnpz recover` would make of the file")
        source = _Source(file, mmap_mode, bool(recover))
        self._source = source
        self._path = source.path
        self._pickle_path = source.reopen
        self._options = (mmap_mode, bool(cache), bool(preload), bool(allow_pickle),
                         max_header_size, encoding, bool(fix_imports), bool(recover))
        self._mode = mmap_mode
        self._max_header_size = max_header_size
        self._pickle_kwargs = {"encoding": encoding, "fix_imports": bool(fix_imports)}
        self._reader = source.reader
        self._lookup = self._reader.lookup_function()  # None once closed
        if not allow_pickle:  # numpy lifts the limit for trusted files
            self._reader.limit_header(min(max(int(max_header_size), 0), 1 << 62))
        if self._reader.was_interrupted:
            warnings.warn(
                f"{self._path}: an interrupted append left {self._reader.bytes_after_archive} "
                "bytes after the archive's end record; opened the archive as it was before the "
                f"append. `mmnpz recover {self._path}` restores the appended members.",
                InterruptedAppendWarning, stacklevel=2)
        self._filename = os.path.abspath(self._path) if source.reopen else self._path
        self._reader.configure(self._filename)  # the file is mapped by the first view
        #: The archive comment (``b""`` when there is none).
        self.comment = self._reader.comment
        self._writable = None  # the mapping "c" and "r+" views are made from
        self._crc_state = None
        self._finalizer = None
        if mmap_mode in ("c", "r+"):
            self._writable = source.writable_mapping(mmap_mode)
            if mmap_mode == "r+":
                # Tied to the mapping, not the reader: views outlive a closed reader, and their
                # later writes must reach the CRC-32s too (numpy refuses a member whose CRC-32
                # is stale).
                # members: index -> (name, local header offset) of each handed out writable;
                # shared: one byte per member, set when any process hands it out writable (an
                # anonymous shared mapping: forked processes write into the same one).
                self._crc_state = {"members": {}, "name": self._path, "size":
                                   len(self._writable), "lock_fd": source.lock_fd,
                                   "unlocked": False,
                                   "shared": mmap.mmap(-1, max(1, len(self._reader)))}
                self._finalizer = weakref.finalize(self._writable, _finish_edits,
                                                   self._crc_state, weakref.ref(self._writable))
        self._files = None  # numpy's `files`, made when first asked for
        self.allow_pickle = bool(allow_pickle)
        self._cache = bool(cache) and mmap_mode is not None
        self._by_key = {}
        self._by_index = {}
        #: Attribute access to members: ``reader.f.x`` is ``reader["x"]``.
        self.f = _BagObj(self)
        if preload:
            try:
                for index, name in enumerate(self.files):
                    kind = self._reader.array(index)[0]
                    if (kind == "object" and not self.allow_pickle) or (
                            kind != "bytes" and not self._header_allowed(index)):
                        continue  # raises on access, as without preload
                    self._by_index[index] = self._item(index)
            except BaseException:
                self.close()  # not left holding the file (and, "r+", its lock) until collected
                raise

    @property
    def arrays(self):
        """Items loaded so far (all of them with ``preload``), by name (a new dict)."""
        if not self._by_index:
            return {}
        files = self.files
        return {files[index]: item for index, item in self._by_index.items()}

    @property
    def files(self):
        """Member names with ``.npy`` removed, in archive order (numpy's ``files``): a list
        made when first asked for (a str per member costs more than opening the archive)."""
        if self._files is None:
            self._files = self._open_reader().names()
        return self._files

    @property
    def mmap(self):
        """A read-only uint8 ``numpy.memmap`` of the whole file, which stored items are views
        of: the file is mapped when it is first asked for or the first stored item is (opening
        and metadata read the file); None after ``close()``."""
        return None if self._reader is None else self._reader.whole()

    @property
    def path(self):
        """The archive's path, as a ``str``."""
        return self._path

    @property
    def mmap_mode(self):
        """How members are given: ``"r"``, ``"c"``, ``"r+"`` or None, as numpy's ``mmap_mode``."""
        return self._mode

    def _open_reader(self):
        if self._reader is None:
            raise ValueError(f"{self._path}: the reader is closed")
        return self._reader

    def _index(self, key):
        index = self._open_reader().find(key) if isinstance(key, str) else None
        if index is None:
            raise KeyError(f"{key} is not a file in the archive")
        return index

    def _check_header(self, index):
        # numpy reads every header with max_header_size, lifted by allow_pickle.
        if not self._header_allowed(index):
            length = self._reader.header_length(index)
            raise ValueError(
                f"Header info length ({length}) is large and may not be safe to load "
                "securely.\nTo allow loading, adjust `max_header_size` or fully trust the "
                "`.npy` file using `allow_pickle=True`.\nFor safety against large resource "
                "use or crashes, sandboxing may be necessary.")

    def _item(self, index, view=None):
        """Member `index` as mmap_mode makes it; `view` is its read-only memmap when the
        caller has it already."""
        reader = self._reader
        try:
            info = reader.array(index)
        except _mmnpz.FormatError:
            member = reader.member(index)
            if member["method"] not in _methods.METHODS:
                raise
            return self._decoded_here(index, member)
        kind = info[0]
        if kind == "bytes":
            return reader.bytes(index)
        self._check_header(index)
        if kind == "object":
            if not self.allow_pickle:
                raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
            return np.lib.format.read_array(io.BytesIO(reader.bytes(index)), allow_pickle=True,
                                            pickle_kwargs=self._pickle_kwargs)
        _, descr, shape, fortran_order, offset, _, inflated = info
        order = "F" if fortran_order else "C"
        dtype = _core.dtype(descr)
        if dtype.itemsize == 0 and (inflated is not None or self._mode is None):
            # No bytes to copy (|S0, <U0): np.empty and copy() would make them |S1, <U1.
            return np.ndarray(shape, dtype, order=order)
        if inflated is not None:
            if self._mode == "r+":
                raise ValueError(f"{self._path}: 'r+' cannot write into deflated member "
                                 f"{reader.member(index)['name']!r}")
            # numpy gives writable arrays for deflated members: copy out of the shared cache.
            return np.ndarray(shape, dtype, buffer=inflated, order=order).copy(order="K")
        if self._mode is None:
            # Copied by the core, which turns a file cut since it was mapped into an error
            # (numpy copying the view would die of SIGBUS).
            out = np.empty(shape, dtype, order=order)
            reader.copy_array(index, out)
            return out
        if self._mode == "r":
            return view if view is not None else reader.view(index)
        if self._mode == "r+":
            self._track(index)
        return _memmap_of(self._writable, shape, dtype, offset, fortran_order, self._mode,
                          self._filename)

    def _decoded_here(self, index, member):
        """Member `index`, of a method the core does not decode (bzip2, LZMA), decoded by
        _methods and read as numpy reads it: an ordinary array, or bytes for what is no .npy."""
        data = _methods.decode(self._reader, index, member, self._path)
        if not data.startswith(_NPY_MAGIC):
            return data
        if self._mode == "r+":
            method = _methods.METHODS[member["method"]]
            raise ValueError(f"{self._path}: 'r+' cannot write into {method} member "
                             f"{member['name']!r}")
        return _load_npy(io.BytesIO(data), None, self.allow_pickle, self._pickle_kwargs,
                         self._max_header_size)

    def _track(self, index):
        """Notes a stored member handed out writable, for the CRC-32 update."""
        members = self._crc_state["members"]
        if index in members:
            return
        member = self._reader.member(index)
        if member["data_descriptor"]:
            raise ValueError(f"{self._path}: 'r+' cannot update member {member['name']!r}: its "
                             "CRC-32 is in a data descriptor after its data")
        members[index] = (member["name"], member["local_header_offset"])
        self._crc_state["shared"][index] = 1

    def _header_allowed(self, index):
        return (self.allow_pickle or self._max_header_size >= (1 << 24)
                or self._reader.header_length(index) <= self._max_header_size)

    def load(self, name):
        """The item ``name``, loaded now and not cached."""
        return self._item(self._index(name))

    def __getitem__(self, key):
        # Cached by the key as given (the fast path) and by member index, so that "x" and
        # "x.npy" share one item while a member named "x" without .npy stays distinct.
        item = self._by_key.get(key)
        if item is not None:
            return item
        # A first access: one call to the core finds, decodes and maps a stored array (the
        # core checked max_header_size). Written out here, not in helper methods: each
        # Python call would add a few percent to a first access.
        lookup = self._lookup
        if lookup is None:
            raise ValueError(f"{self._path}: the reader is closed")
        found = lookup(key)
        if found is None:
            raise KeyError(f"{key} is not a file in the archive")
        index, item = found
        if item is None or self._mode != "r":
            item = self._by_index.get(index) if self._cache else None
            if item is None:
                item = self._item(index, found[1])
        if not self._cache:
            return item
        # Threads racing on a first access all get the item stored first (setdefault is
        # atomic under the GIL; the core releases it while inflating).
        item = self._by_key[key] = self._by_index.setdefault(index, item)
        return item

    def __contains__(self, key):
        reader = self._open_reader()
        return isinstance(key, str) and reader.find(key) is not None

    def __iter__(self):
        return iter(self.files)

    def __len__(self):
        return len(self.files) if self._reader is None else len(self._reader)

    def info(self, name):
        """A :class:`MemberInfo` for member ``name`` (decodes its headers, reads no data; a
        bzip2 or LZMA member, which only Python decodes, is decoded whole)."""
        reader = self._open_reader()
        index = self._index(name)
        member = reader.member(index)
        compressed = member["method"] != 0
        if member["method"] in _methods.METHODS:  # decoded whole to be described
            data = _methods.decode(reader, index, member, self._path)
            if not data.startswith(_NPY_MAGIC):
                return MemberInfo(member["name"], "bytes", None, None, None, None, len(data),
                                  True, None)
            f = io.BytesIO(data)
            shape, fortran_order, dtype = np.lib.format._read_array_header(
                f, np.lib.format.read_magic(f), max_header_size=1 << 64)
            if dtype.hasobject:
                return MemberInfo(member["name"], "object", None, None, None, None, len(data),
                                  True, None)
            return MemberInfo(member["name"], "array", dtype, shape, fortran_order, None,
                              len(data) - f.tell(), True, None)
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
            failures = reader.verify()
            for member_name in list(failures):  # those of methods decoded here, checked here
                index = self._index(member_name)
                member = reader.member(index)
                if member["method"] in _methods.METHODS and member["name"] == member_name:
                    try:
                        _methods.decode(reader, index, member, self._path)
                        del failures[member_name]
                    except _mmnpz.FormatError as e:
                        failures[member_name] = str(e)
            return failures
        index = self._index(name)
        member = reader.member(index)
        if member["method"] in _methods.METHODS:
            _methods.decode(reader, index, member, self._path)
        else:
            reader.verify_one(index)
        return None

    def flush(self):
        """With ``mmap_mode="r+"``: writes what views changed to the file and brings the CRC-32
        of every member handed out up to date (numpy, zipfile and ``verify()`` check them).
        Does nothing in other modes."""
        if self._crc_state is not None and self._writable is not None:
            _update_crcs(self._crc_state, self._writable)

    def close(self):
        """Releases the reader's reference to the mapping; arrays already loaded stay valid.
        With ``"r+"``, first flushes and lets writers in again; views kept after it may still
        write, and the CRC-32s are brought up to date again once the last of them is gone (or
        at exit). A reader collected without close() holds the writers' lock until then."""
        mapping, self._writable = self._writable, None
        if self._reader is not None and self._files is None:
            self._files = self._reader.names()  # numpy's `files` stays after close()
        self._source = None
        self._reader = None
        self._lookup = None
        self._by_key = {}
        self._by_index = {}
        if mapping is not None and self._finalizer is not None and self._finalizer.alive:
            # References to the mapping: `mapping` and getrefcount's argument, and one per
            # view (or its base) still alive.
            if sys.getrefcount(mapping) <= 2:
                self._finalizer()  # the edits end: flushes with the mapping, lets go of the lock
                return
            try:
                _update_crcs(self._crc_state, mapping)
            except BaseException:
                self._finalizer.detach()
                _close_lock(self._crc_state)
                raise
            # Views kept: writers are let in again, and what the views write later gets its
            # CRC-32s when the last of them goes (through a descriptor without the lock).
            _let_go_of_the_lock(self._crc_state)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        # Pickles (for multiprocessing and DataLoader workers) carry the path, not the data.
        if self._pickle_path is None:
            raise TypeError(f"a reader of {self._path} cannot be pickled: it was not opened "
                            "from a path")
        if self._mode == "r+":  # its copy would be a second writer, refused by the lock
            raise TypeError(f"an 'r+' reader of {self._path} cannot be pickled or copied: it "
                            "holds the archive's writers' lock; open it where it is used")
        return _reopen, (type(self), self._path) + self._options

    def __repr__(self):
        state = "closed" if self._reader is None else f"{len(self)} members"
        return f"<mmnpz.NpzReader {self._path!r}, {state}>"


def load(file, mmap_mode="r", allow_pickle=False, fix_imports=True, encoding="ASCII", *,
         max_header_size=_MAX_HEADER_SIZE, cache=True, preload=False, recover=False):
    """``numpy.load`` for .npz archives (an :class:`NpzReader`, memory-mapped) and .npy files,
    with numpy's arguments and their meaning (see :class:`NpzReader`). A .npy file gives what
    ``numpy.load`` gives: with a ``mmap_mode`` a ``numpy.memmap`` (also from a file object
    with a descriptor, which numpy refuses), with ``None`` an ordinary array. ``file`` is a
    path, a binary file object (a .npy is read from its current position, as numpy does; an
    archive is mapped through the descriptor of a regular file, else read whole from its
    start, as zipfile does), or the contents as ``bytes`` (starting with the ZIP or .npy
    magic), ``bytearray`` or ``memoryview``. Unlike numpy, ``mmap_mode`` defaults to
    ``"r"``: pass ``None`` for numpy's copies. ``recover=True`` opens an archive whose writer
    died (no directory, or an append interrupted) as :func:`recover` would make it, in memory,
    without writing to the file."""
    _check_numpy_options(mmap_mode, encoding)
    npy = dict(mmap_mode=mmap_mode, allow_pickle=bool(allow_pickle),
               pickle_kwargs={"encoding": encoding, "fix_imports": bool(fix_imports)},
               max_header_size=max_header_size)
    npz = dict(cache=cache, preload=preload, allow_pickle=allow_pickle,
               max_header_size=max_header_size, encoding=encoding, fix_imports=fix_imports,
               recover=recover)
    if _is_data(file):
        if bytes(file[:len(_NPY_MAGIC)]) == _NPY_MAGIC:
            return _load_npy(io.BytesIO(file), **npy)
        return NpzReader(file, mmap_mode, **npz)
    if hasattr(file, "read"):
        _check_readable(file)
        seekable = file.seekable() if hasattr(file, "seekable") else False
        magic = file.read(len(_NPY_MAGIC))
        if not isinstance(magic, bytes):
            raise TypeError(f"{_file_object_name(file)}: read() returned "
                            f"{type(magic).__name__}, not bytes (open the file in binary mode)")
        if seekable:
            file.seek(-len(magic), 1)
        elif magic:  # what was read is put back in front of the rest
            file = io.BytesIO(magic + file.read())
        if magic == _NPY_MAGIC:
            return _load_npy(file, **npy)
        if _is_pickle(magic):  # whatever it holds (the bytes of an archive, say)
            return _load_other(file, npy, None)
        if not _mmnpz.looks_like_zip(magic):
            return _load_other(file, npy, lambda: NpzReader(file, mmap_mode, **npz))
        return NpzReader(file, mmap_mode, **npz)
    path = _core.path(file)
    try:
        reader = NpzReader(path, mmap_mode, **npz)  # an archive: opened without a look first
    except _mmnpz.FormatError:
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            regular = False
        if not regular:
            raise  # a pipe opened again would wait for a writer that is gone
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
            f.seek(0)
            if magic == _NPY_MAGIC:
                return _load_npy(path if mmap_mode else f, **npy)
            if not npy["allow_pickle"] or _mmnpz.looks_like_zip(magic):
                raise
            return _load_other(f, npy, None)
    if not reader._reader.leading_bytes:
        return reader
    # Bytes before the archive: a .npy or a pickle that holds the bytes of one is what
    # numpy reads it as, by its first bytes.
    with open(path, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC and not _is_pickle(magic):
        return reader  # a self-extracting archive, say
    reader.close()
    with open(path, "rb") as f:
        if magic == _NPY_MAGIC:
            return _load_npy(path if mmap_mode else f, **npy)
        return _load_other(f, npy, None)


def _is_pickle(magic):
    """Whether `magic`, a file's first bytes, starts a pickle of protocol 2 or later (numpy's
    object arrays and pickled files are)."""
    return len(magic) >= 2 and magic[0] == 0x80 and 2 <= magic[1] <= 5


def _load_other(fid, npy, open_zip):
    """Neither ZIP nor .npy magic: a ZIP archive after leading bytes (a self-extracting
    archive; `open_zip` opens it, None when the file is a pickle by its first bytes), else,
    as numpy does, a pickle when allow_pickle."""
    if open_zip is None and not npy["allow_pickle"]:
        raise ValueError(f"{_file_object_name(fid)}: Cannot load file containing pickled data "
                         "when allow_pickle=False")
    start = fid.tell()
    if open_zip is not None:
        try:
            return open_zip()
        except _mmnpz.FormatError:
            if not npy["allow_pickle"]:
                raise
        fid.seek(start)
    try:
        return pickle.load(fid, **npy["pickle_kwargs"])
    except Exception as e:
        raise pickle.UnpicklingError(f"Failed to interpret file {_file_object_name(fid)!r} "
                                     "as a pickle") from e


def _load_npy(file, mmap_mode, allow_pickle, pickle_kwargs, max_header_size):
    """A .npy file (a path, or a file object at its start) as numpy.load reads it."""
    fmt = np.lib.format
    if isinstance(file, str):
        # numpy's own memmap of the file: the same type, flags and offset as np.load gives.
        return fmt.open_memmap(file, mode=mmap_mode,
                               max_header_size=2**64 if allow_pickle else max_header_size)
    if mmap_mode is None:
        return fmt.read_array(file, allow_pickle=allow_pickle, pickle_kwargs=pickle_kwargs,
                              max_header_size=max_header_size)
    if _regular_fileno(file) is not None:
        version = fmt.read_magic(file)
        shape, fortran_order, dtype = fmt._read_array_header(
            file, version, max_header_size=2**64 if allow_pickle else max_header_size)
        if dtype.hasobject:
            raise ValueError("Array can't be memory-mapped: Python objects in dtype.")
        offset = file.tell()
        array = np.memmap(file, dtype=dtype, shape=shape, order="F" if fortran_order else "C",
                          mode=mmap_mode, offset=offset)
        file.seek(offset + array.nbytes)  # after the array, as reading it leaves the file
        return array
    if mmap_mode == "r+":
        raise ValueError(f"{_file_object_name(file)}: 'r+' needs a file to write into; the "
                         ".npy was given in memory")
    array = fmt.read_array(file, allow_pickle=allow_pickle, pickle_kwargs=pickle_kwargs,
                           max_header_size=max_header_size)
    if mmap_mode == "r":
        array.flags.writeable = False
    return array

# Writing a strided array copies at most this many bytes at a time.
_STREAM_CHUNK = 16 << 20


def _raw_bytes(array):
    """The bytes of a C-contiguous array as a flat uint8 array (no copy)."""
    return array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)


class _MemberStream:
    """A member being written in pieces; see :meth:`NpzWriter.begin`."""

    def __init__(self, stream, dtype, name):
        self._stream = stream
        self.dtype = dtype
        self._name = name

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
        else:
            chunk = _core.byte_buffer(chunk, self._name)
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


def _is_bytes_value(value):
    return isinstance(value, (bytes, bytearray, memoryview))


class NpzWriter:
    """Writes a .npz archive of members whose array data is aligned in the file.

    :param file: path (``str`` or ``os.PathLike``)
    :param mode: ``"x"`` create (fails if the file exists), ``"w"`` replace (a new file,
        renamed over an existing one by ``close()``), ``"a"`` append
    :param align: array data starts at a multiple of this many bytes in the file (a power of
        two up to 65536)
    :param allow_duplicate_names: allow a name already in the archive (readers see the last)
    :param comment: the archive comment (``bytes``, at most 65,535, without the end record's
        signature ``b"PK\\x05\\x06"``); when appending, None keeps the archive's own
    :param compresslevel: None stores members (aligned, mappable); 0 to 9 (or -1, zlib's
        default) deflates what ``write()`` and ``write_bytes()`` write, as
        ``numpy.savez_compressed`` does (``begin()`` still stores)
    :param durable: ``close()`` also fsyncs the file and, for a new or replaced one, its
        directory

    Members are committed as ``write()`` returns; ``close()`` writes the directory. If the
    process dies before, :func:`recover` restores every committed member; a replaced archive
    (mode ``"w"``) is then left as it was, and readers of it keep their data in every case.
    A replacement is all or nothing: an exception leaving a ``with`` block in mode ``"w"``
    (and so one raised inside :func:`savez`) discards the new archive (see ``discard()``).
    One writer per file: a second one (in any process) raises ValueError. A writer may be
    shared by threads: its calls take turns.
    """

    def __init__(self, file, mode="x", *, align=64, allow_duplicate_names=False, durable=False,
                 comment=None, compresslevel=None):
        if mode not in ("x", "w", "a"):
            raise ValueError(f"mode must be 'x', 'w' or 'a', not {mode!r}")
        if comment is not None:
            if not isinstance(comment, (bytes, bytearray, memoryview)):
                raise TypeError(f"comment must be bytes, not {type(comment).__name__} (savez "
                                "and savez_compressed take no array named 'comment')")
            comment = bytes(comment)
        if compresslevel is not None and (not isinstance(compresslevel, int)
                                          or isinstance(compresslevel, bool)
                                          or not -1 <= compresslevel <= 9):
            raise ValueError("compresslevel must be None or an int from 0 to 9 (-1: zlib's "
                             f"default), not {compresslevel!r} (savez_compressed takes no "
                             "array named 'compresslevel')")
        self._level = compresslevel
        self._mode = mode
        # Guards self._writer only. The core writer takes turns itself (its calls wait, without
        # the GIL, for a stream another thread has open): a lock held across its calls here made
        # a thread waiting for a stream block the stream's own thread forever.
        self._lock = threading.Lock()
        path = _core.path(file)
        self._writer = _mmnpz.Writer(path, mode, _core.alignment(align, path),
                                     bool(allow_duplicate_names), bool(durable), comment)

    def _open_writer(self):
        writer = self._writer
        if writer is None:
            raise ValueError("the writer is closed")
        return writer

    def _descr(self, name, array):
        """The .npy descr of ``array``'s dtype. An object dtype is refused by the core writer,
        in the words of its other refusals (the file, the member), before it writes a byte or
        starts the member: no byte of an object array is ever taken."""
        _core.member_name(name)
        descr = repr(np.lib.format.dtype_to_descr(array.dtype))
        if array.dtype.hasobject:
            self._open_writer().begin(name, descr, array.shape, False)  # raises ValueError
            raise AssertionError(f"member {name!r}: the core writer took an object array")
        return descr

    def write(self, name, array):
        """Writes ``array`` (anything ``numpy.asarray`` takes) as member ``name + '.npy'``;
        a ``bytes``, ``bytearray`` or ``memoryview`` value is written as ``write_bytes()``
        does, under exactly ``name``. Subclasses (masked arrays, matrices, memmaps) are
        written as their plain array data, as ``numpy.savez`` writes them. Contiguous arrays
        are written from their memory, strided ones in chunks (a copy when deflating)."""
        if _is_bytes_value(array):
            self.write_bytes(name, array)
            return
        array = np.asarray(array)
        descr = self._descr(name, array)
        writer = self._open_writer()
        if self._level is not None:
            if not (array.flags.c_contiguous or array.flags.f_contiguous):
                array = np.ascontiguousarray(array)
            fortran = not array.flags.c_contiguous
            data = _raw_bytes(array.T if fortran else array)
            writer.write_deflated(name, data, descr, array.shape, fortran, self._level)
        elif array.flags.c_contiguous:
            writer.write(name, _raw_bytes(array), descr, array.shape, False)
        elif array.flags.f_contiguous:
            writer.write(name, _raw_bytes(array.T), descr, array.shape, True)
        else:
            # Other threads' members wait while the stream is open (the core writer's turns).
            with self.begin(name, array.dtype, array.shape) as stream:
                row_bytes = max(array[:1].nbytes, 1)
                step = max(1, _STREAM_CHUNK // row_bytes)
                for start in range(0, array.shape[0], step):
                    stream.write(array[start:start + step])

    def write_bytes(self, name, data):
        """Writes ``data`` (``bytes``, ``bytearray``, ``memoryview``, any contiguous buffer) as
        a member of exactly ``name`` (``"meta.json"``), not a .npy; ``load()`` gives it back
        as ``bytes``."""
        _core.member_name(name)
        data = _core.byte_buffer(data, name)
        level = -1 if self._level is None else self._level
        self._open_writer().write_bytes(name, data, self._level is not None, level)

    def begin(self, name, dtype, shape, fortran_order=False):
        """Starts a member written in pieces (for arrays larger than memory). Use as a context
        manager, or call ``commit()``; the member exists only once all its bytes arrived."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, numbers.Integral) else shape  # as numpy takes it
        shape = tuple(_core.integer(n, f"member {name!r}: each entry of shape") for n in shape)
        if dtype.subdtype is not None:
            # As np.empty(shape, dtype) makes it: an array of the base type, the sub-array's
            # shape appended (whose bytes in C order are those of the sub-array elements).
            if fortran_order:
                raise ValueError(f"member {name!r}: a sub-array dtype {dtype} in Fortran order "
                                 f"has no .npy layout; give dtype {dtype.base} and shape "
                                 f"{shape + dtype.shape} in C order")
            dtype, shape = dtype.base, shape + dtype.shape
        descr = self._descr(name, np.empty(0, dtype))
        if any(n < 0 for n in shape):  # numpy's words
            raise ValueError(f"member {name!r}: negative dimensions are not allowed (shape "
                             f"{shape})")
        if any(n >= 1 << 64 for n in shape):
            raise ValueError(f"member {name!r}: shape {shape} has an entry too large for a "
                             f"64-bit integer")
        stream = self._open_writer().begin(name, descr, shape, bool(fortran_order))
        return _MemberStream(stream, dtype, name)

    def close(self):
        """Writes the central directory and closes the file (idempotent). With mode ``"w"``,
        renames the new archive over the old one. Raises OSError saying what the file holds
        when that fails."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def discard(self):
        """Closes the writer leaving its path as it was before it (idempotent): a replaced
        archive (mode ``"w"``) stays as it was, a file the writer created is removed, an
        appended-to archive is cut back to what it was, without this writer's members."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.discard()

    def __reduce__(self):
        raise TypeError("an NpzWriter cannot be pickled or copied: it holds its file open and "
                        "locked; make a writer where it is used (or write the archive in one "
                        "process)")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        # A replacement is all or nothing: an exception leaves the old archive (or no file).
        if exc_type is not None and self._mode == "w":
            self.discard()
        else:
            self.close()


def _named_arrays(args, kwds):
    named = dict(kwds)
    for i, array in enumerate(args):
        key = f"arr_{i}"
        if key in named:
            raise ValueError(f"Cannot use un-named variables and keyword {key}")
        named[key] = array
    return named


def _save(file, named, compresslevel, comment):
    if isinstance(file, io.TextIOBase):  # refused before anything is written
        raise TypeError(f"{_file_object_name(file)}: the file is open in text mode (open the "
                        f"file in binary mode)")
    if hasattr(file, "write"):
        # A file object: written to a temporary file, then copied to it (alignment is relative
        # to where the file object stands).
        with tempfile.TemporaryDirectory(prefix="mmnpz-") as tmp:
            path = os.path.join(tmp, "archive.npz")
            try:
                _save(path, named, compresslevel, comment)
            except ValueError as e:  # a refusal names the file the user gave, not ours
                if type(e) is not ValueError or not str(e).startswith(path + ": "):
                    raise
                raise ValueError(_file_object_name(file) + str(e)[len(path):]) from None
            with open(path, "rb") as f:
                shutil.copyfileobj(f, file, 1 << 20)
        return
    path = _core.path(file)
    if not path.endswith(".npz"):
        path += ".npz"
    with NpzWriter(path, "w", comment=comment, compresslevel=compresslevel) as writer:
        for key, array in named.items():
            writer.write(key, array)


def savez(file, *args, comment=None, **kwds):
    """Like ``numpy.savez``, with every array's data 64-byte aligned in the file. Positional
    arrays are named ``arr_0``, ``arr_1``...; ``.npz`` is appended to a path without it; a
    binary file object is written too. ``bytes`` values become members of exactly their name
    (not 0-d arrays as in numpy). ``comment`` is the archive comment (``bytes``; so no array
    can be named ``comment``)."""
    _save(file, _named_arrays(args, kwds), None, comment)


def savez_compressed(file, *args, compresslevel=-1, comment=None, **kwds):
    """Like ``numpy.savez_compressed``: members deflated (zlib level ``compresslevel``, 0 to
    9, -1 for zlib's default as numpy uses), readable by numpy and any ZIP tool; deflated data
    cannot be mapped, so ``load()`` inflates it. Arguments as :func:`savez` (no array can be
    named ``compresslevel`` or ``comment``)."""
    _save(file, _named_arrays(args, kwds), compresslevel, comment)


def recover(file):
    """Rebuilds the central directory of an archive whose writer died before ``close()``.
    Returns a dict: members_recovered, names, bytes_kept, bytes_cut, directory_was_intact."""
    return _mmnpz.recover(_core.path(file))
