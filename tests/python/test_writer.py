"""NpzWriter and mmnpz.savez: what they write reads back identically with np.load, zipfile and
mmnpz, with every array's data aligned in the file."""

import os
import re
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

import mmnpz


def data_offsets(path):
    """{member name: file offset of its array data}, found from the raw bytes with zipfile's
    directory and the local and .npy headers (not from mmnpz)."""
    raw = path.read_bytes()
    offsets = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            pos = info.header_offset
            assert raw[pos:pos + 4] == b"PK\x03\x04"
            name_len, extra_len = struct.unpack_from("<HH", raw, pos + 26)
            npy = pos + 30 + name_len + extra_len
            assert raw[npy:npy + 6] == b"\x93NUMPY"
            if raw[npy + 6] == 1:
                (header_len,) = struct.unpack_from("<H", raw, npy + 8)
                offsets[info.filename] = npy + 10 + header_len
            else:
                (header_len,) = struct.unpack_from("<I", raw, npy + 8)
                offsets[info.filename] = npy + 12 + header_len
    return offsets


def test_everything_written_reads_back_as_np_savez_of_the_same_arrays(tmp_path, sample_arrays,
                                                                      assert_same):
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    with mmnpz.NpzWriter(ours) as writer:
        for name, array in sample_arrays.items():
            writer.write(name, array)
    np.savez(theirs, **sample_arrays)
    with np.load(ours) as got, np.load(theirs) as want:
        assert got.files == want.files == list(sample_arrays)
        for name in want.files:
            assert_same(got[name], want[name], name)
    reader = mmnpz.load(ours)
    with np.load(theirs) as want:
        for name in want.files:
            assert_same(reader[name], want[name], name)
    assert reader.verify() == {}


def test_zipfile_finds_no_error_in_a_written_archive(tmp_path, sample_arrays):
    path = tmp_path / "w.npz"
    with mmnpz.NpzWriter(path) as writer:
        for name, array in sample_arrays.items():
            writer.write(name, array)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        assert [i.compress_type for i in zf.infolist()] == [zipfile.ZIP_STORED] * len(sample_arrays)


@pytest.mark.parametrize("value", [
    [1, 2, 3], [[1.5, 2.5], [3.5, 4.5]], 7, 2.5, True, 1 + 2j, "text", [],
    np.float32(1.25), np.int16(-3),
], ids=repr)
def test_lists_and_scalars_are_written_as_np_savez_writes_them(tmp_path, value, assert_same):
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    with mmnpz.NpzWriter(ours) as writer:
        writer.write("v", value)
    np.savez(theirs, v=value)
    assert_same(np.load(ours)["v"], np.load(theirs)["v"])


@pytest.mark.parametrize("align", [64, 4096])
def test_every_arrays_data_is_aligned(tmp_path, sample_arrays, align):
    path = tmp_path / "aligned.npz"
    with mmnpz.NpzWriter(path, align=align) as writer:
        for name, array in sample_arrays.items():
            writer.write(name, array)
        with writer.begin("streamed", "<f4", (5, 7)) as stream:
            stream.write(np.ones((5, 7), "<f4"))
    offsets = data_offsets(path)
    reader = mmnpz.load(path)
    assert len(offsets) == len(reader) == len(sample_arrays) + 1
    for key in reader.files:
        info = reader.info(key)
        assert info.offset == offsets[key + ".npy"], key
        assert info.offset % align == 0, key
        assert info.alignment >= align, key
        assert info.offset % info.alignment == 0, key
        assert reader[key].__array_interface__["data"][0] % align == 0, key


@pytest.mark.parametrize("writer", ["NpzWriter", "ShardWriter"])
def test_an_alignment_out_of_range_or_not_an_integer_is_refused_by_name(tmp_path, writer):
    path = str(tmp_path / "a.npz")
    make = getattr(mmnpz, writer)
    for bad in (3, 0, -64, 2**17, 2**70):  # 3, 0, 2**17 refused in C++; the others in Python
        with pytest.raises(ValueError, match=f"^{re.escape(path)}: alignment {bad} is not a "
                                             f"power of two from 1 to 65536$"):
            make(path, align=bad)
    with pytest.raises(TypeError, match="^align must be an integer, not float$"):
        make(path, align=64.0)
    assert not os.listdir(tmp_path)


