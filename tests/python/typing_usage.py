"""The README's Python examples, for mypy --strict against the .pyi stubs (test_typing.py).

Type-checked, never run: the functions below are not called (they would need the README's
files). Every public name of the stubs a user reaches through the README is used here, with
the types the stubs give it spelled out where that checks something.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

import mmnpz
import mmnpz.pack
import mmnpz.torch


def quickstart() -> None:
    with mmnpz.NpzWriter("dataset.npz") as w:  # mode "x": refuses to overwrite
        w.write("clip_0", np.ones((300, 80), np.float32))
    npz = mmnpz.load("dataset.npz")  # reads the directory only
    clip = npz["clip_0"]  # read-only numpy.memmap view, no copy
    info: mmnpz.MemberInfo = npz.info("clip_0")
    alignment: Optional[int] = info.alignment
    print(type(clip).__name__, np.shares_memory(clip, npz.mmap), alignment)


def reading_and_writing() -> None:
    with mmnpz.load("dataset.npz", mmap_mode="r", cache=True, preload=False,
                    allow_pickle=False) as npz:
        names: List[str] = npz.files
        for name in npz:
            item = npz[name]
            if isinstance(item, np.ndarray):
                shape: Tuple[int, ...] = item.shape
                print(shape)
        print(names, len(npz), "clip_0" in npz, npz.f.clip_0, npz.load("clip_0"), npz.path)
        for key, value in npz.items():
            print(key, value)
        problems: Optional[Dict[str, str]] = npz.verify()
        print(problems, npz.arrays)
    reader: mmnpz.NpzReader = mmnpz.NpzReader("dataset.npz")
    reader.close()
    with mmnpz.NpzWriter("big.npz", mode="w", align=4096) as w:
        with w.begin("huge", np.float32, (1_000_000, 80)) as stream:
            while stream.remaining:
                stream.write(np.zeros((1000, 80), np.float32))
    mmnpz.savez("saved.npz", np.arange(3), labels=np.zeros(3, np.int64))
    recovered: Dict[str, Any] = mmnpz.recover("big.npz")
    print(recovered)
    try:
        mmnpz.load("corrupt.npz")
    except mmnpz.FormatError as e:
        where: Tuple[str, str, Optional[int]] = (e.path, e.member, e.offset)
        print(where)


def training_data() -> None:
    ds = mmnpz.Dataset("train@16.npz", select="*_spec")  # train-00000-of-00016.npz ... as one
    lengths: npt.NDArray[np.int64] = ds.lengths
    print(lengths, ds.dtype, ds.trailing_shape)  # per-item lengths (from .npy headers only)
    sampler = mmnpz.Sampler(ds, "weighted", length=100, seed=0)
    loader = mmnpz.Loader(ds, sampler, batch_size=64, epochs=10)  # prefetches 2 batches
    checkpoint: Dict[str, Any] = {}
    for batch in loader:
        print(batch.data)  # (64, 100, 80) float32, one contiguous array
        print(batch.indices, batch.starts, batch.epoch, batch.position)
        checkpoint = loader.state_dict()  # a new loader resumes exactly with load_state_dict()
    resumed = mmnpz.Loader(ds, sampler, batch_size=64, epochs=10)
    resumed.load_state_dict(checkpoint)
    x = ds.gather([3, 17], [0, 20], 100)  # one call: C++, thread pool, GIL released
    print(x, len(ds), ds.name(0), ds.index("clip_spec"), ds.locate(0), ds[0], ds["clip_spec"])
    labels = mmnpz.Dataset(["a.npz", "b.npz"], select="*_labels", order="interleave")
    data, label_data = mmnpz.gather_fields([(ds, [3, 17], 1), (labels, [3, 17], 0.25)],
                                           [0, 20], 100, pad="fill")
    indices, starts = sampler.sample(0, 0, 64)
    print(data, label_data, indices, starts, sampler.epoch_size, len(sampler))


def shards() -> None:
    with mmnpz.ShardWriter("out/train.npz", max_bytes=1 << 30) as w:
        w.write("clip_0_spec", np.ones((300, 80), np.float32))
        w.write_bytes("clip_0.json", b"{}")
    spec: str = w.spec
    print(spec, w.paths, w.shards, w.items_written, w.closed)


def pytorch() -> None:
    batches = mmnpz.torch.ExcerptBatches("train@16.npz", length=100, batch_size=64, seed=1,
                                         kind="weighted", pad="fill",
                                         fields={"labels": (None, "*_labels", 0.25)})
    batches.set_epoch(1)
    for batch in mmnpz.torch.loader(batches, num_workers=4, multiprocessing_context="spawn"):
        print(batch["data"], batch["labels"], batch["epoch"])
    print(len(batches), batches.rank, batches.world_size, batches.dataset.lengths)


def pack() -> None:
    result = mmnpz.pack.run("out/audio.npz", ["wavs"], max_bytes="512M", jobs=2)
    if result.spec is not None:  # None when no input was packed (no shard written)
        ds = mmnpz.Dataset(result.spec, select="*[!.json]")
        print(ds, result.packed, result.skipped, result.error, mmnpz.pack.parse_size("64K"))
    status: int = mmnpz.pack.main(["out/audio.npz", "wavs", "--max-items", "100"])
    print(status)
