"""mmnpz.torch: batches of excerpts through torch's DataLoader, its spawned workers and
torch.distributed ranks, compared with numpy slicing of the archives numpy wrote."""

import json
import os
import pickle
import re
import socket
import subprocess
import sys
import time

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
                             kind=kind, hop=3 if kind == "sliding" else 0, seed=11, pad=pad,
                             fill=-1, drop_last=False,
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
                             pad="fill",  # the shards hold a clip shorter than LENGTH
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
    with pytest.raises(TypeError, match=r"^ExcerptBatches: field 'labels' must be a triple "
                                        r"\(source, select, rate\), not tuple of 2$"):
        ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=2,
                       fields={"labels": (None, "*_labels")})
    big_endian = tmp_path / "be.npz"
    np.savez(big_endian, a=np.zeros((10, 2), ">f4"))
    with pytest.raises(TypeError, match="field 'data': items of dtype >f4 cannot become "
                                        "torch tensors"):
        ExcerptBatches(big_endian, length=4, batch_size=1)
    with pytest.raises(ValueError, match="has no full batch of 32"):
        ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=32)


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=0), "batch_size must be positive, not 0"),
    (dict(batch_size=1000), "an epoch of 16 samples for rank 0 has no full batch of 1000"),
    (dict(pad="zero"), "pad must be one of 'none', 'fill', 'wrap', not 'zero'"),
    (dict(threads=-1), "threads must not be negative, not -1")])
def test_bad_options_are_refused_in_the_words_of_the_call_made(shards, options, message):
    arguments = dict(select="clip??", length=LENGTH, batch_size=2, pad="fill")
    arguments.update(options)
    with pytest.raises(ValueError, match=f"^ExcerptBatches: {re.escape(message)}$"):
        loader(spec(shards), **arguments)


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=2.5), "batch_size must be an integer, not float"),
    (dict(length=7.9), "length must be an integer, not float"),
    (dict(seed=1.5), "seed must be an integer, not float"),
    (dict(hop="2"), "hop must be an integer, not str"),
    (dict(rank=0.0, world_size=1), "rank must be an integer, not float"),
    (dict(threads=2.0), "threads must be an integer, not float")])
def test_sizes_seeds_and_ranks_that_are_not_integers_are_refused_not_truncated(
        shards, options, message):
    arguments = dict(select="clip??", length=LENGTH, batch_size=2, pad="fill")
    arguments.update(options)
    with pytest.raises(TypeError, match=f"^ExcerptBatches: {re.escape(message)}$"):
        ExcerptBatches(spec(shards), **arguments)


@pytest.mark.parametrize("options, error, message", [
    (dict(num_workers=1.5), TypeError, "loader: num_workers must be an integer, not float"),
    (dict(num_workers=1, prefetch_factor=1.5), TypeError,
     "loader: prefetch_factor must be an integer, not float"),
    (dict(num_workers=1, prefetch_factor=0), ValueError,
     "loader: prefetch_factor must be positive, not 0"),
    # torch asserted it away at iter() (a bare AssertionError).
    (dict(timeout=5), ValueError, "loader: timeout=5 applies to worker processes "
                                  "(num_workers > 0); batches made in this process have none")])
def test_worker_options_that_torch_would_assert_on_or_truncate_are_refused_by_name(
        shards, options, error, message):
    # torch 1.13 raised a bare AssertionError for prefetch_factor=0, and torch.empty's
    # argument list for a float count of workers or batches ahead.
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        loader(spec(shards), select="clip??", length=LENGTH, batch_size=2, **options)


@pytest.mark.parametrize("key, error, message", [
    ((0, 1, 2), TypeError, "ExcerptBatches: a key is a batch b or a pair (epoch, b), not a "
                           "tuple of 3"),
    ((0,), TypeError, "ExcerptBatches: a key is a batch b or a pair (epoch, b), not a tuple of 1"),
    (1.5, TypeError, "ExcerptBatches: a batch must be an integer, not float"),
    ((0.5, 0), TypeError, "ExcerptBatches: the key's epoch must be an integer, not float"),
    ((0, -9), IndexError, "batch -9 is out of range for an epoch of 8 batches")])
def test_keys_that_name_no_batch_are_refused_in_words_that_say_what_a_key_is(
        shards, key, error, message):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=2,
                             pad="fill")
    assert len(batches) == 8
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        batches[key]
    with pytest.raises(TypeError, match=r"^set_epoch: epoch must be an integer, not float$"):
        batches.set_epoch(1.5)


