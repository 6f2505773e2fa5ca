"""Memory-mapped, zero-copy access to NumPy .npz archives, and a writer of aligned ones.

``mmnpz.load(path)`` is a drop-in for ``numpy.load`` on .npz files: stored arrays come back as
read-only ``numpy.memmap`` views of one mapping of the file, deflated arrays as ordinary
arrays (inflated once), other members as ``bytes``. ``mmnpz.NpzWriter`` writes members whose
data is aligned in the file, readable by numpy and any ZIP tool.
"""

from . import _mmnpz
from ._mmnpz import FormatError
from ._npz import (InterruptedAppendWarning, MemberInfo, NpzReader, NpzWriter, load, recover,
                   savez)
from .data import Batch, Dataset, Loader, Sampler, concat, gather_fields
from .shards import ShardWriter

__all__ = [
    "Batch", "Dataset", "FormatError", "InterruptedAppendWarning", "Loader", "MemberInfo",
    "NpzReader", "NpzWriter", "Sampler", "ShardWriter", "concat", "gather_fields", "load",
    "recover", "savez",
]
__version__ = _mmnpz.__version__
