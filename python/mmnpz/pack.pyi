import argparse
import os
import types
from typing import (Callable, List, NamedTuple, Optional, Sequence, Tuple, Union)

import numpy as np
import numpy.typing as npt

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Member = Tuple[str, Union[npt.NDArray[np.generic], bytes]]

WAVE_EXTENSIONS: Tuple[str, ...]
SOUNDFILE_EXTENSIONS: Tuple[str, ...]
ARRAY_EXTENSIONS: Tuple[str, ...]
SUPPORTED: Tuple[str, ...]

class InputError(Exception): ...
class SizeError(argparse.ArgumentTypeError, ValueError): ...

def parse_size(text: str) -> int: ...

class Input(NamedTuple):
    path: str
    name: Optional[str]
    error: Optional[str]

def find_inputs(arguments: Sequence[str]) -> List[Input]: ...
def read_wave(path: str) -> Tuple[npt.NDArray[np.generic], bytes]: ...
def read_soundfile(path: str, soundfile: types.ModuleType
                   ) -> Tuple[npt.NDArray[np.generic], bytes]: ...
def read_audio(path: str, soundfile_module: Optional[types.ModuleType] = None
               ) -> Tuple[npt.NDArray[np.generic], bytes]: ...
def decode(item: Input, soundfile_module: Optional[types.ModuleType] = None
           ) -> List[_Member]: ...

class Progress:
    total: int
    tty: bool
    enabled: bool
    def __init__(self, total: int, enabled: bool) -> None: ...
    def update(self, done: int, written: int, shards: int, final: bool = False) -> None: ...

class Result(NamedTuple):
    spec: Optional[str]
    paths: List[str]
    packed: int
    members: int
    bytes: int
    skipped: int
    stopped: bool
    error: Optional[OSError]

def run(out: _Path, inputs: Sequence[_Path], *, max_bytes: Union[int, str, None] = None,
        max_items: Optional[int] = None, align: int = 64, jobs: int = 1, strict: bool = False,
        progress: Optional[bool] = None,
        report: Optional[Callable[[str, str], object]] = None) -> Result: ...
def main(argv: Optional[Sequence[str]] = None) -> int: ...