def test_a_copy_refuses_archives_that_changed_since_it_was_made(tmp_path):
    items = write_shards(tmp_path, [3])
    path = items[0][0]
    state = pickle.dumps(ExcerptBatches(path, select="clip??", length=2, batch_size=1))
    replacement = tmp_path / "new.npz"  # a new file: the old one may still be mapped
    np.savez(replacement, **{name: data for _, name, data, _ in items}, clip99=items[0][2])
    os.replace(replacement, path)
    with pytest.raises(RuntimeError, match=f"^the archives changed since the batches were "
                                           f"defined: {path}: another file was renamed over it "
                                           f"since the pickled dataset opened it"):
        pickle.loads(state)[0]
    # Appended to in place, with an item the batches would take.
    state = pickle.dumps(ExcerptBatches(path, select="clip??", length=2, batch_size=1))
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("clip98", items[0][2])
    with pytest.raises(RuntimeError, match=f"^the archives changed since the batches were "
                                           f"defined: {path}: it changed \\("):
        pickle.loads(state)[0]


def test_import_mmnpz_does_not_import_torch():
    code = "import sys, mmnpz; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    assert "torch" not in mmnpz.__all__ and not hasattr(mmnpz, "ExcerptBatches")


def test_each_pass_over_the_loader_is_a_new_epoch_unless_set_epoch_says_otherwise(shards):
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                             seed=2, pad="fill", drop_last=False)
    passes = loader(batches)
    first, second = list(passes), list(passes)
    assert [b["epoch"] for b in first] == [0] * 6 and [b["epoch"] for b in second] == [1] * 6
    assert pairs(first) != pairs(second)
    for got, want in zip(first + second, epoch_batches(batches, 0) + epoch_batches(batches, 1)):
        assert_same_batch(got, want)
    batches.set_epoch(7)  # wins for the next pass, which the one after follows
    assert {b["epoch"] for b in passes} == {7}
    assert {b["epoch"] for b in passes} == {8}
    for _, b in zip(range(2), passes):  # a pass left early still counts as one
        assert b["epoch"] == 9
    assert [b["epoch"] for b in passes] == [10] * 6
    assert batches.epoch == 10


def take(iterator, count):
    return [batch for _, batch in zip(range(count), iterator)]


@pytest.mark.parametrize("options", [dict(num_workers=0), dict(num_workers=2),
                                     dict(num_workers=2, persistent_workers=True)], ids=repr)
def test_a_new_pass_or_a_loaded_state_ends_the_pass_under_way(shards, options):
    """An older pass went on yielding its epoch's batches and moved state_dict() back to them
    (with persistent workers it took the newer pass's batches, whose iterator torch reuses)."""
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                             seed=2, pad="fill", drop_last=False)
    passes = loader(batches, multiprocessing_context="fork", **options)
    ended = ("^ExcerptLoader: this pass was ended by a newer iter\\(\\) or load_state_dict\\(\\) "
             "of the same loader; iterate the loader again to go on from its place$")
    first = iter(passes)
    assert pairs(take(first, 2)) == pairs(epoch_batches(batches, 0)[:2])
    second = iter(passes)
    assert pairs(take(second, 1)) == pairs(epoch_batches(batches, 1)[:1])
    with pytest.raises(RuntimeError, match=ended):
        next(first)
    assert (passes.state_dict()["epoch"], passes.state_dict()["position"]) == (1, 3)
    state = dict(passes.state_dict(), epoch=4, position=6)
    passes.load_state_dict(state)
    with pytest.raises(RuntimeError, match=ended):
        next(second)
    assert passes.state_dict() == state
    assert pairs(list(passes)) == pairs(epoch_batches(batches, 4)[2:])
    del first, second


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_resumes_from_a_state_dict_with_the_rest_of_the_stream(shards, workers):
    def make():
        return loader(spec(shards), select="clip??", length=LENGTH, batch_size=3, seed=6,
                      pad="fill", drop_last=False, fields={"labels": (None, "*_labels", 0.25)},
                      num_workers=workers, multiprocessing_context="fork" if workers else None)

    whole = loader(ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=3,
                                  seed=6, pad="fill", drop_last=False,
                                  fields={"labels": (None, "*_labels", 0.25)}))
    stream = [list(whole) for _ in range(3)]  # epochs 0, 1, 2
    first = make()
    assert first.state_dict()["epoch"] == 0 and first.state_dict()["position"] == 0
    assert len(list(first)) == 6
    taken = take(iter(first), 4)  # epoch 1, batches 0..3
    state = first.state_dict()
    assert {k: state[k] for k in ("epoch", "position", "seed", "kind", "batch_size", "rank",
                                  "world_size", "length", "items", "drop_last")} == {
        "epoch": 1, "position": 12, "seed": 6, "kind": "shuffle", "batch_size": 3, "rank": 0,
        "world_size": 1, "length": LENGTH, "items": 16, "drop_last": False}
    for got, want in zip(taken, stream[1]):
        assert_same_batch(got, want)
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert len(resumed) == 2  # what the next pass yields, as mmnpz.Loader's len says
    it = iter(resumed)
    assert len(it) == 2 and next(it)["batch"] == 4 and len(it) == len(resumed) == 2
    resumed.load_state_dict(state)
    assert len(resumed) == 2
    rest, after = list(resumed), list(resumed)
    assert len(resumed) == 6
    assert [b["batch"] for b in rest] == [4, 5] and len(after) == 6
    for got, want in zip(rest + after, stream[1][4:] + stream[2]):
        assert_same_batch(got, want)
    assert resumed.state_dict()["epoch"] == 3 and resumed.state_dict()["position"] == 0
    resumed.load_state_dict(dict(state, position=18))  # after the last batch of epoch 1
    assert resumed.state_dict()["epoch"] == 2 and resumed.state_dict()["position"] == 0
    again = list(resumed)
    assert len(again) == 6
    for got, want in zip(again, stream[2]):
        assert_same_batch(got, want)
    # mmnpz.Loader's state of the same position means the same batch.
    ds = mmnpz.Dataset(spec(shards), select="clip??")
    plain = mmnpz.Loader(ds, mmnpz.Sampler(ds, seed=6, length=LENGTH), 3, pad="fill",
                         drop_last=False, epochs=None)
    plain.load_state_dict(state)
    assert next(iter(plain)).indices.tolist() == stream[1][4]["indices"].tolist()

    with pytest.raises(ValueError, match="the saved state has seed=5, this loader 6"):
        resumed.load_state_dict(dict(state, seed=5))
    # A state of another excerpt length (its starts keep other windows) was taken.
    with pytest.raises(ValueError, match=f"^the saved state has length={LENGTH + 1}, this "
                                         f"loader {LENGTH}$"):
        resumed.load_state_dict(dict(state, length=LENGTH + 1))
    with pytest.raises(ValueError, match="the saved state's epoch 1 and position 13 are not "
                                         "the start of a batch of 3 in an epoch of 6 batches"):
        resumed.load_state_dict(dict(state, position=13))
    with pytest.raises(TypeError, match=r"^state must be a dict made by state_dict\(\), not "
                                        r"NoneType$"):
        resumed.load_state_dict(None)
    with pytest.raises(ValueError, match="^the saved state's epoch must not be negative, not "
                                         "-1$"):
        resumed.load_state_dict(dict(state, epoch=-1))
    with pytest.raises(ValueError, match="^the saved state has no 'position'$"):
        resumed.load_state_dict({"epoch": 1})