def test_a_large_strided_view_is_written_correctly_without_a_full_copy(scratch_path):
    base = np.arange(6000 * 6000, dtype=np.int64).reshape(6000, 6000)
    view = base[::2, ::3]  # 48 MB, neither C- nor Fortran-contiguous
    path = scratch_path / "strided.npz"
    with mmnpz.NpzWriter(path) as writer:
        tracemalloc.start()
        try:
            writer.write("v", view)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < view.nbytes // 2  # numpy reports its allocations to tracemalloc
    got = np.load(path)["v"]
    assert got.flags.c_contiguous and got.shape == (3000, 2000)
    assert np.array_equal(got, view)
    assert got[1234, 1567] == 2468 * 6000 + 1567 * 3


def test_object_arrays_are_refused_before_a_byte_is_written(tmp_path):
    path = tmp_path / "o.npz"
    # The core writer's words, as for its other refusals: the file and the member.
    said = f"^{re.escape(str(path))}: member 'o.npy': object arrays cannot be written " \
           r"\(they need pickle\)$"
    with mmnpz.NpzWriter(path) as writer:
        writer.write("a", np.arange(3))
        size = path.stat().st_size
        for refused in (np.array([1, None], dtype=object), [1, "a", None],
                        np.zeros(2, dtype=[("x", "<i4"), ("o", "O")])):
            with pytest.raises(ValueError, match=said):
                writer.write("o", refused)
            assert path.stat().st_size == size
        with pytest.raises(ValueError, match=said):
            writer.begin("o", object, (2,))
        assert path.stat().st_size == size
        for shape, kind in (((2.5,), "float"), (("3",), "str")):  # int() truncated or parsed
            with pytest.raises(TypeError, match=f"^member 'f': each entry of shape must be an "
                                                f"integer, not {kind}$"):
                writer.begin("f", "<f4", shape)
        with pytest.raises(ValueError, match=r"^member 'f': negative dimensions are not "
                                             r"allowed \(shape \(2, -1\)\)$"):
            writer.begin("f", "<f4", (2, -1))
        with pytest.raises(ValueError, match=r"^member 'f': shape \(1180591620717411303424,\) "
                                             r"has an entry too large for a 64-bit integer$"):
            writer.begin("f", "<f4", (2**70,))
        assert path.stat().st_size == size
        with writer.begin("n", "<i2", np.int64(3)) as stream:  # a size alone, as numpy takes it
            stream.write(np.arange(3, dtype="<i2"))
        writer.write("b", np.arange(4))
    with np.load(path) as npz:
        assert npz.files == ["a", "n", "b"]
        assert np.array_equal(npz["n"], np.arange(3, dtype="<i2"))


def test_a_deflating_writer_refuses_object_arrays_in_the_same_words(tmp_path):
    path = tmp_path / "z.npz"
    with mmnpz.NpzWriter(path, compresslevel=6) as writer:
        writer.write("a", np.arange(3))
        size = path.stat().st_size
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: member 'o.npy': "
                                             r"object arrays cannot be written \(they need "
                                             r"pickle\)$"):
            writer.write("o", np.array([None], dtype=object))
        assert path.stat().st_size == size
        writer.write("b", np.ones(2))  # the writer goes on: the refusal started no member
    with np.load(path) as npz:
        assert npz.files == ["a", "b"]
    assert zipfile.ZipFile(path).testzip() is None


