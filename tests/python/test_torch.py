"""mmnpz.torch: batches of excerpts through torch's DataLoader, its spawned workers and
torch.distributed ranks, compared with numpy slicing of the archives numpy wrote."""

import json
import os
import pickle
import socket
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mmnpz  # noqa: E402
import mmnpz.torch  # noqa: E402
from mmnpz.torch import ExcerptBatches, loader  # noqa: E402

LENGTH = 8  # rows per excerpt: labels at rate 1/4 take 2


def write_shards(directory, counts, seed=7, stem="train"):
    """Shards stem-0000s-of-0000n.npz written by np.savez: item g is clipGG, float32 (T, 8)
    with T in [3, 40], next to clipGG_labels, int64 (ceil(T / 4),). Returns the items in
    dataset order as (path, name, data, labels)."""
    rng = np.random.default_rng(seed)
    items = []
    for s, count in enumerate(counts):
        path = directory / f"{stem}-{s:05d}-of-{len(counts):05d}.npz"
        arrays = {}
        for _ in range(count):
            g = len(items)
            rows = int(rng.integers(3, 41))
            data = rng.standard_normal((rows, 8)).astype(np.float32)
            labels = rng.integers(0, 1000, size=-(-rows // 4))
            arrays[f"clip{g:02d}"], arrays[f"clip{g:02d}_labels"] = data, labels
            items.append((path, f"clip{g:02d}", data, labels))
        np.savez(path, **arrays)
    return items


@pytest.fixture
def shards(tmp_path):
    """16 items in 3 shards (6 + 5 + 5); the spec is str(tmp_path / "train@3.npz")."""
    return write_shards(tmp_path, [6, 5, 5])


def spec(items):
    return str(items[0][0].parent / "train@3.npz")


def excerpt(array, start, rows, pad, fill):
    """numpy's own rows [start, start + rows) of array as gather pads them, and valid rows."""
    if pad == "wrap":
        return array[(start + np.arange(rows)) % len(array)], rows
    piece = array[start:start + rows]
    out = np.full((rows,) + array.shape[1:], fill, dtype=array.dtype)
    out[:len(piece)] = piece
    return out, len(piece)


def assert_same_batch(got, want):
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def epoch_batches(batches, epoch):
    return [batches[(epoch, b)] for b in range(len(batches))]


def pairs(batch_list):
    return [(int(i), int(s)) for batch in batch_list
            for i, s in zip(batch["indices"], batch["starts"])]


@pytest.mark.parametrize("kind, pad", [("shuffle", "fill"), ("sliding", "none"),
                                       ("weighted", "wrap")])
def test_every_excerpt_of_every_batch_is_numpy_slicing_of_the_archives(shards, kind, pad):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=5,
                             kind=kind, hop=3, seed=11, pad=pad, fill=-1, drop_last=False,
                             fields={"labels": (None, "*_labels", 0.25)})
    batches.set_epoch(2)
    loaded = {path: np.load(path) for path in {item[0] for item in shards}}
    seen = []
    for b, batch in enumerate(loader(batches)):
        assert batch["epoch"] == 2 and batch["batch"] == b
        assert batch["data"].dtype == torch.float32 and batch["labels"].dtype == torch.int64
        assert batch["data"].shape == (len(batch["indices"]), LENGTH, 8)
        for k, (index, start) in enumerate(zip(batch["indices"].tolist(),
                                               batch["starts"].tolist())):
            path, name, _, _ = shards[index]
            data, valid = excerpt(loaded[path][name], start, LENGTH, pad, -1)
            labels, labels_valid = excerpt(loaded[path][name + "_labels"], start // 4,
                                           LENGTH // 4, pad, -1)
            assert np.array_equal(batch["data"][k].numpy(), data), (b, k, name, start)
            assert batch["valid"][k] == valid
            assert np.array_equal(batch["labels"][k].numpy(), labels), (b, k, name, start)
            assert batch["labels_valid"][k] == labels_valid
            seen.append(index)
    assert len(seen) == batches._per_rank and len(batches) == -(-len(seen) // 5)
    if kind == "shuffle":
        assert sorted(seen) == list(range(len(shards)))
    if kind == "sliding":  # every window [3k, 3k + 8) inside an item, in item order
        assert seen == [g for g, item in enumerate(shards)
                        for _ in range(0, len(item[2]) - LENGTH + 1, 3)]


def test_spawned_workers_reopen_the_archives_and_give_the_main_process_batches_in_order(shards):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                             seed=4, pad="fill", drop_last=False,
                             fields=[(None, "*_labels", 0.25)])
    state = pickle.dumps(batches)
    assert len(state) < 2048  # options, not archives nor batches
    copy = pickle.loads(state)
    assert copy._datasets is None  # opened on first use, in the process that uses it
    assert_same_batch(copy[(1, 2)], batches[(1, 2)])
    assert copy.dataset is not batches.dataset and copy.dataset.paths == batches.dataset.paths

    want = [epoch_batches(batches, 0), epoch_batches(batches, 1)]
    assert pairs(want[0]) != pairs(want[1])
    # Persistent workers keep the dataset they started with: the epoch comes with each key.
    workers = loader(batches, num_workers=2, multiprocessing_context="spawn",
                     persistent_workers=True)
    for epoch in (0, 1):
        batches.set_epoch(epoch)
        got = list(workers)
        assert [g["batch"] for g in got] == list(range(len(batches)))
        for g, w in zip(got, want[epoch]):
            assert_same_batch(g, w)
    # A plain DataLoader pickles the dataset, epoch included, for every iteration.
    batches.set_epoch(1)
    plain = torch.utils.data.DataLoader(batches, batch_size=None, num_workers=2,
                                        multiprocessing_context="spawn")
    got = list(plain)
    assert len(got) == len(want[1])
    for g, w in zip(got, want[1]):
        assert_same_batch(g, w)


def test_forked_workers_give_the_main_process_batches(shards):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                             seed=4, pad="wrap", fields={"labels": (None, "*_labels", 0.25)})
    batches.set_epoch(2)
    want = epoch_batches(batches, 2)
    got = list(loader(batches, num_workers=2, multiprocessing_context="fork"))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_batch(g, w)


def test_a_worker_gathers_each_field_straight_into_shared_memory(shards, monkeypatch):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=4,
                             fields={"labels": (None, "*_labels", 0.25)})
    want = batches[1]
    assert not want["data"].is_shared()

    class Worker:
        id, num_workers = 0, 2

    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Worker)
    got = batches[1]
    assert got["data"].is_shared() and got["labels"].is_shared()
    assert_same_batch(got, want)