def _worker_1_starts_late(worker):
    if worker == 1:
        time.sleep(1.0)  # a slow import, a busy machine


def test_persistent_workers_resumed_where_a_worker_has_no_batch_give_every_next_pass_right(
        shards):
    """Resumed at an epoch's last batch, worker 1 has no batch in the first pass; it must not
    run the next pass twice (which handed out stale batches under later epochs)."""
    options = dict(select="clip??", length=LENGTH, batch_size=3, seed=6, pad="fill",
                   drop_last=False)
    whole = loader(ExcerptBatches(spec(shards), **options))
    stream = [list(whole) for _ in range(4)]
    assert len(stream[0]) == 6
    resumed = loader(spec(shards), num_workers=2, multiprocessing_context="fork",
                     persistent_workers=True, worker_init_fn=_worker_1_starts_late, **options)
    resumed.load_state_dict(dict(resumed.state_dict(), position=15))  # epoch 0, batch 5
    passes = [list(resumed) for _ in range(4)]
    assert [[b["batch"] for b in p] for p in passes] == [[5]] + [list(range(6))] * 3
    for got, want in zip(sum(passes, []), stream[0][5:] + stream[1] + stream[2] + stream[3]):
        assert_same_batch(got, want)


def ring_of(iterator):
    """The shared ring of a loader's iterator with workers (white box)."""
    return iterator._iterator._mmnpz_ring


def on_ring(tensor, ring):
    start = ring.memory.data_ptr()
    return start <= tensor.data_ptr() < start + ring.memory.numel()


def many_batches(shards, **options):
    """64 batches of 2 excerpts, the first 32 in epoch 0."""
    return ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=2, seed=3,
                          kind="replacement", num_samples=64, pad="wrap",
                          fields={"labels": (None, "*_labels", 0.25)}, **options)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # more workers than cores