def test_a_header_longer_than_readers_accept_is_refused_before_a_byte_is_written(tmp_path):
    """numpy writes any header; mmnpz reads headers up to 16 MiB, so its writers refuse a
    longer one (a dtype of very long or very many field names) instead of writing an archive
    that no mmnpz reader opens."""
    def wide(fields):
        return np.dtype([(f"{k}" + "x" * (1 << 20), "u1") for k in range(fields)])

    fits = np.arange(30, dtype=np.uint8).view(wide(15))
    too_wide = np.zeros(2, wide(16))
    path = tmp_path / "wide.npz"
    with mmnpz.NpzWriter(path) as writer:
        writer.write("fits", fits)
        size = path.stat().st_size
        for write in (lambda: writer.write("wide", too_wide),
                      lambda: writer.begin("wide", too_wide.dtype, (2,))):
            with pytest.raises(ValueError, match=r"member 'wide\.npy': the \.npy header would be "
                               r"16777524 bytes, over the limit of 16777216 that readers accept"):
                write()
            assert path.stat().st_size == size
        writer.write("after", np.arange(3))
    with mmnpz.load(path, max_header_size=1 << 25) as npz:  # as numpy's, by default 10,000
        assert npz.files == ["fits", "after"] and npz["fits"].dtype == fits.dtype
        assert npz["fits"].tobytes() == fits.tobytes()
    with np.load(path, max_header_size=1 << 25) as npz:
        assert npz["fits"].tobytes() == fits.tobytes()

    # The shard writer refuses it too, with or without a size bound, and goes on.
    for max_bytes in (None, 1 << 30):
        stem = tmp_path / f"shards{max_bytes or ''}" / "s.npz"
        stem.parent.mkdir()
        with mmnpz.ShardWriter(stem, max_bytes=max_bytes) as shards:
            with pytest.raises(ValueError, match=r"member 'wide\.npy': the \.npy header would be "
                               r"16777524 bytes"):
                shards.write("wide", too_wide)
            shards.write("after", np.arange(3))
        (shard,) = stem.parent.glob("s-*.npz")
        with np.load(shard) as npz:
            assert npz.files == ["after"]


@pytest.mark.parametrize("name", ["", "/abs", "../up", "a/../b", "a\\b", "a\x00b", "a"])
def test_invalid_names_are_refused_before_a_byte_is_written(tmp_path, name):
    path = tmp_path / "n.npz"
    with mmnpz.NpzWriter(path) as writer:
        writer.write("a", np.arange(3))
        size = path.stat().st_size
        with pytest.raises(ValueError):
            writer.write(name, np.arange(1000))
        assert path.stat().st_size == size
        with pytest.raises(ValueError):
            writer.begin(name, "<f8", (10,))
        assert path.stat().st_size == size
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["a.npy"] and zf.testzip() is None


def test_a_name_that_is_not_a_str_raises_type_error(tmp_path):
    with mmnpz.NpzWriter(tmp_path / "t.npz") as writer:
        with pytest.raises(TypeError):
            writer.write(3, np.arange(3))


def test_mode_x_refuses_an_existing_file_and_leaves_it_alone(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, a=np.arange(3))
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        mmnpz.NpzWriter(path)
    with pytest.raises(FileExistsError) as e:
        mmnpz.NpzWriter(path, mode="x")
    assert e.value.filename == str(path)
    assert path.read_bytes() == before


def test_mode_x_creates_a_new_file(tmp_path):
    path = tmp_path / "new.npz"
    with mmnpz.NpzWriter(path, "x") as writer:
        writer.write("a", [1, 2])
    assert np.load(path)["a"].tolist() == [1, 2]


def test_mode_w_replaces_an_existing_archive(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, old=np.arange(1000))
    with mmnpz.NpzWriter(path, "w") as writer:
        writer.write("new", [1.0])
    with np.load(path) as npz:
        assert npz.files == ["new"]
        assert npz["new"].tolist() == [1.0]


def test_mode_a_appends_to_an_archive_written_by_numpy(tmp_path, assert_same):
    path = tmp_path / "a.npz"
    old = {"x": np.arange(5, dtype=">i2"), "y": np.asfortranarray(np.eye(3))}
    np.savez(path, **old)
    with mmnpz.NpzWriter(path, "a") as writer:
        writer.write("z", np.linspace(0, 1, 9))
    with mmnpz.NpzWriter(path, mode="a") as writer:
        writer.write("w", ["a", "bc"])
    with np.load(path) as npz:
        assert npz.files == ["x", "y", "z", "w"]
        for key, array in old.items():
            assert_same(npz[key], array, key)
        assert np.array_equal(npz["z"], np.linspace(0, 1, 9))
        assert npz["w"].tolist() == ["a", "bc"]
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
    assert mmnpz.load(path).verify() == {}


def test_mode_a_refuses_a_name_already_in_the_archive(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(5))
    with mmnpz.NpzWriter(path, "a") as writer:
        size = path.stat().st_size
        with pytest.raises(ValueError):
            writer.write("x", [1])
        assert path.stat().st_size == size
    assert np.load(path)["x"].tolist() == list(range(5))


@pytest.mark.parametrize("mode", ["r", "r+", "wb", "", None])
def test_an_unsupported_writer_mode_raises_value_error(tmp_path, mode):
    with pytest.raises(ValueError):
        mmnpz.NpzWriter(tmp_path / "m.npz", mode)
    assert not (tmp_path / "m.npz").exists()


