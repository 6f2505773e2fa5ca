"""Memory-mapped, zero-copy access to NumPy .npz archives, and a writer of aligned ones.

``mmnpz.load(file)`` is a drop-in for ``numpy.load`` (paths, file objects, bytes; .npz and
.npy; numpy's keywords): stored arrays of an archive come back as read-only ``numpy.memmap``
views of one mapping of the file (``mmap_mode`` "c", "r+" and None as in numpy), deflated
arrays as ordinary arrays (inflated once), other members as ``bytes``. ``mmnpz.NpzWriter``,
``savez`` and ``savez_compressed`` write members whose data is aligned in the file, readable
by numpy and any ZIP tool.
"""

from . import _mmnpz
from ._mmnpz import FormatError
from ._npz import (InterruptedAppendWarning, MemberInfo, NpzReader, NpzWriter, load, recover,
                   savez, savez_compressed)
from .data import Batch, Dataset, Loader, Sampler, concat, gather_fields
from .shards import ShardWriter

__all__ = [
    "Batch", "Dataset", "FormatError", "InterruptedAppendWarning", "Loader", "MemberInfo",
    "NpzReader", "NpzWriter", "Sampler", "ShardWriter", "concat", "gather_fields", "load",
    "recover", "savez", "savez_compressed",
]
__version__ = _mmnpz.__version__