@pytest.mark.parametrize("workers, prefetch", [(3, 1), (4, 3)])
def test_any_number_of_workers_claiming_give_the_stream_of_one_process(shards, workers,
                                                                       prefetch):
    """Mailbox rows wrap around (3 and 12 of them, over 32 batches) in two passes of
    persistent workers, the second left after 5 batches and resumed from its state."""
    batches = many_batches(shards)
    want = [epoch_batches(batches, e) for e in range(2)]
    persistent = loader(batches, num_workers=workers, prefetch_factor=prefetch,
                        multiprocessing_context="fork", persistent_workers=True)
    got = list(persistent)
    assert len(got) == len(want[0])
    for g, w in zip(got, want[0]):
        assert_same_batch(g, w)
    it = iter(persistent)
    for b in range(5):
        assert_same_batch(next(it), want[1][b])
    state = persistent.state_dict()
    del it
    resumed = loader(many_batches(shards), num_workers=workers, prefetch_factor=prefetch,
                     multiprocessing_context="fork")
    resumed.load_state_dict(state)
    got = list(resumed)
    assert len(got) == len(want[1]) - 5
    for g, w in zip(got, want[1][5:]):
        assert_same_batch(g, w)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_batch_held_is_never_overwritten_and_released_slots_are_reused(shards, context):
    batches = many_batches(shards)
    want = epoch_batches(batches, 0)
    it = iter(loader(batches, num_workers=2, multiprocessing_context=context))
    ring = ring_of(it)
    held = next(it)
    copy = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in held.items()}
    assert on_ring(held["data"], ring) and on_ring(held["labels"], ring)
    pointers = set()
    for b, batch in enumerate(it, 1):
        assert_same_batch(batch, want[b])
        assert on_ring(batch["data"], ring)  # one held, the rest released: slots to spare
        pointers.add(batch["data"].data_ptr())
        assert batch["data"].data_ptr() != held["data"].data_ptr()
    assert b == len(want) - 1
    assert len(pointers) <= ring.flags.numel() - 1  # slots reused, the held one never
    assert_same_batch(held, copy)
    assert_same_batch(held, want[0])
    del batch
    assert int(ring.flags.sum()) == 1  # the held batch's slot alone is lent
    view = held["data"][1:]
    del held, copy
    assert int(ring.flags.sum()) == 1  # a view keeps it
    del view
    assert int(ring.flags.sum()) == 0


def test_one_worker_with_every_batch_in_flight_keeps_them_on_its_ring_beside_a_held_one(
        shards):
    """Worker 1 starts late, so worker 0 gathers all num_workers * prefetch_factor batches in
    flight while the consumer holds a batch it keeps, the last one handed out and the one
    before (CI saw a spawned worker 1 start late, and a batch fell out of a ring one short)."""
    batches = many_batches(shards)
    want = epoch_batches(batches, 0)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=_worker_1_starts_late))
    ring = ring_of(it)

    def slot_of(batch):  # (worker, slot) of the ring that the batch's data rests on
        return divmod((batch["data"].data_ptr() - ring.memory.data_ptr()) // ring.slot_bytes,
                      ring.slots)

    held, previous = next(it), next(it)
    slots = {slot_of(held), slot_of(previous)}
    for b, batch in enumerate(it, 2):
        time.sleep(0.005)  # meanwhile worker 0 fills the batches in flight behind this one
        assert on_ring(batch["data"], ring), b
        assert_same_batch(batch, want[b])
        slots.add(slot_of(batch))
        previous = batch
    del previous, batch
    assert b == len(want) - 1
    assert_same_batch(held, want[0])
    # Worker 0 had them all, and every slot of its ring lent at once (4 in flight and 3 here).
    assert ring.slots == 2 * 2 + 3 and slots == {(0, s) for s in range(ring.slots)}
    assert int(ring.flags.sum()) == 1


def test_items_of_several_layouts_come_by_the_ring_when_a_batch_has_one(tmp_path):
    """The consumer's layout of a slot is reckoned once per batch size when every item has
    one; with items of several, from each batch's indices."""
    rng = np.random.default_rng(2)
    path = tmp_path / "mixed.npz"
    np.savez(path, **{f"c{i}": rng.standard_normal((20, 8 if i % 2 else 4)).astype(np.float32)
                      for i in range(8)})
    batches = ExcerptBatches(str(path), length=LENGTH, batch_size=1, seed=1)
    want = epoch_batches(batches, 0)
    assert {w["data"].shape for w in want} == {(1, LENGTH, 4), (1, LENGTH, 8)}
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork"))
    ring, count = ring_of(it), 0
    for count, (g, w) in enumerate(zip(it, want), 1):
        assert on_ring(g["data"], ring)
        assert_same_batch(g, w)
    assert count == len(want)