def test_a_closed_writer_raises_value_error(tmp_path):
    writer = mmnpz.NpzWriter(tmp_path / "c.npz")
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError):
        writer.write("a", [1])
    with pytest.raises(ValueError):
        writer.begin("a", "<i4", (1,))


def test_a_streamed_member_equals_the_whole_array(tmp_path, assert_same):
    want = np.arange(6 * 5 * 4, dtype=">f4").reshape(6, 5, 4)
    path = tmp_path / "s.npz"
    with mmnpz.NpzWriter(path) as writer:
        with writer.begin("s", want.dtype, want.shape) as stream:
            assert stream.remaining == want.nbytes
            for start in range(0, 6, 4):
                stream.write(want[start:start + 4])  # arrays of the member's dtype
            assert stream.remaining == 0
        with writer.begin("raw", "<u2", (3,)) as stream:
            stream.write(np.array([1, 2], "<u2").tobytes())  # or bytes
            stream.write(memoryview(np.array([65535], "<u2").tobytes()))
        fortran = np.asfortranarray(np.arange(12, dtype="<i8").reshape(3, 4))
        with writer.begin("f", "<i8", (3, 4), fortran_order=True) as stream:
            stream.write(fortran.T.reshape(-1))  # Fortran order: columns one after another
    with np.load(path) as npz:
        assert_same(npz["s"], want)
        assert npz["raw"].tolist() == [1, 2, 65535]
        assert_same(npz["f"], fortran)
    assert_same(mmnpz.load(path)["s"], want)


def test_a_stream_of_a_sub_array_dtype_is_the_array_numpy_makes_of_it(tmp_path, assert_same):
    # np.empty((3,), ("<f4", (2,))) is a float32 array of shape (3, 2): begin() declared a
    # (3,) member of float32 (half the bytes), and refused the (3, 2) chunks.
    sub = np.dtype(("<f4", (2,)))
    want = np.arange(6, dtype="<f4").reshape(3, 2)
    assert np.empty((3,), sub).shape == want.shape
    path = tmp_path / "sub.npz"
    with mmnpz.NpzWriter(path) as writer:
        with writer.begin("s", sub, 3) as stream:
            assert (stream.remaining, stream.dtype) == (want.nbytes, np.dtype("<f4"))
            stream.write(want)
        with pytest.raises(ValueError, match=r"^member 'f': a sub-array dtype \('<f4', \(2,\)\) "
                                             r"in Fortran order has no \.npy layout; give dtype "
                                             r"float32 and shape \(3, 2\) in C order$"):
            writer.begin("f", sub, (3,), fortran_order=True)
    with np.load(path) as npz:
        assert npz.files == ["s"]
        assert_same(npz["s"], want)


def test_an_incomplete_stream_raises_value_error_and_leaves_no_member(tmp_path):
    path = tmp_path / "i.npz"
    with mmnpz.NpzWriter(path) as writer:
        writer.write("before", [1])
        with pytest.raises(ValueError):
            with writer.begin("short", "<f8", (10,)) as stream:
                stream.write(np.zeros(5))
        with pytest.raises(ValueError):
            with writer.begin("long", "<f8", (2,)) as stream:
                stream.write(np.zeros(5))
        with pytest.raises(RuntimeError):
            with writer.begin("interrupted", "<f8", (2,)) as stream:
                stream.write(np.zeros(1))
                raise RuntimeError("the producer failed")
        writer.write("after", [2])
    with np.load(path) as npz:
        assert npz.files == ["before", "after"]
        assert npz["after"].tolist() == [2]
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None


def test_a_chunk_of_another_dtype_raises_type_error(tmp_path):
    with mmnpz.NpzWriter(tmp_path / "t.npz") as writer:
        with pytest.raises(TypeError):
            with writer.begin("s", "<f8", (2,)) as stream:
                stream.write(np.zeros(2, "<f4"))


