"""mmnpz.load behaves as numpy's NpzFile (np.load of an .npz) for every member kind."""

import io
import struct
import warnings
import zipfile

import numpy as np
import pytest

import mmnpz


def _npy(array):
    bio = io.BytesIO()
    np.lib.format.write_array(bio, array)
    return bio.getvalue()


@pytest.fixture
def pair(mixed_npz):
    """(mmnpz reader, numpy NpzFile) of the same mixed archive."""
    with np.load(mixed_npz) as expected:
        yield mmnpz.load(mixed_npz), expected


def test_files_lists_every_member_as_numpy_does_including_compressed_and_non_npy(pair):
    reader, expected = pair
    assert reader.files == expected.files
    assert {"packed", "packed_f", "readme.txt", "meta.json", "objects"} <= set(reader.files)


def test_keys_work_with_and_without_npy(pair, assert_same):
    reader, expected = pair
    for key in ("a", "a.npy", "dir/sub", "dir/sub.npy", "packed", "packed.npy", "readme.txt"):
        assert key in reader
        assert_same(reader[key], expected[key], key)
    assert reader["a"] is reader["a.npy"]


def test_missing_keys_are_not_in_the_reader_and_raise_key_error(pair):
    reader, expected = pair
    for key in ("nope", "readme", "a.np", "A", "", "objects.npy.npy"):
        assert key not in reader and key not in expected
        with pytest.raises(KeyError):
            reader[key]
    assert 3 not in reader


def test_attribute_access_through_f(pair, assert_same):
    reader, expected = pair
    assert_same(reader.f.a, expected.f.a)
    assert_same(reader.f.packed, expected.f.packed)
    assert sorted(dir(reader.f)) == sorted(dir(expected.f))
    with pytest.raises(AttributeError):
        reader.f.nope


def test_len_iteration_and_mapping_methods_match_numpy(pair, assert_same):
    reader, expected = pair
    readable = [k for k in expected.files if k != "objects"]
    assert len(reader) == len(expected)
    assert list(reader) == list(expected)
    assert list(reader.keys()) == list(expected.keys())
    for key in readable:
        assert_same(reader.get(key), expected.get(key), key)
    assert reader.get("nope") is None
    assert reader.get("nope", 7) == 7
    allowed = mmnpz.load(reader.path, allow_pickle=True)
    with np.load(reader.path, allow_pickle=True) as everything:
        got_items, want_items = list(allowed.items()), list(everything.items())
        assert [k for k, _ in got_items] == [k for k, _ in want_items]
        for (key, got), (_, want) in zip(got_items, want_items):
            assert_same(got, want, key)
        for got, want in zip(allowed.values(), everything.values()):
            assert_same(got, want)


def test_deflated_members_are_ordinary_writable_arrays_equal_to_numpys(pair, assert_same):
    reader, expected = pair
    for key in ("packed", "packed_f"):
        item = reader[key]
        assert type(item) is np.ndarray
        assert item.flags.writeable == expected[key].flags.writeable
        assert not np.shares_memory(item, reader.mmap)
        assert_same(item, expected[key], key)
        assert reader[key] is item  # inflated once, then cached


def test_non_npy_members_come_back_as_bytes(pair):
    reader, expected = pair
    for key in ("readme.txt", "meta.json"):
        assert type(reader[key]) is bytes
        assert reader[key] == expected[key]


def test_object_arrays_raise_value_error_unless_allow_pickle(pair, assert_same):
    reader, expected = pair
    with pytest.raises(ValueError):
        expected["objects"]
    with pytest.raises(ValueError):
        reader["objects"]
    assert "objects" not in reader.arrays
    with np.load(reader.path, allow_pickle=True) as pickled:
        got = mmnpz.load(reader.path, allow_pickle=True)["objects"]
        assert_same(got, pickled["objects"])
        assert got.tolist() == [1, "two", None]


def test_duplicate_names_resolve_to_the_last_member_as_numpy(tmp_path, assert_same):
    path = tmp_path / "dup.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("x.npy", _npy(np.arange(3)))
            zf.writestr("x.npy", _npy(np.ones((2, 2), ">f4")))
    reader = mmnpz.load(path)
    with np.load(path) as expected:
        assert reader.files == expected.files == ["x", "x"]
        assert_same(reader["x"], expected["x"])
        assert_same(reader["x.npy"], expected["x.npy"])