def test_batches_kept_beyond_the_ring_arrive_in_new_shared_memory(shards):
    batches = many_batches(shards)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork"))
    ring = ring_of(it)
    # The worker of each batch that came through the queue, not on the ring (white box). The
    # workers claim batches as they go, so how many each makes is the scheduler's: under load
    # one made 29 of the 32 and the other 3, leaving 4 of its 7 slots unused.
    by_queue, get = [], it._iterator._get

    def recording_get(w, timeout, got):
        if not get(w, timeout, got):
            return False
        by_queue.append(w)
        return True

    it._iterator._get = recording_get
    got = list(it)  # every batch kept: the workers run out of slots
    assert len(got) == 32
    for g, w in zip(got, epoch_batches(batches, 0)):
        assert_same_batch(g, w)
    outside = [g for g in got if not on_ring(g["data"], ring)]
    assert 0 < len(outside) == len(by_queue)
    assert all(g["data"].is_shared() for g in outside)
    assert len(got) - len(outside) == int(ring.flags.sum())  # none was given back
    # What each worker made, in order (a worker's claims only grow): batches on its ring (its
    # row of the ring's memory), then, once every slot of its ring was lent, by the queue.
    span, queued, made = ring.slots * ring.slot_bytes, iter(by_queue), {}
    for g in got:
        if on_ring(g["data"], ring):
            made.setdefault((g["data"].data_ptr() - ring.memory.data_ptr()) // span,
                            []).append("ring")
        else:
            made.setdefault(next(queued), []).append("queue")
    for w, kinds in made.items():
        on = kinds.count("ring")
        assert kinds == ["ring"] * on + ["queue"] * (len(kinds) - on), (w, kinds)
        assert on == ring.slots or on == len(kinds), (w, kinds)


def test_pinned_copies_are_made_from_the_ring_and_release_it(shards, monkeypatch):
    # No CUDA here: torch's pin thread runs with pinning faked as a copy.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, device=None: self.clone())
    batches = many_batches(shards)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork", pin_memory=True))
    assert it._iterator._pin_memory
    ring = ring_of(it)
    got = list(it)
    for g, w in zip(got, epoch_batches(batches, 0)):
        assert_same_batch(g, w)
        assert not on_ring(g["data"], ring)
    assert int(ring.flags.sum()) == 0  # every slot given back by the pin thread


def shared_memory_held(pids):
    """This process's file descriptors and mappings of shared memory (torch keeps a
    segment's descriptor open while its storage lives), and the /dev/shm entries of torch
    segments made by `pids`."""
    fds, held = set(), set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listing the directory, now closed
            continue
        if target.startswith("/dev/shm/"):
            fds.add(target)
    with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
        held = {line.split(maxsplit=5)[5].strip() for line in maps if "/dev/shm/" in line}
    entries = {e for e in os.listdir("/dev/shm") for p in pids if e.startswith(f"torch_{p}_")}
    return fds, held, entries


@pytest.mark.parametrize("context, persistent", [("fork", False), ("spawn", True)])
def test_no_shared_memory_is_left_once_the_loader_is_gone(shards, context, persistent):
    import gc

    batches = many_batches(shards)
    gc.collect()
    before = shared_memory_held([])
    workers = loader(batches, num_workers=2, multiprocessing_context=context,
                     persistent_workers=persistent)
    pids = [os.getpid()]
    for _ in range(2):
        it = iter(workers)
        pids += [w.pid for w in it._iterator._workers]
        kept = take(it, 20)  # beyond the ring: some batches in new segments
        assert shared_memory_held([])[:2] != before[:2]
        del it
    del workers, batches
    gc.collect()
    assert shared_memory_held(pids)[2] == set()  # every segment unlinked (while mapped)
    del kept
    gc.collect()
    assert shared_memory_held(pids) == before[:2] + (set(),)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers_of_a_plain_dataloader(shards, context):
    # Their copy of the ExcerptBatches kept the epoch it had when they started: every pass
    # after set_epoch(1), set_epoch(2) was epoch 0 again.
    batches = ExcerptBatches(spec(shards), select="clip??", length=LENGTH, batch_size=4, seed=3,
                             pad="fill")
    plain = torch.utils.data.DataLoader(batches, batch_size=None, num_workers=2,
                                        persistent_workers=True, multiprocessing_context=context)
    for epoch in (0, 2, 1):
        batches.set_epoch(epoch)
        got = [(int(b["epoch"]), b["indices"].tolist()) for b in plain]
        assert got == [(epoch, batches[(epoch, b)]["indices"].tolist())
                       for b in range(len(batches))]
    # Pickled for keeping (not for a process starting), it carries the epoch itself.
    assert pickle.loads(pickle.dumps(batches)).epoch == 1


def test_batches_unpickled_after_an_archive_was_replaced_refuse_to_gather_others(tmp_path):
    # Spawned workers open the archives again: one renamed over a path since, with as many
    # items, gave batches of its values in silence.
    path = tmp_path / "a.npz"
    mmnpz.savez(path, x=np.zeros((20, 2), np.float32), y=np.zeros((20, 2), np.float32))
    batches = ExcerptBatches(path, length=4, batch_size=2)
    kept = pickle.dumps(batches)
    mmnpz.savez(tmp_path / "b.npz", x=np.ones((20, 2), np.float32),
                y=np.ones((20, 2), np.float32))
    os.replace(tmp_path / "b.npz", path)
    assert batches[0]["data"].sum() == 0  # the archive it holds open
    with pytest.raises(RuntimeError, match=f"^the archives changed since the batches were "
                                           f"defined: {path}: another file was renamed over "
                                           f"it since the pickled dataset opened it"):
        pickle.loads(kept)[0]


