"""NpzReader (mmnpz.load): the pure-Python mmnpz package's behaviours, compared with np.load."""

import gc

import numpy as np
import pytest

import mmnpz


@pytest.fixture
def npz(tmp_path, sample_arrays):
    path = tmp_path / "sample.npz"
    np.savez(path, **sample_arrays)
    return path


def test_load_of_an_archive_is_a_reader(npz):
    assert type(mmnpz.load(npz)) is mmnpz.NpzReader


@pytest.mark.parametrize("mode", ["r", "c", None])
def test_every_item_equals_what_np_load_returns_in_every_mode(npz, assert_same, mode):
    # mmap_mode=None copies each array through the core, which once took a buffer: numpy
    # exports none for datetime64 and timedelta64 arrays, and those raised ValueError.
    with np.load(npz) as expected:
        reader = mmnpz.load(npz, mode)
        assert reader.files == expected.files
        for key in expected.files:
            assert_same(reader[key], expected[key], key)


def test_accepts_str_and_pathlike(npz):
    assert mmnpz.load(str(npz)).files == mmnpz.load(npz).files


def test_a_path_of_another_type_raises_type_error():
    with pytest.raises(TypeError):
        mmnpz.load(42)


def test_cache_keeps_loaded_items_in_arrays_and_returns_the_same_object(npz):
    reader = mmnpz.load(npz)
    assert reader.arrays == {}
    first = reader["f8_le"]
    assert list(reader.arrays) == ["f8_le"]
    assert reader.arrays["f8_le"] is first
    assert reader["f8_le"] is first
    assert reader["f8_le.npy"] is first


def test_without_cache_arrays_stays_empty_and_each_access_is_a_new_view(npz):
    reader = mmnpz.load(npz, cache=False)
    first, second = reader["f8_le"], reader["f8_le"]
    assert first is not second
    assert first.__array_interface__["data"][0] == second.__array_interface__["data"][0]
    assert np.array_equal(first, second, equal_nan=True)
    assert reader.arrays == {}


def test_preload_fills_arrays_with_every_item(npz, assert_same):
    reader = mmnpz.load(npz, preload=True)
    assert list(reader.arrays) == reader.files
    with np.load(npz) as expected:
        for key in reader.files:
            assert reader[key] is reader.arrays[key]
            assert_same(reader.arrays[key], expected[key], key)


def test_load_method_returns_an_uncached_item(npz):
    reader = mmnpz.load(npz)
    item = reader.load("i1")
    assert reader.arrays == {}
    assert item is not reader.load("i1")
    assert np.array_equal(item, np.load(npz)["i1"])


def test_stored_items_are_read_only_memmaps_based_on_the_file_mapping(npz):
    reader = mmnpz.load(npz)
    item = reader["fortran_2d"]
    assert type(item) is np.memmap
    assert item.base is reader.mmap
    assert not item.flags.writeable
    assert np.shares_memory(item, reader.mmap)
    item.flush()  # a no-op on a read-only view, not an error


def test_mmap_is_a_read_only_uint8_memmap_of_the_whole_file(npz):
    reader = mmnpz.load(npz)
    assert type(reader.mmap) is np.memmap
    assert reader.mmap.dtype == np.uint8
    assert reader.mmap.shape == (npz.stat().st_size,)
    assert reader.mmap.tobytes() == npz.read_bytes()
    assert not reader.mmap.flags.writeable
    assert reader.mmap.filename == str(npz.resolve())


def test_writing_into_an_item_raises_value_error_instead_of_crashing(npz):
    reader = mmnpz.load(npz)
    item = reader["f8_le"]
    with pytest.raises(ValueError):
        item[0] = 1.0
    with pytest.raises(ValueError):
        np.asarray(item)[...] = 0
    with pytest.raises(ValueError):
        item.setflags(write=True)
    with pytest.raises(ValueError):
        reader.mmap[0] = 0
    assert np.array_equal(reader["f8_le"], np.load(npz)["f8_le"], equal_nan=True)


@pytest.mark.parametrize("mode", ["w+", "w", "readonly"])
def test_an_unsupported_mmap_mode_raises_value_error(npz, mode):
    with pytest.raises(ValueError):
        mmnpz.load(npz, mode)
    with pytest.raises(ValueError):
        mmnpz.NpzReader(npz, mmap_mode=mode)


def test_items_stay_valid_after_close(npz):
    expected = np.load(npz)["c16_be"]
    reader = mmnpz.load(npz)
    item, whole = reader["c16_be"], reader.mmap
    reader.close()
    assert np.array_equal(item, expected, equal_nan=True)
    assert whole.tobytes() == npz.read_bytes()


def test_items_stay_valid_after_the_reader_is_garbage_collected(mixed_npz):
    with np.load(mixed_npz) as npz:
        expected = {key: npz[key] for key in ("a", "packed")}
    reader = mmnpz.load(mixed_npz)
    stored, deflated = reader["a"], reader["packed"]
    del reader
    gc.collect()
    assert np.array_equal(stored, expected["a"])
    assert np.array_equal(deflated, expected["packed"])
    assert stored.sum() == expected["a"].sum()


def test_a_closed_reader_raises_value_error(npz):
    reader = mmnpz.load(npz)
    reader["i1"]
    reader.close()
    for use in (lambda: reader["i1"], lambda: reader["u1"], lambda: reader.get("u1"),
                lambda: reader.load("u1"), lambda: reader.info("u1"), lambda: reader.verify(),
                lambda: "u1" in reader, lambda: reader.f.u1):
        with pytest.raises(ValueError):
            use()
    reader.close()  # closing twice is harmless


def test_the_context_manager_closes_the_reader(npz):
    with mmnpz.load(npz) as reader:
        assert isinstance(reader, mmnpz.NpzReader)
        item = reader["u1"]
    with pytest.raises(ValueError):
        reader["u1"]
    assert np.array_equal(item, np.arange(256, dtype="u1"))


def test_repr_names_the_file_and_state(npz):
    reader = mmnpz.load(npz)
    assert str(npz) in repr(reader) and "members" in repr(reader)
    reader.close()
    assert "closed" in repr(reader)