def run_rank(rank, world_size, port, specs, out):
    """One rank of a torch.distributed run (gloo): every rank's (index, start) pairs of one
    epoch, for several datasets and drop_remainder, gathered to rank 0 and written to out."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mine, made = {}, []
    for name, source, drop_remainder in specs:
        batches = ExcerptBatches(source, select="clip??", length=LENGTH, batch_size=2, seed=5,
                                 pad="fill", drop_last=False, drop_remainder=drop_remainder)
        assert (batches.rank, batches.world_size) == (rank, world_size)
        batches.set_epoch(3)
        mine[name] = pairs(loader(batches))
        made.append((batches, pickle.dumps(batches)))
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)
    dist.destroy_process_group()
    # The rank was fixed when the dataset was made: a copy opened where torch.distributed is
    # not initialised (as in a DataLoader worker) still takes this rank's part.
    for batches, state in made:
        copy = pickle.loads(state)
        assert (copy.rank, copy.world_size) == (rank, world_size)
        assert_same_batch(copy[(3, 0)], batches[(3, 0)])
    if rank == 0:
        with open(out, "w") as f:
            json.dump(everyone, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_distributed_ranks_take_disjoint_parts_that_cover_each_epoch(tmp_path, shards):
    write_shards(tmp_path, [6, 5], seed=8, stem="odd")  # 11 items
    odd_spec = str(tmp_path / "odd@2.npz")
    specs = [("even", spec(shards), True), ("odd_drop", odd_spec, True),
             ("odd_repeat", odd_spec, False)]
    out = tmp_path / "ranks.json"
    torch.multiprocessing.spawn(run_rank, args=(2, free_port(), specs, str(out)), nprocs=2)
    ranks = json.loads(out.read_text())
    for name, source, drop_remainder in specs:
        whole = ExcerptBatches(source, select="clip??", length=LENGTH, batch_size=2, seed=5,
                               pad="fill", drop_last=False)
        assert (whole.rank, whole.world_size) == (0, 1)
        epoch = pairs(epoch_batches(whole, 3))  # the epoch as one process sees it
        parts = [[tuple(p) for p in ranks[r][name]] for r in range(2)]
        if name == "even":
            assert len(epoch) == 16 and all(len(part) == 8 for part in parts)
            assert not {i for i, _ in parts[0]} & {i for i, _ in parts[1]}
            assert sorted(parts[0] + parts[1]) == sorted(epoch)
            assert sorted(i for i, _ in parts[0] + parts[1]) == list(range(16))
        # Rank r takes positions r, r + 2, ... of the epoch: floor(11 / 2) each and one left
        # out with drop_remainder, else ceil(11 / 2) each by starting the epoch over.
        count = len(epoch) // 2 if drop_remainder else -(-len(epoch) // 2)
        for r in range(2):
            assert parts[r] == [epoch[(r + 2 * k) % len(epoch)] for k in range(count)]
        if name == "odd_repeat":
            assert sorted(set(parts[0] + parts[1])) == sorted(epoch)


def test_batches_depend_only_on_the_seed_epoch_and_position(shards):
    def make(seed):
        return ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                              seed=seed, pad="fill", drop_last=False)

    first, again, other = make(9), make(9), make(10)
    for epoch in (0, 1):
        for a, b in zip(epoch_batches(first, epoch), epoch_batches(again, epoch)):
            assert_same_batch(a, b)
    assert pairs(epoch_batches(first, 0)) != pairs(epoch_batches(other, 0))
    iterated = []
    for epoch in (0, 1):
        first.set_epoch(epoch)
        iterated.append(list(loader(first)))
    assert pairs(iterated[0]) != pairs(iterated[1])  # set_epoch changes the order...
    assert sorted(pairs(iterated[0])) != sorted(pairs(iterated[1]))  # ...and the crops
    assert sorted(i for i, _ in pairs(iterated[1])) == list(range(len(shards)))
    alone = make(9)  # batch b computed alone is batch b of the iteration
    alone.set_epoch(1)
    assert_same_batch(alone[3], iterated[1][3])
    assert_same_batch(make(9)[(1, 3)], iterated[1][3])
    assert_same_batch(alone[-1], iterated[1][-1])
    assert len(iterated[1][-1]["indices"]) == 16 - 3 * 5  # the last, partial batch
    with pytest.raises(IndexError, match="batch 6 is out of range for an epoch of 6 batches"):
        alone[6]


def test_drop_last_leaves_out_the_partial_batch(shards):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                             pad="fill", drop_last=True)
    assert len(batches) == 5 and len(loader(batches)) == 5
    assert [len(b["indices"]) for b in loader(batches)] == [3] * 5


def test_refuses_what_it_cannot_turn_into_tensors(tmp_path, shards):
    with pytest.raises(ValueError, match="field 'labels' has 6 items, the data 16"):
        ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=2,
                       fields={"labels": (str(shards[0][0]), "*_labels", 0.25)})
    with pytest.raises(ValueError, match="a field cannot be named 'valid'"):
        ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=2,
                       fields={"valid": (None, "*_labels", 0.25)})
    big_endian = tmp_path / "be.npz"
    np.savez(big_endian, a=np.zeros((10, 2), ">f4"))
    with pytest.raises(TypeError, match="field 'data': items of dtype >f4 cannot become "
                                        "torch tensors"):
        ExcerptBatches(big_endian, length=4, batch_size=1)
    with pytest.raises(ValueError, match="has no full batch of 32"):
        ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=32)


def test_a_copy_refuses_archives_that_changed_since_it_was_made(tmp_path):
    items = write_shards(tmp_path, [3])
    path = items[0][0]
    state = pickle.dumps(ExcerptBatches(path, select="clip??", length=2, batch_size=1))
    replacement = tmp_path / "new.npz"  # a new file: the old one may still be mapped
    np.savez(replacement, **{name: data for _, name, data, _ in items}, clip99=items[0][2])
    os.replace(replacement, path)
    with pytest.raises(RuntimeError, match="the archives changed since the batches were "
                                           "defined: 3 items and 3 samples per epoch then, 4"):
        pickle.loads(state)[0]


def test_import_mmnpz_does_not_import_torch():
    code = "import sys, mmnpz; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    assert "torch" not in mmnpz.__all__ and not hasattr(mmnpz, "ExcerptBatches")