def test_short_items_are_refused_when_the_loader_is_made(tmp_path):
    """With pad="none", items shorter than the excerpt fail when the loader is made, naming
    the call and the shortest item, instead of in the middle of an epoch."""
    path = tmp_path / "short.npz"
    with mmnpz.NpzWriter(path) as w:
        for i in range(6):
            w.write(f"c{i}", np.zeros((5 if i == 3 else 50, 3), np.float32))
    with pytest.raises(ValueError, match=r"^mmnpz\.torch\.ExcerptBatches\(pad='none'\): 1 of 6 "
                                         r"items are shorter than length=10, the shortest 'c3'"):
        mmnpz.torch.loader(str(path), batch_size=2, length=10)
    padded = mmnpz.torch.loader(str(path), batch_size=2, length=10, pad="fill")
    assert sum(1 for _ in padded) == 3


@pytest.mark.parametrize("io", ["read", "map"])
def test_workers_gathering_by_reads_or_through_the_mapping_give_the_same_batches(shards, io):
    batches = many_batches(shards, io=io)
    want = epoch_batches(many_batches(shards), 0)  # io="auto", in this process
    got = list(loader(batches, num_workers=2, multiprocessing_context="fork"))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_batch(g, w)
    with pytest.raises(ValueError, match="io must be one of 'auto', 'read', 'map', not 'mmap'"):
        many_batches(shards, io="mmap")


def test_a_worker_takes_the_free_slot_given_back_last():
    ring = mmnpz.torch._Ring(workers=2, slots=4, slot_bytes=4096)
    assert [ring.take(1) for _ in range(3)] == [0, 1, 2]
    ring.give_back(1, 0)
    ring.give_back(1, 1)
    assert ring.take(0) == 0  # the other worker's slots are its own
    assert [ring.take(1) for _ in range(4)] == [1, 0, 3, None]  # 3 was never lent
    assert ring.flags[1].tolist() == [1, 1, 1, 1]


def test_a_worker_seeds_torch_as_manual_seed_does():
    state = torch.get_rng_state()
    try:
        torch.manual_seed(1234)
        want = torch.rand(4)
        tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
        queued = tracker and getattr(tracker, "manual_seed_all_cb", None)
        mmnpz.torch._seed_torch(1234)
        assert torch.initial_seed() == 1234
        assert torch.equal(torch.rand(4), want)
        if torch.__version__.startswith("1.") and not torch.cuda._is_compiled():
            # No CUDA seed queued with a stack trace for a CUDA this torch cannot initialise.
            assert (tracker and getattr(tracker, "manual_seed_all_cb", None)) is queued
    finally:
        torch.set_rng_state(state)


def _note_worker(directory):
    info = torch.utils.data.get_worker_info()
    (directory / f"worker{info.id}").write_text(
        json.dumps([info.id, info.num_workers, type(info.dataset).__name__, info.seed,
                    torch.initial_seed(), torch.get_num_threads()]))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_get_torchs_worker_info_seeds_and_init_fn(shards, tmp_path, context):
    notes = tmp_path / "notes"
    notes.mkdir()
    import functools

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # forked workers start with 2 (spawned ones with torch's default)
    try:
        got = list(loader(many_batches(shards), num_workers=2, multiprocessing_context=context,
                          worker_init_fn=functools.partial(_note_worker_in, notes)))
    finally:
        torch.set_num_threads(threads)
    assert len(got) == 32
    seen = [json.loads((notes / f"worker{w}").read_text()) for w in range(2)]
    assert [s[:3] for s in seen] == [[0, 2, "ExcerptBatches"], [1, 2, "ExcerptBatches"]]
    assert seen[1][3] == seen[0][3] + 1  # base seed + worker id, as torch's workers
    assert all(s[4] == s[3] and s[5] == 1 for s in seen)  # torch seeded, one intra-op thread


def _note_worker_in(directory, worker_id):
    _note_worker(directory)


def _fail_in_worker_1(worker_id):
    if worker_id == 1:
        raise ValueError("no GPU for worker 1")


def _exit_in_worker_1(worker_id):
    if worker_id == 1:
        os._exit(3)


def _hang_in_worker_1(worker_id):
    if worker_id == 1:
        import time

        time.sleep(60)


def _fail_late_in_worker_1(worker_id):
    if worker_id == 1:
        import time

        time.sleep(0.5)  # the other worker may have gathered every batch by then
        raise ValueError("no GPU for worker 1")