def test_savez_equals_np_savez(tmp_path, assert_same):
    a, b = np.arange(10, dtype=">i4"), np.asfortranarray(np.eye(3))
    c = np.array([(1, 2.0)], dtype=[("i", "<i2"), ("f", "<f8")])
    mmnpz.savez(tmp_path / "ours.npz", a, b, x=c, y=[1, 2])
    np.savez(tmp_path / "theirs.npz", a, b, x=c, y=[1, 2])
    with np.load(tmp_path / "ours.npz") as got, np.load(tmp_path / "theirs.npz") as want:
        assert got.files == want.files
        for key in want.files:
            assert_same(got[key], want[key], key)
    reader = mmnpz.load(tmp_path / "ours.npz")
    assert all(reader.info(key).alignment >= 64 for key in reader)


def test_savez_replaces_an_existing_file_as_np_savez(tmp_path):
    path = tmp_path / "s.npz"
    np.savez(path, old=[1])
    mmnpz.savez(path, new=[2])
    assert np.load(path).files == ["new"]


def test_savez_that_raises_half_way_leaves_the_old_archive_byte_for_byte(tmp_path):
    path = tmp_path / "kept.npz"
    np.savez(path, a=np.arange(3), b=np.ones(2), c=np.zeros(4))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="object arrays cannot be written"):
        mmnpz.savez(path, a=np.arange(5), b=np.array([1, None], dtype=object), c=np.ones(1))
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["kept.npz"]  # no temporary file either
    fresh = tmp_path / "fresh.npz"
    with pytest.raises(ValueError, match="object arrays cannot be written"):
        mmnpz.savez(fresh, a=np.arange(5), b=np.array([1, None], dtype=object))
    assert not fresh.exists()


def test_an_exception_in_a_with_block_discards_a_replacement_and_keeps_an_append(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, a=np.arange(3))
    before = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        with mmnpz.NpzWriter(path, "w") as w:
            w.write("x", np.arange(10))
            raise KeyboardInterrupt
    assert path.read_bytes() == before
    # Mode "a" keeps the members written before the exception, as a crash and recover would.
    with pytest.raises(RuntimeError):
        with mmnpz.NpzWriter(path, "a") as w:
            w.write("y", np.arange(4))
            raise RuntimeError("later")
    with np.load(path) as f:
        assert f.files == ["a", "y"]
        assert np.array_equal(f["y"], np.arange(4))


def test_discard_leaves_the_path_as_it_was_in_every_mode(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, a=np.arange(3))
    before = path.read_bytes()
    for mode in ("w", "a"):
        w = mmnpz.NpzWriter(path, mode)
        w.write("x", np.arange(10))
        w.discard()
        w.discard()
        w.close()
        assert path.read_bytes() == before, mode
    for mode in ("x", "w", "a"):
        made = tmp_path / f"made_{mode}.npz"
        w = mmnpz.NpzWriter(made, mode)
        w.write("x", np.arange(10))
        w.discard()
        assert not made.exists(), mode
    assert sorted(os.listdir(tmp_path)) == ["d.npz"]


def test_savez_appends_npz_to_a_name_without_it_as_numpy(tmp_path):
    mmnpz.savez(tmp_path / "plain", a=[1])
    np.savez(tmp_path / "numpy", a=[1])
    assert sorted(os.listdir(tmp_path)) == ["numpy.npz", "plain.npz"]


def test_savez_refuses_a_keyword_clashing_with_a_positional_name(tmp_path):
    with pytest.raises(ValueError):
        np.savez(tmp_path / "n.npz", [1], arr_0=[2])
    with pytest.raises(ValueError):
        mmnpz.savez(tmp_path / "m.npz", [1], arr_0=[2])
    assert os.listdir(tmp_path) == []


