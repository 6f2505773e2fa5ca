"""Datasets, batched gather, samplers and the loader, checked against numpy slicing of arrays
that numpy itself wrote and read back."""

import contextlib
import errno
import json
import mmap
import os
import pickle
import re
import resource
import subprocess
import sys
import textwrap
import threading
import zipfile

import numpy as np
import pytest

import mmnpz
from test_gil import progress_during

RNG = np.random.default_rng(7)


def write_shards(tmp_path, shards=3, per_shard=7, bins=5, dtype=np.float32, stem="train",
                 rng=RNG):
    """numpy-written shards stem-0000i-of-0000N.npz of (frames, bins) members; returns the
    dict name -> array in global (concatenated) order."""
    arrays = {}
    for s in range(shards):
        members = {}
        for k in range(per_shard):
            frames = int(rng.integers(1, 60))
            members[f"s{s}_clip{k}"] = rng.standard_normal((frames, bins)).astype(dtype)
        np.savez(tmp_path / f"{stem}-{s:05d}-of-{shards:05d}.npz", **members)
        arrays.update(members)
    return arrays


def numpy_excerpt(array, start, length, pad="none", fill=0):
    rows = np.arange(start, start + length)
    if pad == "wrap":
        return array[rows % len(array)]
    out = np.full((length,) + array.shape[1:], fill, dtype=array.dtype)
    n = max(0, min(length, len(array) - start))
    out[:n] = array[start:start + n]
    return out


@pytest.fixture
def shards(tmp_path):
    # The same arrays whichever tests ran before (a test run alone, or in another order); a
    # seed whose items include some shorter than 3 rows, for the samplers' warnings.
    return tmp_path / "train@3.npz", write_shards(tmp_path, rng=np.random.default_rng(10))


def short_items(ds, length):
    """How many items of `ds` are shorter than `length` (some must be, for the warning)."""
    count = int(np.count_nonzero(ds.lengths < length))
    assert count > 0, "the fixture's lengths changed: no item is short enough to warn about"
    return count


