"""Pickling a reader stores its path and options, not its data; the receiver re-maps the file."""

import multiprocessing
import pickle

import numpy as np

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