def test_bytes_members_take_buffers_and_refuse_text_and_strided_buffers_by_name(tmp_path):
    # Were pybind11's "incompatible function arguments" (ShardWriter) or memoryview's words
    # ("a bytes-like object is required", "casts are restricted to C-contiguous views").
    strided = memoryview(np.arange(6)[::2])
    fortran = memoryview(np.asfortranarray(np.ones((2, 2))))
    refusals = [("text", TypeError, "member 'm': data must be bytes or a buffer, not str "
                                    "(encode the text: text.encode())"),
                (5, TypeError, "member 'm': data must be bytes or a buffer, not int"),
                (strided, ValueError, "member 'm': the buffer's bytes must be contiguous (C "
                                      "order); copy it first, bytes(...) or "
                                      "numpy.ascontiguousarray(...)"),
                (fortran, ValueError, "member 'm': the buffer's bytes must be contiguous (C "
                                      "order); copy it first, bytes(...) or "
                                      "numpy.ascontiguousarray(...)")]
    grid = np.arange(6, dtype="<i8").reshape(2, 3)
    with mmnpz.NpzWriter(tmp_path / "w.npz") as writer, \
            mmnpz.ShardWriter(tmp_path / "s.npz") as shards:
        for data, error, message in refusals:
            for write in (writer.write_bytes, shards.write_bytes):
                with pytest.raises(error, match=f"^{re.escape(message)}$"):
                    write("m", data)
        with pytest.raises(TypeError, match=r"^write_group: members must be \(name, value\) "
                                            r"pairs, not tuple of 3$"):
            shards.write_group([("a", b"x", b"y")])
        with writer.begin("m", "<u1", (4,)) as stream:
            with pytest.raises(TypeError, match="^member 'm': data must be bytes or a buffer, "
                                                "not str"):
                stream.write("ab")
            stream.write(bytearray(b"ab"))
            stream.write(memoryview(b"cd"))
        for write in (writer.write_bytes, shards.write_bytes):
            write("grid", memoryview(grid))  # a C-contiguous buffer of any shape and format
    with np.load(tmp_path / "w.npz") as f:
        assert f.files == ["m", "grid"]
        assert f["m"].tobytes() == b"abcd" and f["grid"] == grid.tobytes()
    with np.load(tmp_path / "s-00000-of-00001.npz") as f:
        assert f.files == ["grid"] and f["grid"] == grid.tobytes()


WAITING_FOR_A_STREAM = r"""
import sys, threading, time
import numpy as np
import mmnpz
w = mmnpz.NpzWriter(sys.argv[1])
stream = w.begin("stream", np.int32, (4,))
stream.write(np.arange(2, dtype=np.int32))
waiter = threading.Thread(target=lambda: w.write("x", np.arange(3)))
waiter.start()
time.sleep(0.3)  # the waiter waits for the stream (without the GIL)
for call in (lambda: w.write("y", [1]), lambda: w.begin("z", np.int8, (1,))):
    try:
        call()
        print("accepted")
    except ValueError as e:
        print(e)
stream.write(np.arange(2, 4, dtype=np.int32))
stream.commit()
waiter.join()
if sys.argv[2] == "close":
    other = mmnpz.NpzWriter(sys.argv[1] + ".2")
    s2 = other.begin("s", np.int8, (2,))
    t = threading.Thread(target=lambda: other.write("x", [1]))
    t.start()
    time.sleep(0.3)
    other.close()  # abandons the stream; the waiter is refused
    t.join()
    print(sorted(np.load(sys.argv[1] + ".2").files))
w.close()
print(sorted(np.load(sys.argv[1]).files))
"""


@pytest.mark.parametrize("then", ["commit", "close"])
def test_a_thread_waiting_for_a_stream_blocks_neither_the_stream_nor_close(tmp_path, then):
    # The Python writer held its lock while its core call waited for another thread's stream:
    # the stream's own thread then blocked on that lock (write, begin, close) forever.
    import subprocess
    import sys
    path = tmp_path / "a.npz"
    done = subprocess.run([sys.executable, "-c", WAITING_FOR_A_STREAM, str(path), then],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"{path}: member 'y': another member is still being written",
                         f"{path}: member 'z': another member is still being written"]
    assert lines[2:] == (["[]"] if then == "close" else []) + ["['stream', 'x']"]


def test_writers_refuse_pickling_and_text_files_in_words_saying_why(tmp_path):
    import copy
    import pickle
    with mmnpz.NpzWriter(tmp_path / "w.npz") as writer, \
            mmnpz.ShardWriter(tmp_path / "s.npz") as shards:
        # Were "cannot pickle '_thread.RLock' object".
        with pytest.raises(TypeError, match="^an NpzWriter cannot be pickled or copied: it "
                                            "holds its file open and locked"):
            pickle.dumps(writer)
        with pytest.raises(TypeError, match="^a ShardWriter cannot be pickled or copied"):
            copy.deepcopy(shards)
    with open(tmp_path / "t.npz", "w") as text:
        # Was "write() argument must be str, not bytes" once the archive was made.
        with pytest.raises(TypeError, match=r"t\.npz: the file is open in text mode \(open "
                                            r"the file in binary mode\)$"):
            mmnpz.savez(text, a=[1])