def test_a_shard_spec_opens_every_shard_in_order_with_numpys_lengths_and_layouts(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    names = list(arrays)
    assert len(ds) == len(arrays)
    assert [ds.name(i) for i in range(len(ds))] == names
    assert ds.lengths.tolist() == [len(a) for a in arrays.values()]
    assert ds.lengths.dtype == np.int64 and not ds.lengths.flags.writeable
    assert ds.dtype == np.float32 and ds.trailing_shape == (5,)
    assert ds.trailing_shapes.tolist() == [[5]] * len(ds)
    assert list(ds.dtypes) == [np.dtype(np.float32)] * len(ds)
    for i, (name, want) in enumerate(arrays.items()):
        assert ds.index(name) == i
        assert np.array_equal(ds[i], want) and np.array_equal(ds[name], want)
    assert ds.locate(8) == (str(spec).replace("@3", "-00001-of-00003"), "s1_clip1.npy")
    with np.load(ds.locate(8)[0]) as f:
        assert np.array_equal(f["s1_clip1"], ds[8])
    with pytest.raises(KeyError, match="no item named 'nope'"):
        ds.index("nope")
    with pytest.raises(IndexError, match="index 21 is out of range for a dataset of 21 items"):
        ds[21]
    assert np.array_equal(ds[-21], ds[0])
    with pytest.raises(IndexError, match="^index -22 is out of range for a dataset of 21 items$"):
        ds[-22]


def test_items_come_from_the_archive_the_dataset_opened_after_another_replaces_it(tmp_path):
    # ds[i] opened the path again: after a new archive was renamed over it, ds[0] was the new
    # archive's member (3 rows, where ds.lengths and gather said 50), and after the path was
    # removed, FileNotFoundError.
    path = tmp_path / "a.npz"
    old = np.arange(100, dtype=np.float32).reshape(50, 2)
    mmnpz.savez(path, x=old, y=old[:7])
    ds = mmnpz.Dataset(path)
    mmnpz.savez(tmp_path / "b.npz", x=np.full((3, 2), -1, np.float32))
    os.replace(tmp_path / "b.npz", path)
    assert ds.lengths.tolist() == [50, 7]
    assert np.array_equal(ds[0], old) and np.array_equal(ds["y"], old[:7])
    assert np.array_equal(ds.gather([0], [0], 50)[0], ds[0])
    os.remove(path)
    assert np.array_equal(ds[1], old[:7]) and np.array_equal(ds[1:][0], old[:7])


def test_lists_globs_and_interleaving_number_items_as_documented(tmp_path):
    a = write_shards(tmp_path, shards=2, per_shard=3, stem="a")
    paths = sorted(tmp_path.glob("a-*.npz"))
    by_list = mmnpz.Dataset([str(p) for p in paths])
    by_glob = mmnpz.Dataset(tmp_path / "a-*.npz")
    assert [by_list.name(i) for i in range(6)] == list(a)
    assert by_glob.paths == by_list.paths == tuple(str(p) for p in paths)
    inter = mmnpz.Dataset(tmp_path / "a@2.npz", order="interleave")
    assert [inter.name(i) for i in range(6)] == [
        "s0_clip0", "s1_clip0", "s0_clip1", "s1_clip1", "s0_clip2", "s1_clip2"]
    with pytest.raises(FileNotFoundError, match=r"zzz-\*\.npz"):
        mmnpz.Dataset(tmp_path / "zzz-*.npz")
    with pytest.raises(FileNotFoundError):
        mmnpz.Dataset(tmp_path / "a@3.npz")  # a-00002-of-00003.npz does not exist


def test_mixed_archives_report_per_item_dtypes_and_trailing_shapes(tmp_path):
    path = tmp_path / "mixed.npz"
    np.savez(path, a=np.zeros((3, 4), np.float32), b=np.zeros((2,), ">i2"),
             c=np.zeros((5, 2, 3), np.float64), rate=np.float64(16000))
    with pytest.raises(ValueError, match="'rate.npy': is a 0-d array"):
        mmnpz.Dataset(path)
    ds = mmnpz.Dataset(path, select="[abc]")
    assert ds.lengths.tolist() == [3, 2, 5]
    assert list(ds.dtypes) == [np.dtype(np.float32), np.dtype(">i2"), np.dtype(np.float64)]
    assert ds.trailing_shapes.tolist() == [[4, -1], [-1, -1], [2, 3]]
    with pytest.raises(ValueError, match="3 different"):
        ds.dtype
    with pytest.raises(TypeError, match="member 'b.npy': has dtype >i2 but the batch has <f4"):
        ds.gather([0, 1], [0, 0], 1)
    got = ds.gather([1, 1], [0, 1], 1)
    assert got.dtype == np.dtype(">i2") and got.shape == (2, 1)


@pytest.mark.parametrize("pad", ["none", "fill", "wrap"])
# 2^62 and 3 * 2^62 threads (as many as there are tasks) were a SIGFPE: 4 * threads wrapped to 0.
@pytest.mark.parametrize("threads", [1, 2, 0, 2**62, 3 * 2**62])
def test_every_excerpt_equals_numpy_slicing(shards, pad, threads):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    values = list(arrays.values())
    length = 16
    indices = RNG.integers(0, len(ds), 200)
    if pad == "none":
        indices = np.array([i for i in indices if len(values[i]) >= length])
        starts = np.array([RNG.integers(0, len(values[i]) - length + 1) for i in indices])
    elif pad == "fill":
        starts = np.array([RNG.integers(0, len(values[i]) + 1) for i in indices])
    else:
        starts = RNG.integers(0, 1000, len(indices))
    got, valid = ds.gather(indices, starts, length, pad=pad, fill=-2.5, threads=threads,
                           valid=True)
    assert got.shape == (len(indices), length, 5) and got.flags.c_contiguous
    for k, (i, s) in enumerate(zip(indices, starts)):
        assert np.array_equal(got[k], numpy_excerpt(values[i], s, length, pad, -2.5)), k
        want_valid = min(length, len(values[i]) - s) if pad == "fill" else length
        assert valid[k] == want_valid


def test_compressed_fortran_and_big_endian_members_are_gathered_like_numpy(tmp_path):
    path = tmp_path / "odd.npz"
    c = np.arange(60, dtype=">f8").reshape(12, 5)
    f = np.asfortranarray((np.arange(60).reshape(12, 5) * 2).astype(">f8"))
    np.savez_compressed(path, c=c, f=f)
    ds = mmnpz.Dataset(path)
    got = ds.gather([0, 1, 1], [2, 0, 7], 5)
    assert got.dtype == np.dtype(">f8")
    for k, (i, s) in enumerate([(0, 2), (1, 0), (1, 7)]):
        assert np.array_equal(got[k], [c, f][i][s:s + 5])


def test_a_given_out_array_is_filled_in_place_and_checked(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    out = np.full((2, 1, 5), 9, np.float32)
    assert ds.gather([0, 1], [0, 0], 1, out=out) is out
    assert np.array_equal(out[1, 0], list(arrays.values())[1][0])
    with pytest.raises(ValueError, match=r"out has dtype float64 and shape \(2, 1, 5\), the "
                                         r"batch needs float32 and \(2, 1, 5\)"):
        ds.gather([0, 1], [0, 0], 1, out=np.zeros((2, 1, 5)))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        ds.gather([0, 1], [0, 0], 1, out=np.zeros((2, 1, 10), np.float32)[:, :, ::2])
    frozen = np.zeros((2, 1, 5), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="must be writable"):
        ds.gather([0, 1], [0, 0], 1, out=frozen)


def test_bad_requests_raise_clear_errors_and_leave_out_untouched(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    first = str(spec).replace("@3", "-00000-of-00003")
    n0 = len(arrays["s0_clip0"])
    assert len(arrays["s0_clip1"]) > n0  # so that only entry 1 of the batch is too short
    out = np.full((2, n0 + 1, 5), 7, np.float32)
    with pytest.raises(ValueError) as e:
        ds.gather([1, 0], [0, 0], n0 + 1, out=out)
    assert str(e.value).endswith(
        f"member 's0_clip0.npy': excerpt [0, {n0 + 1}) runs past the end of the member "
        f"({n0} rows); pad or wrap to allow it")
    assert str(e.value).startswith(first) or len(arrays["s0_clip1"]) < n0 + 1
    assert (out == 7).all()
    with pytest.raises(IndexError, match=r"index 99 \(batch entry 1\) is out of range"):
        ds.gather([0, 99], [0, 0], 1)
    with pytest.raises(ValueError, match="excerpt start -1 is negative"):
        ds.gather([0], [-1], 1)
    with pytest.raises(ValueError, match="there are 2 indices but 1 starts"):
        ds.gather([0, 1], [0], 1)
    with pytest.raises(ValueError, match="pad must be one of"):
        ds.gather([0], [0], 1, pad="zeros")
    with pytest.raises(TypeError, match="indices must be integers, not float64"):
        ds.gather([0.5], [0], 1)
    with pytest.raises(TypeError, match="starts must be integers, not float64"):
        ds.gather([0], [1.5], 1)
    with pytest.raises(TypeError, match="lengths must be integers, not float64"):
        mmnpz.Sampler([3.7, 4.0])


@pytest.mark.parametrize("big", [np.array([2**63], np.uint64), [2**63], [2**64]])
def test_indices_and_starts_no_int64_holds_are_refused_as_given_not_wrapped(shards, big):
    # Cast to int64, 2^63 was "index -9223372036854775808" and 2^64 - 1 "start -1 is negative"
    # (2^64 itself, an object array, "must be integers, not object").
    ds = mmnpz.Dataset(shards[0])
    value = int(np.asarray(big, dtype=object)[0])
    with pytest.raises(IndexError, match=f"^Dataset.gather: indices: {value} does not fit in a "
                                         f"64-bit signed integer$"):
        ds.gather(big, [0], 1)
    with pytest.raises(ValueError, match=f"^Dataset.gather: starts: {value} does not fit in a "
                                         f"64-bit signed integer$"):
        ds.gather([0], big, 1)
    with pytest.raises(IndexError, match=f"^subset: index {value} is out of range for a "
                                         f"dataset of {len(ds)} items$"):
        ds[big]
    with pytest.raises(IndexError, match=f"^gather_fields: indices: {value} does not fit"):
        mmnpz.gather_fields([(ds, big, 1)], [0], 1)
    # Unsigned and object arrays of values int64 holds are taken.
    assert ds.gather(np.array([1], np.uint64), np.array([0], object), 1).shape[0] == 1
    assert len(ds[np.array([1, -1], dtype=object)]) == 2


def test_a_fill_out_of_the_dtypes_range_is_refused_and_every_other_fill_kept_bit_for_bit(
        tmp_path):
    with mmnpz.NpzWriter(tmp_path / "d.npz") as w:
        w.write("u", np.arange(6, dtype="u1").reshape(3, 2))
    with mmnpz.NpzWriter(tmp_path / "f.npz") as w:
        w.write("f", np.ones((3, 2), "<f4"))
    u8, f32 = mmnpz.Dataset(tmp_path / "d.npz"), mmnpz.Dataset(tmp_path / "f.npz")
    for ds, fill, dtype in ((u8, 300, "uint8"), (u8, -1, "uint8"), (u8, 2**70, "uint8"),
                            (f32, 1e300, "float32")):
        with pytest.raises(ValueError) as e:
            ds.gather([0], [0], 5, pad="fill", fill=fill)
        assert str(e.value) == (f"Dataset.gather: fill {fill!r} is out of the range of the "
                                f"data's dtype {dtype}")
        with pytest.raises(ValueError) as e:
            next(iter(mmnpz.Loader(ds, mmnpz.Sampler(ds, length=5, pad="fill"), 1, pad="fill",
                                   fill=fill)))
        assert str(e.value).startswith("Loader: fill ")
    assert u8.gather([0], [0], 5, pad="fill", fill=255)[0, 3:].tolist() == [[255, 255]] * 2
    for fill in (-0.0, np.inf, 0.0, 0):  # -0.0 is not zeros: its sign is kept
        got = f32.gather([0], [0], 4, pad="fill", fill=fill)[0, 3]
        assert got.tobytes() == np.full(2, fill, "<f4").tobytes(), fill
    # A zero fill (the default) pads with zero bytes in every dtype, not with "0" in a string.
    with mmnpz.NpzWriter(tmp_path / "s.npz") as w:
        w.write("s", np.array([[b"ab"], [b"cd"]], "S3"))
    strings = mmnpz.Dataset(tmp_path / "s.npz")
    for fill in (0, 0.0, np.int64(0)):
        assert strings.gather([0], [0], 3, pad="fill", fill=fill)[0].tolist() == [
            [b"ab"], [b"cd"], [b""]], fill


def test_fields_at_other_frame_rates_take_the_same_window(tmp_path):
    spec = {f"c{k}_spec": RNG.standard_normal((40 + 4 * k, 3)).astype(np.float32)
            for k in range(4)}
    labels = {f"c{k}_labels": np.arange(10 + k, dtype=np.int16) + 100 * k for k in range(4)}
    np.savez(tmp_path / "both.npz", **spec, **labels)
    specs = mmnpz.Dataset(tmp_path / "both.npz", select="*_spec")
    labs = mmnpz.Dataset(tmp_path / "both.npz", select="*_labels")
    idx, starts = np.array([3, 0, 2]), np.array([9, 20, 0])
    (s_out, l_out), (s_valid, l_valid) = mmnpz.gather_fields(
        [(specs, idx, 1), (labs, idx, 0.25)], starts, 12, pad="fill", fill=-1, valid=True)
    assert s_out.shape == (3, 12, 3) and l_out.shape == (3, 3) and l_out.dtype == np.int16
    for k, (i, s) in enumerate(zip(idx, starts)):
        assert np.array_equal(s_out[k], spec[f"c{i}_spec"][s:s + 12])
        assert np.array_equal(l_out[k], labels[f"c{i}_labels"][s // 4:s // 4 + 3])
    with pytest.raises(ValueError, match="not a whole number of rows"):
        mmnpz.gather_fields([(specs, idx, 1), (labs, idx, 0.25)], starts, 10)
    # Each field is filled in its own dtype; a bad second field leaves the first untouched.
    (s_out, l_out) = mmnpz.gather_fields([(specs, [0], 1), (labs, [0], 0.25)], [38], 8,
                                         pad="fill", fill=-3)
    assert s_out[0, 2:].tolist() == [[-3.0] * 3] * 6 and l_out[0].tolist() == [9, -3]
    one = mmnpz.Dataset(tmp_path / "both.npz", select="c0_labels")
    untouched = np.full((3, 12, 3), 5, np.float32)
    with pytest.raises(IndexError, match=r"index 3 \(batch entry 0\) is out of range"):
        mmnpz.gather_fields([(specs, idx, 1), (one, idx, 0.25)], starts, 12,
                            outs=[untouched, None], pad="fill", fill=-3)
    assert (untouched == 5).all()
    loader = mmnpz.Loader(specs, mmnpz.Sampler(specs, "sequential", length=8), 2,
                          fields=[(labs, 0.25)], prefetch=1)
    batch = next(iter(loader))
    assert isinstance(batch.data, tuple) and batch.data[1].shape == (2, 2)
    assert np.array_equal(batch.data[1][0], labels["c0_labels"][batch.starts[0] // 4:][:2])
    # A field with fewer items than the data is refused when the Loader is made, not once a
    # batch reaches past its end.
    sampler = mmnpz.Sampler(specs, "sequential", length=8)
    with pytest.raises(ValueError, match=re.escape("Loader: fields[0] has 3 items, the data 4")):
        mmnpz.Loader(specs, sampler, 2, fields=[(labs[:3], 0.25)])
    with pytest.raises(TypeError, match=re.escape("Loader: fields[1] must be a pair "
                                                  "(mmnpz.Dataset, rate), not (str, ...)")):
        mmnpz.Loader(specs, sampler, 2, fields=[(labs, 0.25), ("labels", 0.25)])


def test_samplers_are_deterministic_and_epochs_differ(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    for kind in ["sequential", "shuffle", "replacement", "weighted", "sliding"]:
        # The weighted sampler says that it never draws the items shorter than 4.
        with (pytest.warns(UserWarning,
                           match=f"{short_items(ds, 4)} of 21 items are shorter than length=4")
              if kind == "weighted" else contextlib.nullcontext()):
            windows = kind == "sliding"  # shuffled; refused by the other kinds
            a = mmnpz.Sampler(ds, kind, seed=5, length=4, shuffle_windows=windows)
            b = mmnpz.Sampler(ds.lengths, kind, seed=5, length=4, shuffle_windows=windows)
        for epoch in (0, 3):
            ia, sa = a.sample(epoch)
            ib, sb = b.sample(epoch)
            assert np.array_equal(ia, ib) and np.array_equal(sa, sb), kind
            assert (sa + 4 <= ds.lengths[ia]).all() or kind in ("sequential", "shuffle",
                                                                  "replacement")
        if kind != "sequential":
            assert not np.array_equal(np.stack(a.sample(0)), np.stack(a.sample(1))), kind
    shuffled = mmnpz.Sampler(ds, "shuffle", seed=1)
    for epoch in range(3):
        assert sorted(shuffled.sample(epoch)[0]) == list(range(len(ds)))


def test_weighted_excerpts_are_uniform_over_every_valid_position():
    lengths = np.array([3, 2, 7, 5])
    with pytest.warns(UserWarning, match="1 of 4 items are shorter than length=3 and are "
                                         "never drawn"):
        s = mmnpz.Sampler(lengths, "weighted", length=3, num_samples=90000, seed=2)
    idx, starts = s.sample(0)
    pairs, counts = np.unique(np.stack([idx, starts], 1), axis=0, return_counts=True)
    assert [tuple(p) for p in pairs] == [(0, 0), (2, 0), (2, 1), (2, 2), (2, 3), (2, 4),
                                         (3, 0), (3, 1), (3, 2)]
    assert np.allclose(counts, 10000, rtol=0.05)


def test_ranks_take_disjoint_parts_that_cover_the_epoch():
    lengths = np.full(101, 10)
    parts = [mmnpz.Sampler(lengths, "shuffle", seed=3, rank=r, world_size=3).sample(4)[0]
             for r in range(3)]
    assert all(len(p) == 33 for p in parts)
    together = np.concatenate(parts)
    assert len(np.unique(together)) == 99  # disjoint; the last 101 % 3 left out
    padded = [mmnpz.Sampler(lengths, "shuffle", seed=3, rank=r, world_size=3,
                            drop_remainder=False).sample(4)[0] for r in range(3)]
    assert all(len(p) == 34 for p in padded)
    assert len(np.unique(np.concatenate(padded))) == 101  # covering
    with pytest.raises(ValueError, match="rank 3 is not below world_size 3"):
        mmnpz.Sampler(lengths, rank=3, world_size=3)


def test_excerpts_longer_than_every_member_are_refused(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    longest = max(len(a) for a in arrays.values())
    with pytest.raises(ValueError, match=f"an excerpt of {longest + 1} rows is longer than "
                                         f"every item \\(the longest has {longest}\\)"):
        mmnpz.Sampler(ds, "weighted", length=longest + 1)
    with pytest.raises(ValueError, match="needs an excerpt length"):
        mmnpz.Sampler(ds, "sliding")


def collect(loader, limit=None):
    out = []
    for batch in loader:
        out.append((batch.epoch, batch.position, batch.indices.copy(), batch.starts.copy(),
                    batch.data.copy()))
        if limit is not None and len(out) == limit:
            break
    return out


def test_the_loader_yields_every_batch_in_order_and_resumes_exactly(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    values = list(arrays.values())
    sampler = mmnpz.Sampler(ds, "shuffle", seed=11, length=8)
    full = collect(mmnpz.Loader(ds, sampler, 4, pad="fill", epochs=3, prefetch=3))
    assert len(full) == 3 * (len(ds) // 4)
    assert [(e, p) for e, p, *_ in full] == [(e, 4 * b) for e in range(3) for b in range(5)]
    for _, _, idx, starts, data in full:
        for k in range(4):
            assert np.array_equal(data[k], numpy_excerpt(values[idx[k]], starts[k], 8, "fill"))
    assert np.array_equal(
        full[2][2], mmnpz.Sampler(ds, "shuffle", seed=11, length=8).sample(0, 8, 4)[0])

    # Stop after 7 batches, save, resume in a new loader: the same batches follow.
    first = mmnpz.Loader(ds, sampler, 4, pad="fill", epochs=3)
    head = collect(first, limit=7)
    state = first.state_dict()
    assert state["epoch"] == 1 and state["position"] == 8
    again = mmnpz.Loader(ds, mmnpz.Sampler(ds, "shuffle", seed=11, length=8), 4, pad="fill",
                         epochs=3, prefetch=0)
    again.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert len(again) == len(full) - 7
    tail = collect(again)
    for got, want in zip(head + tail, full):
        assert got[:2] == want[:2]
        assert all(np.array_equal(g, w) for g, w in zip(got[2:], want[2:]))
    assert len(head + tail) == len(full)
    other = mmnpz.Loader(ds, mmnpz.Sampler(ds, seed=12, length=8), 4, pad="fill")
    with pytest.raises(ValueError, match="the saved state has seed=11, this loader 12"):
        other.load_state_dict(state)


def test_an_endless_loader_runs_past_the_first_epoch_and_keeps_drop_last(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, length=1), 8, epochs=None)
    seen = collect(loader, limit=7)
    assert [(e, p) for e, p, *_ in seen] == [(0, 0), (0, 8), (1, 0), (1, 8), (2, 0), (2, 8),
                                             (3, 0)]
    with pytest.raises(TypeError, match="endless"):
        len(loader)
    last = collect(mmnpz.Loader(ds, mmnpz.Sampler(ds, length=1), 8, drop_last=False))
    assert [len(b[2]) for b in last] == [8, 8, 5]


def test_a_failing_batch_raises_in_the_consumer(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    short = min(len(a) for a in arrays.values())
    longest = max(len(a) for a in arrays.values())
    if short == longest:
        pytest.skip("all members have one length")
    # Short items are refused when the loader is made (test_loops has a batch failing later).
    with pytest.raises(ValueError, match="items are shorter than length="):
        mmnpz.Loader(ds, mmnpz.Sampler(ds, length=longest), 4, pad="none")


def test_threads_hammering_one_dataset_all_get_correct_excerpts(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    values = list(arrays.values())
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            idx = rng.integers(0, len(ds), 32)
            starts = np.array([rng.integers(0, len(values[i]) + 1) for i in idx])
            got = ds.gather(idx, starts, 6, pad="fill", threads=int(seed % 3))
            for k in range(32):
                if not np.array_equal(got[k], numpy_excerpt(values[idx[k]], starts[k], 6, "fill")):
                    errors.append((seed, k))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_gather_and_open_release_the_gil(tmp_path):
    big = {f"m{k}": np.ones((4000, 64), np.float32) for k in range(40)}
    np.savez(tmp_path / "big.npz", **big)
    ds = mmnpz.Dataset(tmp_path / "big.npz")
    idx = np.arange(40).repeat(50)
    starts = np.zeros_like(idx)
    assert progress_during(lambda: ds.gather(idx, starts, 3000, threads=1)) > 0
    assert progress_during(lambda: mmnpz.Dataset([tmp_path / "big.npz"] * 200)) > 0


def test_more_archives_than_the_process_may_open_is_an_oserror_saying_what_to_do(tmp_path):
    writer = mmnpz.ShardWriter(tmp_path / "s.npz", max_items=1)
    for i in range(60):
        writer.write(f"x{i}", np.full((3, 2), i, "<f4"))
    writer.close()
    # In a child process, whose limit on open files this lowers below the 60 archives.
    child = textwrap.dedent(f"""
        import json, os, resource, sys
        import mmnpz
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, hard))
        before = len(os.listdir("/proc/self/fd"))
        try:
            mmnpz.Dataset({str(tmp_path / "s@60.npz")!r})
        except OSError as e:
            print(json.dumps([e.errno, e.strerror, e.filename, hard]))
        assert len(os.listdir("/proc/self/fd")) == before  # the archives opened were closed
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1024), hard))
        print(len(mmnpz.Dataset({str(tmp_path / "s@60.npz")!r})))
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    err, strerror, filename, hard = json.loads(out[0])
    assert err == errno.EMFILE
    infinite = hard == resource.RLIM_INFINITY
    top = "resource.RLIM_INFINITY" if infinite else str(hard)
    assert strerror == (
        f"Too many open files: a Dataset keeps each of its archives open, and this process may "
        f"have 40 files open (RLIMIT_NOFILE, `ulimit -n`): raise it with resource.setrlimit("
        f"resource.RLIMIT_NOFILE, ({top}, {top})) or `ulimit -n "
        f"{'unlimited' if infinite else top}`, or join archives with `mmnpz merge`")
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/s-000\d\d-of-00060\.npz", filename)
    assert out[1] == "60"


def test_datasets_pickle_as_their_archive_names_and_reopen(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec, select="s1_*")
    blob = pickle.dumps(ds)
    assert len(blob) < 300
    copy = pickle.loads(blob)
    assert len(copy) == 7 and copy.paths == ds.paths
    assert np.array_equal(copy.gather([2], [0], 1), ds.gather([2], [0], 1))


def test_members_written_by_other_zip_tools_work(tmp_path):
    # Python's zipfile with deflate, members without the .npy suffix, a text member skipped.
    path = tmp_path / "zf.npz"
    arrays = [RNG.standard_normal((20 + k, 2)) for k in range(3)]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k, a in enumerate(arrays):
            with z.open(f"x{k}", "w") as f:
                np.lib.format.write_array(f, a)
        z.writestr("notes.txt", "hello")
    ds = mmnpz.Dataset(path, select="x*")
    assert ds.lengths.tolist() == [20, 21, 22]
    got = ds.gather([2, 0], [5, 1], 10)
    assert np.array_equal(got[0], arrays[2][5:15]) and np.array_equal(got[1], arrays[0][1:11])
    assert len(mmnpz.Dataset(path)) == 0  # without select: only members named *.npy
    with pytest.raises(mmnpz.FormatError, match="notes.txt"):
        mmnpz.Dataset(path, select="*")


def test_the_loader_recycles_only_batches_nobody_holds(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, "replacement", length=4, num_samples=400)
    kept, copies = [], []
    for batch in mmnpz.Loader(ds, sampler, 4, pad="wrap", prefetch=2):
        if batch.position % 8 == 0:
            kept.append(batch.data[1:])  # a view keeps the whole array alive
            copies.append(batch.data[1:].copy())
    assert all(np.array_equal(k, c) for k, c in zip(kept, copies))
    assert len({k.base.ctypes.data for k in kept}) == len(kept)  # never handed out twice
    addresses = {b.data.ctypes.data for b in mmnpz.Loader(ds, sampler, 4, pad="wrap")}
    assert len(addresses) <= 6  # dropped batches' memory came back


def vm_flags(address):
    """The VmFlags of this process's mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def skip_without_huge_pages():
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        pytest.skip("no madvise(MADV_HUGEPAGE)")
    try:
        mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS).madvise(
            mmap.MADV_HUGEPAGE)
    except OSError:
        pytest.skip("this kernel refuses MADV_HUGEPAGE (no transparent huge pages)")


def test_a_loaders_large_batches_are_advised_for_huge_pages(tmp_path):
    huge = 2 << 20
    skip_without_huge_pages()
    # A batch of 3.9 MB: its memory starts on a huge page and both 2 MiB extents are
    # advised (the second one rounded up, by 0.1 MB); zeroed.
    memory, offset = mmnpz.data._batch_memory(256 * 48 * 80 * 4)
    assert isinstance(memory, mmap.mmap) and len(memory) >= offset + 2 * huge
    start = np.frombuffer(memory, np.uint8).ctypes.data + offset
    assert start % huge == 0
    assert "hg" in vm_flags(start) and "hg" in vm_flags(start + 2 * huge - 1)
    assert not np.frombuffer(memory, np.uint8).any()
    # 2 MiB and a byte: rounding up would nearly double it, so only the first extent is.
    memory, offset = mmnpz.data._batch_memory(huge + 1)
    start = np.frombuffer(memory, np.uint8).ctypes.data + offset
    assert "hg" in vm_flags(start) and "hg" not in vm_flags(start + huge)
    # Just below a whole extent: rounded up to it.
    memory, offset = mmnpz.data._batch_memory(huge - 1)
    start = np.frombuffer(memory, np.uint8).ctypes.data + offset
    assert start % huge == 0 and "hg" in vm_flags(start) and "hg" in vm_flags(start + huge - 1)
    # The Loader's batches of 3 MB are made there, and hold what numpy reads.
    arrays = {f"x{k}": np.random.default_rng(k).standard_normal((3000, 64)).astype(np.float32)
              for k in range(4)}
    np.savez(tmp_path / "big.npz", **arrays)
    ds = mmnpz.Dataset(tmp_path / "big.npz")
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, "shuffle", length=3000), 4, pad="wrap")
    batch = next(iter(loader))
    assert batch.data.ctypes.data % huge == 0 and "hg" in vm_flags(batch.data.ctypes.data)
    for k, (i, st) in enumerate(zip(batch.indices, batch.starts)):
        assert np.array_equal(batch.data[k], arrays[f"x{i}"][np.arange(st, st + 3000) % 3000])


def test_compressed_items_are_inflated_on_their_first_gather_not_when_opening(tmp_path):
    from test_zero_copy import grown_kib, memory_kib

    path = tmp_path / "compressed.npz"
    arrays = {f"m{k}": np.full((2500, 1000), k, np.float32) for k in range(20)}  # 10 MB each
    np.savez_compressed(path, **arrays)
    del arrays
    before = memory_kib()
    ds = mmnpz.Dataset(path)
    assert ds.lengths.tolist() == [2500] * 20 and ds.trailing_shape == (1000,)
    assert grown_kib(before)["RssAnon"] < 20_000  # 200 MB of data, none inflated yet
    got = ds.gather([3, 3, 7], [0, 2000, 10], 500)
    assert [np.unique(g).tolist() for g in got] == [[3.0], [3.0], [7.0]]
    # Two members of 10 MB inflated, not twenty. (No lower bound: glibc may serve the two
    # buffers from heap memory that earlier tests freed, which RSS counted already.)
    assert grown_kib(before)["RssAnon"] < 60_000


def test_a_batchs_data_held_alone_is_never_overwritten(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, "replacement", length=4, num_samples=400)
    held, copies = [], []
    for batch in mmnpz.Loader(ds, sampler, 4, pad="wrap", prefetch=2):
        if batch.position % 8 == 0:
            held.append(batch.data)  # the array alone: the Batch itself is dropped
            copies.append(batch.data.copy())
    assert len(held) == 50
    assert all(np.array_equal(h, c) for h, c in zip(held, copies))
    assert len({h.ctypes.data for h in held}) == len(held)


def test_batches_of_64_kib_to_2_mib_are_cut_from_huge_pages_without_overlapping(tmp_path):
    huge, page = 2 << 20, mmap.PAGESIZE
    skip_without_huge_pages()
    # The extents an arena takes: the fewest of which at most an eighth is left over (700 KB:
    # one extent leaves 680 KiB, two 676 KiB, three 672 KiB of 6 MiB).
    for nbytes, chunks, extents in [(1_024_000, 2, 1), (64 << 10, 32, 1), (huge - 1, 1, 1),
                                    (700_000, 8, 3), (1_100_000, 5, 3), (1_500_000, 4, 3),
                                    (1_798_144, 8, 7)]:  # the most extents any size takes
        arena = mmnpz.data._Arena(nbytes)
        chunk = -(-nbytes // page) * page
        assert arena.chunk == chunk and arena.end - arena.next == chunks * chunk, nbytes
        start = np.frombuffer(arena.memory, np.uint8).ctypes.data + arena.next
        assert start % huge == 0 and "hg" in vm_flags(start), nbytes
        assert "hg" in vm_flags(start + extents * huge - 1), nbytes
        assert len(arena.memory) == (extents + 1) * huge, nbytes  # and room to align
        taken = [arena.take() for _ in range(chunks)]
        assert arena.take() is None
        assert [off for _, off in taken] == [arena.end - (chunks - k) * chunk
                                             for k in range(chunks)]
        assert all(memory is arena.memory for memory, _ in taken)
    # A Loader's batches of 500 KiB (128 excerpts of 4,000 bytes) and of 300 KiB (the second
    # field): page-aligned, in huge-page-advised memory, two batches never sharing a byte,
    # every excerpt what numpy reads.
    a = {f"a{k}": np.random.default_rng(k).integers(0, 1 << 30, (900, 500), np.int32)
         for k in range(6)}
    b = {f"b{k}": np.random.default_rng(k + 9).integers(0, 1 << 30, (900, 300), np.int32)
         for k in range(6)}
    np.savez(tmp_path / "a.npz", **a)
    np.savez(tmp_path / "b.npz", **b)
    ds_a, ds_b = mmnpz.Dataset(tmp_path / "a.npz"), mmnpz.Dataset(tmp_path / "b.npz")
    sampler = mmnpz.Sampler(ds_a, "replacement", length=2, num_samples=128 * 12, seed=3)
    kept, spans = [], []
    for batch in mmnpz.Loader(ds_a, sampler, 128, fields=[(ds_b, 1)], prefetch=2):
        for field, items, width in ((0, a, 500), (1, b, 300)):
            data = batch.data[field]
            assert data.shape == (128, 2, width) and data.ctypes.data % page == 0
            assert "hg" in vm_flags(data.ctypes.data)
            for k, (i, st) in enumerate(zip(batch.indices, batch.starts)):
                want = items[f"{'ab'[field]}{i}"][st:st + 2]
                assert np.array_equal(data[k], want), (batch.position, field, k)
            spans.append((data.ctypes.data, data.ctypes.data + data.nbytes))
        kept.append(batch)  # held: every batch needs memory of its own
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert len(spans) == 24
    # Batches dropped as they come give their chunks back: 12 batches in at most 6 chunks.
    del kept, batch
    addresses = [b.data[0].ctypes.data for b in mmnpz.Loader(
        ds_a, sampler, 128, fields=[(ds_b, 1)], prefetch=2)]
    assert len(addresses) == 12 and len(set(addresses)) <= 6


def test_released_batches_are_recycled_without_counting_references(shards, monkeypatch):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, "replacement", length=4, num_samples=400)

    def refuse(*_):
        raise AssertionError("the loader counted references")

    monkeypatch.setattr(sys, "getrefcount", refuse)
    # Without prefetching, the batch being gathered and the one the caller holds are all
    # there is: two buffers take turns, each coming back once its batch is released.
    addresses = [b.data.ctypes.data for b in mmnpz.Loader(ds, sampler, 4, pad="wrap",
                                                          prefetch=0)]
    assert len(addresses) == 100
    assert len(set(addresses)) == 2
    assert addresses[0::2] == [addresses[0]] * 50 and addresses[1::2] == [addresses[1]] * 50
    # A released view or tensor-like holder releases the memory as well.
    loader = iter(mmnpz.Loader(ds, sampler, 4, pad="wrap", prefetch=0))
    first = next(loader)
    view = first.data[1:]
    address = first.data.ctypes.data
    del first
    second = next(loader)
    assert second.data.ctypes.data != address  # the view still holds the first batch's memory
    del view, second
    assert address in {next(loader).data.ctypes.data for _ in range(2)}


def test_options_are_checked_once_with_one_message_each_in_the_users_words(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=2)
    bad_pad = "pad must be one of 'none', 'fill', 'wrap', not 'zero'"
    for call in (lambda: ds.gather([0], [0], 1, pad="zero"),
                 lambda: mmnpz.gather_fields([(ds, [0], 1)], [0], 1, pad="zero"),
                 lambda: mmnpz.Loader(ds, sampler, 2, pad="zero")):
        with pytest.raises(ValueError, match=bad_pad):
            call()
    with pytest.raises(TypeError, match="pad must be a str, not int"):
        ds.gather([0], [0], 1, pad=0)
    with pytest.raises(ValueError, match="kind must be one of 'sequential', 'shuffle', "
                                         "'replacement', 'sliding', 'weighted', not 'random'"):
        mmnpz.Sampler(ds, "random")
    with pytest.raises(ValueError, match="order must be one of 'concatenate', 'interleave', "
                                         "not 'zip'"):
        mmnpz.Dataset(spec, order="zip")
    with pytest.raises(ValueError, match="seed must not be negative, not -1"):
        mmnpz.Sampler(ds, seed=-1)
    with pytest.raises(ValueError, match="length must not be negative, not -1"):
        ds.gather([0], [0], -1)
    with pytest.raises(ValueError, match="threads must not be negative, not -2"):
        ds.gather([0], [0], 1, threads=-2)
    with pytest.raises(ValueError, match="batch_size must be positive, not 0"):
        mmnpz.Loader(ds, sampler, 0)
    with pytest.raises(ValueError, match=r"length must be positive, not 0 \(pass length=, or a "
                                         r"sampler with an excerpt length\)"):
        mmnpz.Loader(ds, mmnpz.Sampler(ds), 2)
    with pytest.raises(ValueError, match="an epoch of 21 samples for rank 0 has no full batch "
                                         "of 22"):
        mmnpz.Loader(ds, sampler, 22)
    with pytest.raises(TypeError, match="sampler must be an mmnpz.Sampler, not tuple"):
        mmnpz.Loader(ds, (), 2)
    assert len(mmnpz.Loader(ds, sampler, 22, pad="fill", drop_last=False)) == 1


def test_a_loader_refuses_a_sampler_made_for_other_items(shards):
    # Made of another dataset, a sampler's draws were an IndexError at some batch, or other
    # items' rows taken silently when the counts agreed.
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=2)
    with pytest.raises(ValueError, match=r"^Loader: the sampler was made for other items \(21 "
                                         r"items, the dataset has 3\); make it of this "
                                         r"dataset: Sampler\(dataset, \.\.\.\)$"):
        mmnpz.Loader(ds[:3], sampler, 2, pad="fill")
    lengths = ds.lengths.copy()
    lengths[4] += 1
    with pytest.raises(ValueError, match=rf"^Loader: the sampler was made for other items "
                                         rf"\(item 4 of {lengths[4]} rows, the dataset's "
                                         rf"'{ds.name(4)}' has {lengths[4] - 1}\)"):
        mmnpz.Loader(ds, mmnpz.Sampler(lengths, length=2), 2, pad="fill")
    assert len(mmnpz.Loader(ds, mmnpz.Sampler(ds.lengths, length=2), 2, pad="fill")) == 10


@pytest.mark.parametrize("rate, error, message", [
    (float("nan"), ValueError, "a field's rate must be a positive finite number, not nan"),
    (float("inf"), ValueError, "a field's rate must be a positive finite number, not inf"),
    (None, TypeError, "a field's rate must be a number or a fraction such as '1/2', not None"),
    ("x", ValueError, "a field's rate must be a number or a fraction such as '1/2', not 'x'"),
    (2**70, ValueError, "a field's rate 1180591620717411303424 is too large (2^64 or more)"),
    (1 / 3, ValueError, "an excerpt of 2 rows at rate 1/3 is not a whole number of rows")])
def test_a_field_rate_is_checked_when_the_loader_is_made_in_words_naming_it(
        shards, rate, error, message):
    # Rates were checked at the first batch, in Fraction's words ("cannot convert NaN to
    # integer ratio") or pybind11's ("incompatible function arguments").
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    with pytest.raises(error, match=f"^Loader: {re.escape(message)}$"):
        mmnpz.Loader(ds, mmnpz.Sampler(ds, length=2), 2, pad="fill", fields=[(ds, rate)])
    with pytest.raises(error, match=f"^gather_fields: {re.escape(message)}$"):
        mmnpz.gather_fields([(ds, [0], 1), (ds, [0], rate)], [0], 2, pad="fill")


def test_a_samplers_options_are_one_typed_object(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    with pytest.warns(UserWarning,
                      match=f"{short_items(ds, 3)} of 21 items are shorter than length=3"):
        s = mmnpz.Sampler(ds, "weighted", length=3, seed=9, rank=1, world_size=2)
    o = s.options
    assert (o.kind, o.seed, o.length, o.rank, o.world_size) == ("weighted", 9, 3, 1, 2)
    # As the sampler uses them (hop is the sliding windows' only).
    assert repr(o) == ("SamplerOptions(kind='weighted', seed=9, length=3, hop=0, "
                       "shuffle_windows=False, random_crop=True, num_samples=0, rank=1, "
                       "world_size=2, drop_remainder=True, pad_short_items=False)")
    o.seed = 10  # a copy: the sampler keeps its own
    assert s.options.seed == 9
    with pytest.raises(TypeError, match="unexpected keyword argument 'sed'"):
        type(o)(sed=1)


def test_items_layouts_and_readers_share_one_dtype_per_descr(tmp_path):
    record = np.dtype([("t", "<f8"), ("label", "<i4", (2,))])
    path = tmp_path / "records.npz"
    np.savez(path, a=np.zeros(5, record), b=np.ones(3, record))
    ds = mmnpz.Dataset(path)
    reader = mmnpz.load(path)
    assert ds.dtype == record
    assert ds.dtype is ds[0].dtype is reader["b"].dtype is reader.load("a").dtype
    assert reader.info("a").dtype is mmnpz.load(path)["a"].dtype
    assert type(reader.load("a")) is np.memmap and reader.load("a").base is reader.mmap


def test_a_dataset_made_from_a_dataset_keeps_its_items_and_takes_the_options_given(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    view = ds[[5, 1, 3]]
    same = mmnpz.Dataset(view)
    assert list(same.names) == list(view.names) and same._options.io == "auto"
    reading = mmnpz.Dataset(view, io="read", threads=1)
    assert list(reading.names) == list(view.names) and reading._options.io == "read"
    assert np.array_equal(reading.gather([0, 2], [0, 1], 2), view.gather([0, 2], [0, 1], 2))
    assert mmnpz.Dataset(reading)._options.io == "read"  # the source's own, by default
    with pytest.raises(ValueError, match="Dataset: io must be one of"):
        mmnpz.Dataset(view, io="bogus")
    for options in (dict(select="*"), dict(order="interleave")):
        with pytest.raises(ValueError, match=re.escape(
                "Dataset: select and order choose items from archives; a Dataset given as the "
                "source keeps its items (give its paths to choose others)")):
            mmnpz.Dataset(view, **options)