@pytest.mark.parametrize("second", ["numpy", "mmnpz"])
def test_archives_joined_end_to_end_read_as_the_last_one_as_numpy_reads_them(
        tmp_path, assert_same, second):
    first, last = tmp_path / "first.npz", tmp_path / "last.npz"
    np.savez(first, x=np.arange(3), y=np.ones(2))
    save = np.savez if second == "numpy" else mmnpz.savez
    save(last, z=np.arange(6.0).reshape(2, 3), x=np.array([7, 8], ">i2"))
    path = tmp_path / "joined.npz"
    path.write_bytes(first.read_bytes() + last.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no interrupted append is reported
        reader = mmnpz.load(path)
    with np.load(path) as expected, zipfile.ZipFile(path) as zf:
        assert reader.files == expected.files == ["z", "x"]
        assert zf.testzip() is None
        for name in expected.files:
            assert_same(np.asarray(reader[name]), expected[name])


@pytest.mark.parametrize("mode", [None, "c", "r"])
@pytest.mark.parametrize("source", ["path", "file object", "bytes", "BytesIO"])
def test_every_member_of_every_kind_matches_numpy_in_every_mode_from_every_source(
        mixed_npz, assert_same, mode, source):
    opened = None
    if source == "path":
        given = mixed_npz
    elif source == "file object":
        given = opened = open(mixed_npz, "rb")
    elif source == "bytes":
        given = mixed_npz.read_bytes()
    else:
        given = io.BytesIO(mixed_npz.read_bytes())
    try:
        reader = mmnpz.load(given, mode, allow_pickle=True)
        with np.load(mixed_npz, allow_pickle=True) as expected:
            assert reader.files == expected.files
            for key in expected.files:
                got, want = reader[key], expected[key]
                assert_same(got, want, key)
                if isinstance(want, np.ndarray) and not want.dtype.hasobject:
                    compressed = reader.info(key).compressed
                    # numpy's arrays are writable; mmnpz's are unless mapped read-only
                    assert got.flags.writeable == (mode != "r" or compressed), key
                    if mode is None:
                        assert type(got) is np.ndarray, key
                    elif not compressed:
                        assert isinstance(got, np.memmap), key
    finally:
        if opened:
            opened.close()


def test_a_descr_without_byte_order_reads_as_numpy_reads_it(tmp_path):
    """Some writers other than numpy's omit the byte order ("f8"); np.dtype() takes it as
    native, and so does the reader."""
    def npy(descr, data):
        header = "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }" % descr
        header += " " * (-(10 + len(header) + 1) % 64) + "\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data

    path = tmp_path / "no_order.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, descr, array in [("f", "f8", np.array([1.5, -2.0])),
                                   ("i", "i4", np.array([7, -9], np.int32)),
                                   ("u", "u1", np.array([3, 250], np.uint8)),
                                   ("b", "b1", np.array([True, False])),
                                   ("s", "U2", np.array(["ab", "c"]))]:
            z.writestr(name + ".npy", npy(descr, array.tobytes()))
    want, got = np.load(path), mmnpz.load(path)
    for name in want.files:
        assert got[name].dtype == want[name].dtype
        assert got[name].tolist() == want[name].tolist()


@pytest.mark.parametrize("mode", ["r", "c", None])
def test_zero_itemsize_arrays_keep_their_dtype_as_in_numpy(tmp_path, mode):
    arrays = {"s": np.ndarray((2, 3), "S0"), "u": np.ndarray((4,), "<U0")}
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, **arrays)
        want, got = np.load(path), mmnpz.load(path, mmap_mode=mode)
        for name in arrays:
            assert (got[name].dtype, got[name].shape) == (want[name].dtype, want[name].shape)


def test_empty_records_and_sub_arrays_of_sub_arrays_round_trip_as_numpy_saves_them(tmp_path):
    """numpy saves dtype([]) as the descr [] and keeps a field's two sub-array shapes apart,
    ('a', ('<f4', (2,)), (3,)); mmnpz reads what np.savez wrote and writes what np.load reads,
    both with numpy's dtype."""
    nested = np.dtype([("a", (np.dtype(("<f4", (2,))), (3,))), ("b", "<i2")])
    arrays = {"empty": np.zeros(3, np.dtype([])),
              "nested": np.zeros(4, nested),
              "empty_field": np.zeros(2, np.dtype([("a", [], (2,)), ("b", "u1")]))}
    arrays["nested"]["a"] = np.arange(24).reshape(4, 3, 2)
    arrays["nested"]["b"] = [5, 6, 7, 8]
    arrays["empty_field"]["b"] = [9, 10]
    by_numpy, by_mmnpz = tmp_path / "numpy.npz", tmp_path / "mmnpz.npz"
    np.savez(by_numpy, **arrays)
    mmnpz.savez(by_mmnpz, **arrays)
    for path in (by_numpy, by_mmnpz):
        with np.load(path) as want:
            got = mmnpz.load(path)
            for name, array in arrays.items():
                for loaded in (want[name], got[name]):
                    assert loaded.dtype == array.dtype and loaded.shape == array.shape, name
                    assert loaded.dtype.descr == array.dtype.descr, name
                    if array.dtype.names:
                        for field in array.dtype.names:
                            assert np.array_equal(loaded[field], array[field]), (name, field)
    assert got["nested"]["a"].shape == (4, 3, 2)
    with zipfile.ZipFile(by_mmnpz) as z:
        assert z.testzip() is None
