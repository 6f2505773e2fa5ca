"""Stored members are views of the file mapping: nothing is copied, nothing is read early."""

import gc

import numpy as np
import pytest

import mmnpz

MEMBERS, MEMBER_BYTES = 4000, 16 << 10


def memory_kib():
    """{'VmRSS', 'RssAnon', 'RssFile'} of this process in KiB, from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0])
    if len(out) != 3:
        pytest.skip("/proc/self/status does not report VmRSS, RssAnon and RssFile")
    return out


def grown_kib(before):
    after = memory_kib()
    return {key: after[key] - before[key] for key in before}


def write_members(path, count, nbytes):
    chunk = np.arange(nbytes // 8, dtype="<f8")
    with mmnpz.NpzWriter(path) as writer:
        for i in range(count):
            writer.write(f"m{i:05d}", chunk)
    return chunk


def test_stored_items_share_memory_with_the_mapping_at_their_data_offset(tmp_path, sample_arrays):
    path = tmp_path / "z.npz"
    np.savez(path, **sample_arrays)
    reader = mmnpz.load(path)
    base = reader.mmap.__array_interface__["data"][0]
    for key in reader.files:
        item, info = reader[key], reader.info(key)
        assert not info.compressed
        assert item.__array_interface__["data"][0] == base + info.offset, key
        if item.nbytes:
            assert np.shares_memory(item, reader.mmap), key
            assert reader.mmap[info.offset:info.offset + item.nbytes].tobytes() == item.tobytes(
                order="A"), key


def test_views_of_thousands_of_members_do_not_copy_their_data(scratch_path):
    # VmRSS also counts pages of the file that the kernel maps around each header it faults
    # in ("fault-around", 64 KiB by default): for members of 16 KiB that is about all of
    # them, shared page cache and not a copy. Copies land in anonymous memory (RssAnon).
    path = scratch_path / "many.npz"
    chunk = write_members(path, MEMBERS, MEMBER_BYTES)
    data_kib = MEMBERS * MEMBER_BYTES >> 10
    gc.collect()
    before = memory_kib()
    reader = mmnpz.load(path)
    items = [reader[key] for key in reader.files]
    grown = grown_kib(before)
    assert len(items) == MEMBERS
    assert grown["RssAnon"] < data_kib // 4, grown
    assert all(np.shares_memory(item, reader.mmap) for item in items)
    # the measure does see a copy of the data
    copied = np.concatenate(items)
    assert grown_kib(before)["RssAnon"] > data_kib * 3 // 4
    assert np.array_equal(copied[-chunk.size:], chunk)


def test_views_of_large_members_do_not_make_their_data_resident(scratch_path):
    path = scratch_path / "large.npz"
    count, nbytes = 64, 1 << 20
    write_members(path, count, nbytes)
    data_kib = count * nbytes >> 10
    gc.collect()
    before = memory_kib()
    reader = mmnpz.load(path)
    items = [reader[key] for key in reader.files]
    assert grown_kib(before)["VmRSS"] < data_kib // 4
    total = sum(float(item.sum()) for item in items)  # touching the data does
    assert grown_kib(before)["VmRSS"] > data_kib * 3 // 4
    assert total == count * float(np.arange(nbytes // 8).sum())
