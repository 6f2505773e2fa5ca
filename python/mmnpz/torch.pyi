import os
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.utils.data

from .data import Dataset

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Source = Union[_Path, Sequence[_Path]]
_Rate = Union[int, float, Any]  # anything fractions.Fraction takes
_Field = Tuple[Optional[_Source], Optional[str], _Rate]
_Key = Union[int, Tuple[int, int]]
_Batch = Dict[str, Union[torch.Tensor, int]]

__all__ = ["ExcerptBatches", "ExcerptLoader", "loader"]

class ExcerptBatches(torch.utils.data.Dataset[_Batch]):
    batch_size: int
    length: int
    pad: str
    fill: Any
    drop_last: bool
    threads: Optional[int]
    epoch: int
    def __init__(self, source: _Source, *, length: int, batch_size: int, kind: str = "shuffle",
                 seed: int = 0, hop: int = 0, shuffle_windows: bool = False,
                 random_crop: bool = True, num_samples: int = 0, drop_remainder: bool = True,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 pad: str = "none", fill: Any = 0, drop_last: bool = True,
                 select: Optional[str] = None, order: str = "concatenate",
                 fields: Union[Mapping[str, _Field], Sequence[_Field]] = (),
                 threads: Optional[int] = None, io: str = "auto") -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def dataset(self) -> Dataset: ...
    def set_epoch(self, epoch: int) -> None: ...
    def __len__(self) -> int: ...
    def sampler(self) -> torch.utils.data.Sampler[Tuple[int, int]]: ...
    def __getitem__(self, key: _Key) -> _Batch: ...

class ExcerptLoader(torch.utils.data.DataLoader[_Batch]):
    dataset: ExcerptBatches
    def __init__(self, dataset: ExcerptBatches, **options: Any) -> None: ...
    def __iter__(self) -> torch.utils.data.dataloader._BaseDataLoaderIter: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

def loader(source: Union[ExcerptBatches, _Source], *, num_workers: int = 0,
           multiprocessing_context: Any = None, pin_memory: bool = False,
           persistent_workers: bool = False, prefetch_factor: Optional[int] = None,
           timeout: float = 0, worker_init_fn: Optional[Callable[[int], None]] = None,
           **options: Any) -> ExcerptLoader: ...