def _wait_for_go_in_worker_1(worker_id):
    if worker_id == 1:
        import time

        go = os.environ["MMNPZ_TEST_GO"]
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)


def pass_until_error(it, want):
    """Iterates pass `it` of batches `want` until it raises; checks the batches before."""
    got = []
    try:
        for batch in it:
            got.append(batch)
    finally:
        for g, w in zip(got, want):
            assert_same_batch(g, w)
        assert len(got) <= len(want)


def _note_policy_in_worker(worker_id):
    with open(os.path.join(os.environ["MMNPZ_TEST_OUT"], f"policy{worker_id}"), "w") as f:
        f.write(str(os.sched_getscheduler(0)))


def _batch_policy_allowed():
    """Whether this system lets a process switch itself to SCHED_BATCH (in a child)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_run_as_batch_jobs_so_waking_they_do_not_preempt_the_consumer(
        shards, tmp_path, monkeypatch, context):
    monkeypatch.setenv("MMNPZ_TEST_OUT", str(tmp_path))
    list(loader(many_batches(shards), num_workers=2, multiprocessing_context=context,
                worker_init_fn=_note_policy_in_worker))
    want = os.SCHED_BATCH if _batch_policy_allowed() else os.SCHED_OTHER
    assert [int((tmp_path / f"policy{w}").read_text()) for w in range(2)] == [want, want]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the consumer's own is left as it was


@pytest.mark.parametrize("init_fn", [_fail_in_worker_1, _fail_late_in_worker_1])
def test_a_worker_init_fn_error_is_raised_in_the_main_process_by_the_passs_end(shards,
                                                                               init_fn):
    batches = many_batches(shards)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=init_fn))
    with pytest.raises(ValueError, match=r"(?s)Caught ValueError in DataLoader worker process "
                                         r"1\..*no GPU for worker 1"):
        pass_until_error(it, epoch_batches(batches, 0))
    assert it._iterator._workers == []


def test_workers_claim_batches_so_a_late_worker_holds_back_none(shards, tmp_path, monkeypatch):
    go = tmp_path / "go"
    monkeypatch.setenv("MMNPZ_TEST_GO", str(go))
    batches = many_batches(shards)
    want = epoch_batches(batches, 0)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=_wait_for_go_in_worker_1))
    for w in want:  # worker 1 waits in its init_fn: worker 0 gathers every batch
        assert_same_batch(next(it), w)
    go.touch()
    with pytest.raises(StopIteration):  # once worker 1 began (a worker that never does: below)
        next(it)


def test_a_worker_that_dies_or_hangs_is_an_error_not_a_wait_forever(shards, monkeypatch):
    monkeypatch.setattr(mmnpz.torch, "_POLL", 0.2)  # checks every 0.2 s, not 5
    batches = many_batches(shards)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=_exit_in_worker_1))
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid \d+\) exited unexpectedly "
                                           r"with exit code 3"):
        pass_until_error(it, epoch_batches(batches, 0))
    batches = many_batches(shards)  # the pass above was this one's epoch 0
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=_hang_in_worker_1, timeout=0.5))
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.5 seconds"):
        pass_until_error(it, epoch_batches(batches, 0))
    assert it._iterator._workers == []  # stopped (the hung one terminated)


def test_a_timeout_is_raised_when_it_is_up_not_after_waiting_for_each_worker(shards):
    """The workers are stopped without the 5 s grace each, which the timeout's error used to
    wait out worker after worker (12 s for a 2 s timeout with 2 workers)."""
    batches = many_batches(shards)
    it = iter(loader(batches, num_workers=2, multiprocessing_context="fork",
                     worker_init_fn=_hang_in_worker_1, timeout=0.5))
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.5 seconds"):
        pass_until_error(it, epoch_batches(batches, 0))
    assert time.monotonic() - began < 0.5 + mmnpz.torch._POLL - 1
    assert it._iterator._workers == []


def test_an_archive_cut_under_the_workers_is_an_error_naming_the_member(tmp_path):
    path = tmp_path / "cut.npz"
    rng = np.random.default_rng(0)
    np.savez(path, **{f"c{i}": rng.standard_normal((4000, 8)).astype(np.float32)
                      for i in range(8)})
    batches = ExcerptBatches(str(path), length=100, batch_size=4, seed=1)  # headers decoded
    os.truncate(path, os.path.getsize(path) // 3)
    with pytest.raises(Exception, match=r"(?s)in DataLoader worker process \d.*cut\.npz.*c\d"
                                        r".*the archive was truncated after it was opened"):
        list(loader(batches, num_workers=2, multiprocessing_context="fork"))


def test_persistent_workers_restart_after_a_pass_left_early(shards):
    batches = many_batches(shards)
    want = [epoch_batches(batches, e) for e in range(3)]
    workers = loader(batches, num_workers=2, multiprocessing_context="fork",
                     persistent_workers=True)
    it = iter(workers)
    pids = [w.pid for w in it._iterator._workers]
    for got, w in zip(take(it, 3), want[0]):  # left after 3 of 32 batches
        assert_same_batch(got, w)
    second = list(workers)  # new workers: the old ones were mid-pass
    assert [w.pid for w in workers._iterator._workers] != pids
    pids = [w.pid for w in workers._iterator._workers]
    third = list(workers)  # the same workers: the last pass was whole
    assert [w.pid for w in workers._iterator._workers] == pids
    for got, w in zip(second + third, want[1] + want[2]):
        assert_same_batch(got, w)
    assert len(second) == len(third) == 32


def assert_workers_exit_after_their_main_process(program, within=20):
    """Runs `program`, whose main process prints its two workers' pids and ends at once, and
    checks that the workers exit within `within` seconds (any left are killed). Only the
    printed line is read before: the workers hold the output pipes open while they live."""
    import signal
    import time

    main = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = main.stdout.readline()
    status = main.wait(timeout=60)
    pids = [int(p) for p in line.split()]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    err = main.stderr.read()  # every writer is gone now
    main.stdout.close()
    main.stderr.close()
    assert status == 0, err
    assert len(pids) == 2, line
    assert alive == [], f"workers {alive} outlived their main process"


def test_workers_exit_when_the_main_process_dies_without_stopping_them(shards):
    """A main process killed (no cleanup) leaves no worker behind: waiting workers check that
    their parent lives."""
    program = f"""
