"""Pickling a reader stores its path and options, not its data; the receiver re-maps the file."""

import multiprocessing
import pickle

import numpy as np
import pytest

import mmnpz


def sum_member(reader, key):
    """Runs in a spawned worker: the reader arrives pickled and maps the file again."""
    item = reader[key]
    return key, type(item).__name__, float(np.asarray(item, dtype="f8").sum())


def test_the_pickle_of_a_reader_of_a_big_archive_is_under_1_kib(big_archive, fixtures_dir):
    for path in (big_archive, f"{fixtures_dir}/good/many_members_70000.npz"):
        reader = mmnpz.load(path)
        for key in reader.files[:3]:
            reader[key]  # cached items are not pickled either
        assert len(pickle.dumps(reader)) < 1024
        assert len(pickle.dumps(reader, protocol=0)) < 1024


def test_an_unpickled_reader_has_the_same_items_and_options(tmp_path, assert_same):
    path = tmp_path / "p.npz"
    np.savez(path, a=np.arange(5), o=np.array([None, 1], dtype=object))
    reader = mmnpz.load(path, cache=False, allow_pickle=True)
    copy = pickle.loads(pickle.dumps(reader))
    assert type(copy) is mmnpz.NpzReader and copy is not reader
    assert copy.path == reader.path and copy.files == reader.files
    assert copy.allow_pickle and copy["o"].tolist() == [None, 1]
    assert copy["a"] is not copy["a"]  # cache=False survived
    assert_same(copy["a"], reader["a"])
    assert copy.mmap is not reader.mmap
    strict = pickle.loads(pickle.dumps(mmnpz.load(path, preload=False)))
    assert not strict.allow_pickle and strict.arrays == {}


def test_spawned_workers_sum_members_of_a_pickled_reader(tmp_path):
    path = tmp_path / "spawn.npz"
    arrays = {"a": np.arange(1000, dtype="<i8"), "b": np.linspace(0, 1, 501, dtype=">f8"),
              "c": np.asfortranarray(np.ones((30, 20), dtype="<f4"))}
    np.savez(path, **arrays)
    reader = mmnpz.load(path)
    reader["a"]  # a reader already in use pickles as well
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(sum_member, [(reader, key) for key in arrays], chunksize=1)
    assert results == [(key, "memmap", float(a.astype("f8").sum())) for key, a in arrays.items()]


def sample_in_worker(sampler):
    """Runs in a spawned worker: the sampler arrives pickled."""
    return [sampler.sample(epoch) for epoch in (0, 7)], len(sampler)


def test_a_sampler_pickles_as_its_lengths_and_options_and_samples_the_same(tmp_path):
    """A Sampler could not be pickled ("cannot pickle 'mmnpz._mmnpz.Sampler' object"), so none
    reached a spawned process or a deepcopy."""
    import copy
    import warnings

    path = tmp_path / "s.npz"
    rng = np.random.default_rng(4)
    np.savez(path, **{f"c{k}": np.zeros((int(rng.integers(1, 40)), 2)) for k in range(30)})
    ds = mmnpz.Dataset(path)
    samplers = [mmnpz.Sampler(ds, length=4, seed=2, pad="fill"),
                mmnpz.Sampler(ds, "sliding", length=3, hop=2, shuffle_windows=True, rank=1,
                              world_size=2, drop_remainder=False),
                mmnpz.Sampler(ds.lengths, "replacement", length=5, num_samples=77,
                              random_crop=False)]
    with pytest.warns(UserWarning, match="are never drawn"):
        samplers.append(mmnpz.Sampler(ds, "weighted", length=30, seed=9))
    for sampler in samplers:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # made again without warning again
            copies = [pickle.loads(pickle.dumps(sampler)), copy.deepcopy(sampler)]
        for other in copies:
            assert repr(other.options) == repr(sampler.options)
            assert (other.kind, other.seed, other.length, other.rank, other.world_size,
                    other.pad) == (sampler.kind, sampler.seed, sampler.length, sampler.rank,
                                   sampler.world_size, sampler.pad)
            assert len(other) == len(sampler) and other.epoch_size == sampler.epoch_size
            for epoch in (0, 7):
                for got, want in zip(other.sample(epoch), sampler.sample(epoch)):
                    assert np.array_equal(got, want)
        assert len(pickle.dumps(sampler)) < 1024  # no archive in it
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        (got, size), = pool.map(sample_in_worker, [samplers[1]])
    assert size == len(samplers[1])
    for g, epoch in zip(got, (0, 7)):
        for a, b in zip(g, samplers[1].sample(epoch)):
            assert np.array_equal(a, b)


def test_a_loader_says_that_it_does_not_pickle_and_what_does(tmp_path):
    np.savez(tmp_path / "l.npz", a=np.zeros((8, 2)))
    ds = mmnpz.Dataset(tmp_path / "l.npz")
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, length=2), 1)
    with pytest.raises(TypeError, match=r"^a Loader cannot be pickled: pickle its dataset and "
                                        r"sampler, and make a Loader of them where they arrive$"):
        pickle.dumps(loader)


def test_a_dataset_unpickled_after_its_archive_was_replaced_is_refused_not_other_items(tmp_path):
    # A spawned worker opened the paths again: another archive renamed over one gave it other
    # items (its values, or an error about lengths) than the dataset in the parent had.
    import os
    path = tmp_path / "a.npz"
    mmnpz.savez(path, x=np.arange(8.0).reshape(4, 2), y=np.zeros((3, 2)))
    ds = mmnpz.Dataset(path, select="[xy]")
    kept = pickle.dumps(ds[1:])
    mmnpz.savez(tmp_path / "b.npz", x=np.full((4, 2), 100.0), y=np.ones((3, 2)))
    os.replace(tmp_path / "b.npz", path)
    with pytest.raises(ValueError, match=f"^{path}: another file was renamed over it since the "
                                         "pickled dataset opened it: its items here would not "
                                         "be the ones that dataset had$"):
        pickle.loads(kept)
    # Appended to in place: the same items are taken, other items refused.
    ds = mmnpz.Dataset(path, select="[xy]")
    kept = pickle.dumps(ds)
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("z", np.zeros((5, 2)))  # not selected
    assert pickle.loads(kept).lengths.tolist() == [4, 3]
    kept = pickle.dumps(mmnpz.Dataset(path, select="[xyz]"))
    with mmnpz.NpzWriter(path, "a", allow_duplicate_names=True) as w:
        w.write("z", np.zeros((6, 2)))  # selected: the item z now has 6 rows
    with pytest.raises(ValueError, match=f"^{path}: it changed \\(\\d+ bytes, now \\d+\\) and "
                                         "its items with it since the pickled dataset"):
        pickle.loads(kept)