import os, sys
import mmnpz.torch
mmnpz.torch._POLL = 0.2
it = iter(mmnpz.torch.loader({spec(shards)!r}, select="clip??", length=4, batch_size=2,
                             pad="fill", num_workers=2, multiprocessing_context="fork",
                             persistent_workers=True))
next(it)
print(" ".join(str(w.pid) for w in it._iterator._workers), flush=True)
os._exit(0)
"""
    assert_workers_exit_after_their_main_process(program)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_first_run_after_their_main_process_died_exit(shards, method):
    """A worker scheduled for the first time only once its main process is gone (its parent
    is then already the reaper) still notices and exits. Forked workers are held in an
    at-fork hook until the main process has died; spawned ones start after it did."""
    program = f"""
import os, sys, time
import mmnpz.torch
mmnpz.torch._POLL = 0.2
main = os.getpid()
def hold():  # in the forked worker, before any of its code runs
    deadline = time.monotonic() + 30
    while os.getppid() == main and time.monotonic() < deadline:
        time.sleep(0.01)
os.register_at_fork(after_in_child=hold)
it = iter(mmnpz.torch.loader({spec(shards)!r}, select="clip??", length=4, batch_size=2,
                             pad="fill", num_workers=2, multiprocessing_context={method!r},
                             persistent_workers=True))
print(" ".join(str(w.pid) for w in it._iterator._workers), flush=True)
os._exit(0)
"""
    assert_workers_exit_after_their_main_process(program)


def test_ctrl_c_stops_the_main_process_and_its_workers_quietly(shards):
    """Ctrl-C reaches the whole process group: the main process raises KeyboardInterrupt,
    and the workers leave without tracebacks of their own."""
    import signal
    import time

    # Python raises KeyboardInterrupt only where SIGINT was not ignored when it started, and a
    # shell without job control starts background commands with SIGINT ignored (a CI run
    # started with `&`: every process slept through the signal). The program takes Ctrl-C as
    # a terminal would deliver it. faulthandler on SIGUSR1 (the forked workers inherit it):
    # should the group not end, the failure shows where each process was.
    program = f"""
import faulthandler, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)
import mmnpz.torch
it = iter(mmnpz.torch.loader({spec(shards)!r}, select="clip??", length=4, batch_size=2,
                             pad="fill", num_workers=2, multiprocessing_context="fork",
                             persistent_workers=True))
next(it)
print("ready", flush=True)
time.sleep(60)
"""
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.5)  # the workers are waiting on their semaphores
        os.killpg(child.pid, signal.SIGINT)
        try:
            _, err = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            # The pipes stay open while any process of the group lives: say which, and where.
            ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:32,args", "-s",
                                 str(child.pid)], capture_output=True, text=True).stdout
            os.killpg(child.pid, signal.SIGUSR1)
            time.sleep(1)
            os.killpg(child.pid, signal.SIGKILL)
            _, err = child.communicate()
            pytest.fail(f"the process group did not end within 30 s of SIGINT (main process "
                        f"exit status {child.returncode});\n{ps}\nstderr:\n{err}")
    finally:
        try:  # not child.poll(): a worker may outlive the main process
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.communicate()
    assert child.returncode != 0 and err.rstrip().endswith("KeyboardInterrupt"), err
    assert err.count("Traceback") == 1, err  # the main process's alone
