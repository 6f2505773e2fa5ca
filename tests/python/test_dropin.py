"""mmnpz.load, savez and savez_compressed as drop-ins for numpy's: every input numpy.load
takes (paths, file objects, .npy files) plus bytes, numpy's keywords, mmap_mode's four
meanings, compressed writing, raw bytes members and archive comments; each point compared
with numpy itself (and zipfile, unzip)."""

import copy
import importlib
import io
import os
import pathlib
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import pytest

import mmnpz

from conftest import assert_same_array


@pytest.fixture
def arrays():
    return {
        "a": np.arange(12, dtype="<f8").reshape(3, 4),
        "b": np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)),
        "s": np.array(3.5),
        "e": np.zeros((0, 3), "u1"),
    }


@pytest.fixture
def npz(tmp_path, arrays):
    path = tmp_path / "stored.npz"
    np.savez(path, **arrays)
    return path


@pytest.fixture
def deflated(tmp_path, arrays):
    path = tmp_path / "deflated.npz"
    np.savez_compressed(path, **arrays)
    return path


def same_as_numpy(got, want):
    """Equal arrays of the same type (memmap or ndarray) and writability."""
    assert type(got) is type(want), f"{type(got).__name__} != {type(want).__name__}"
    assert got.flags.writeable == want.flags.writeable
    assert_same_array(got, want)


# ---- inputs ---------------------------------------------------------------------------------

def test_a_file_object_is_mapped_and_reads_like_numpy(npz, arrays):
    with open(npz, "rb") as f:
        reader = mmnpz.load(f)
        want = np.load(f)
        for name in arrays:
            assert_same_array(reader[name], want[name])
            assert isinstance(reader[name], np.memmap)  # mapped through fileno()
        assert reader.path == str(npz)


def test_a_file_object_without_a_descriptor_is_read(npz, arrays):
    data = npz.read_bytes()
    reader = mmnpz.load(io.BytesIO(data))
    want = np.load(io.BytesIO(data))
    assert reader.files == want.files
    for name in arrays:
        assert_same_array(reader[name], want[name])


@pytest.mark.parametrize("module", ["gzip", "bz2", "lzma"])
def test_a_compressed_file_object_is_read_through_not_mapped_from_its_descriptor(
        tmp_path, npz, arrays, module):
    """GzipFile and its kin hand out the descriptor of the compressed file: mapping it read
    the compressed bytes ("not a ZIP archive"), or a .npy's header out of them."""
    opener = importlib.import_module(module).open
    packed = tmp_path / f"archive.{module}"
    with opener(packed, "wb") as f:
        f.write(npz.read_bytes())
    with opener(packed, "rb") as f, opener(packed, "rb") as g:
        reader, want = mmnpz.load(f), np.load(g)
        assert reader.files == want.files
        for name in arrays:
            assert_same_array(np.asarray(reader[name]), want[name])
    npy = tmp_path / f"array.npy.{module}"
    with opener(npy, "wb") as f:
        np.save(f, arrays["b"])
    with opener(npy, "rb") as f, opener(npy, "rb") as g:
        assert_same_array(np.asarray(mmnpz.load(f)), np.load(g))


def test_a_named_temporary_file_is_mapped(npz, arrays):
    with tempfile.NamedTemporaryFile(suffix=".npz") as f:
        f.write(npz.read_bytes())
        f.flush()
        reader = mmnpz.load(f)
        for name in arrays:
            assert isinstance(reader[name], np.memmap)
            assert_same_array(reader[name], np.load(npz)[name])


def test_bytes_bytearray_and_memoryview_are_archives(npz, arrays):
    data = npz.read_bytes()
    for given in (data, bytearray(data), memoryview(data)):
        reader = mmnpz.load(given)
        for name, want in arrays.items():
            assert_same_array(reader[name], want)


def test_bytes_that_are_a_path_stay_a_path(npz):
    assert mmnpz.load(os.fsencode(npz)).files == np.load(os.fsencode(npz)).files


def test_paths_whose_bytes_are_not_utf8_are_read_and_written_as_numpy_does(tmp_path, arrays):
    # Linux names files by bytes; Python holds b"caf\xe9" as the str "caf\udce9".
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(folder)
    named = os.fsdecode(folder + b"/d\xe9.npz")
    np.savez(named, **arrays)
    for given in (named, os.fsencode(named), pathlib.Path(named)):
        npz = mmnpz.load(given)
        for name, want in arrays.items():
            assert_same_array(npz[name], want, name)
        assert npz.path == named
    for opened in (open(named, "rb"), open(os.fsencode(named), "rb")):
        with opened:
            assert_same_array(mmnpz.load(opened)["a"], arrays["a"], "a from a file object")
    edited = os.fsdecode(folder + b"/r\xe9.npz")
    shutil.copy(named, edited)
    with mmnpz.load(edited, mmap_mode="r+") as npz:  # its CRC-32s updated on close
        npz["a"][0, 0] = 7.0
    assert np.load(edited)["a"][0, 0] == 7.0
    with zipfile.ZipFile(edited) as z:
        assert z.testzip() is None
    written = os.fsdecode(folder + b"/w\xe9.npz")
    mmnpz.savez(written, **arrays)
    with mmnpz.NpzWriter(written, "a") as w:
        w.write("more", np.arange(3))
    assert sorted(np.load(written).files) == sorted([*arrays, "more"])
    assert mmnpz.recover(written)["members_recovered"] == len(arrays) + 1
    ds = mmnpz.Dataset([named, os.fsencode(written)], select="[ab]")
    assert ds.paths == (named, written)
    assert ds.locate(2) == (written, "a.npy")
    assert_same_array(ds[3], arrays["b"], "b")
    assert len(mmnpz.Dataset(os.fsdecode(folder) + "/", select="[ab]")) == 6
    shards = mmnpz.ShardWriter(os.fsdecode(folder + b"/s\xe9.npz"), max_items=1)
    shards.write("x", np.ones(2))
    shards.write("y", np.zeros(2))
    shards.close()
    assert shards.paths == [os.fsdecode(folder + b"/s\xe9-0000%d-of-00002.npz" % i)
                            for i in range(2)]
    assert mmnpz.Dataset(shards.spec).paths == tuple(shards.paths)
    # Errors keep the path as Python names the file (path, filename), the message escaped.
    missing = os.fsdecode(folder + b"/no\xe9.npz")
    with pytest.raises(FileNotFoundError) as e:
        mmnpz.load(missing)
    assert e.value.filename == missing
    bad = folder + b"/bad\xe9.npz"
    with open(bad, "wb") as f:
        f.write(b"PK\x05\x06" + bytes(10))
    with pytest.raises(mmnpz.FormatError) as e:
        mmnpz.load(os.fsdecode(bad))
    assert e.value.path == os.fsdecode(bad)
    assert str(e.value).startswith(os.fsdecode(bad).replace("\udce9", "\\xe9") + ": ")
    with open(named, "rb") as f:
        damaged = bytearray(f.read())
    with zipfile.ZipFile(named) as z:
        a = z.getinfo("a.npy")
    damaged[a.header_offset + 30 + len(a.filename) + len(a.extra) + 128] ^= 1  # a's data
    with open(named, "wb") as f:
        f.write(damaged)
    failures = mmnpz.load(named).verify()
    assert list(failures) == ["a.npy"]
    assert failures["a.npy"].startswith(named.replace("\udce9", "\\xe9") + ": member 'a.npy'")


def test_a_name_or_option_that_utf8_cannot_encode_is_refused_by_name(tmp_path):
    odd = "a\udcff"  # a lone surrogate: os.fsdecode's reading of a byte that is not UTF-8
    want = (r"member name 'a\udcff' is no text UTF-8 can store: it holds the lone surrogate "
            r"'\udcff' at 1")
    with mmnpz.NpzWriter(tmp_path / "w.npz") as w:
        for call in (lambda: w.write(odd, np.ones(2)), lambda: w.write_bytes(odd, b"x"),
                     lambda: w.begin(odd, "<f4", (2,))):
            with pytest.raises(ValueError) as e:
                call()
            assert str(e.value) == want
        w.write("kept", np.ones(2))
    with pytest.raises(ValueError) as e:
        mmnpz.savez(tmp_path / "s.npz", **{odd: np.ones(2)})
    assert str(e.value) == want
    shards = mmnpz.ShardWriter(tmp_path / "sh.npz")
    with pytest.raises(ValueError) as e:
        shards.write(odd, np.ones(2))
    assert str(e.value) == want
    shards.close()
    assert np.load(tmp_path / "w.npz").files == ["kept"]
    with pytest.raises(ValueError) as e:
        mmnpz.Dataset(tmp_path / "w.npz", select=odd)
    assert str(e.value) == "Dataset: select must be text that UTF-8 can encode, not 'a\\udcff'"
    with pytest.raises(KeyError):
        mmnpz.load(tmp_path / "w.npz")[odd]


def test_a_file_object_not_open_for_reading_is_refused_clearly(tmp_path, npz):
    with open(tmp_path / "w.bin", "wb") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for reading"):
            mmnpz.load(f)


def test_npy_files_load_as_numpy_loads_them(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(10, dtype="<i2").reshape(2, 5))
    for mode in (None, "r", "c", "r+"):
        same_as_numpy(mmnpz.load(path, mmap_mode=mode), np.load(path, mmap_mode=mode))
    with open(path, "rb") as f:
        same_as_numpy(mmnpz.load(f, None), np.load(path))
    same_as_numpy(mmnpz.load(path.read_bytes(), None), np.load(path))
    got = mmnpz.load(path)  # mmnpz's default: a read-only memmap
    assert isinstance(got, np.memmap) and not got.flags.writeable


def test_npy_read_from_a_file_objects_current_position_as_numpy(tmp_path):
    path = tmp_path / "two.bin"
    with open(path, "wb") as f:
        np.save(f, np.arange(3))
        np.save(f, np.arange(4.0))
    with open(path, "rb") as f, open(path, "rb") as g:
        for _ in range(2):
            same_as_numpy(mmnpz.load(f, None), np.load(g))
        assert f.tell() == g.tell()


def test_npy_mmap_modes_from_a_file_object_map_the_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(5.0))
    with open(path, "rb") as f:
        got = mmnpz.load(f, "c")
    assert isinstance(got, np.memmap) and got.flags.writeable
    got[0] = 99
    assert np.load(path)[0] == 0  # copy-on-write: the file is unchanged


def test_npy_with_a_pickle_is_refused_without_allow_pickle_as_numpy(tmp_path):
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"k": 1}], dtype=object), allow_pickle=True)
    for mode in (None, "r"):
        with pytest.raises(ValueError) as want:
            np.load(path, mmap_mode=mode)
        with pytest.raises(ValueError) as got:
            mmnpz.load(path, mmap_mode=mode)
        assert str(got.value) == str(want.value)
    assert mmnpz.load(path, None, allow_pickle=True)[0] == {"k": 1}


def test_a_pickle_file_loads_only_with_allow_pickle(tmp_path):
    path = tmp_path / "p.pkl"
    path.write_bytes(pickle.dumps({"x": 1}))
    assert mmnpz.load(path, allow_pickle=True) == np.load(path, allow_pickle=True)
    with pytest.raises(ValueError):
        mmnpz.load(path)


# ---- numpy's keywords -----------------------------------------------------------------------

def test_numpy_keywords_are_accepted_positionally_and_by_name(npz, arrays):
    reader = mmnpz.load(npz, "r", False, True, "ASCII", max_header_size=10000)
    assert_same_array(reader["a"], arrays["a"])
    with pytest.raises(ValueError, match="encoding must be"):
        mmnpz.load(npz, encoding="utf-8")


def test_max_header_size_refuses_long_headers_as_numpy(tmp_path):
    path = tmp_path / "wide.npz"
    dtype = np.dtype([(f"field_{i}", "<f4") for i in range(600)])  # a header of ~12 KB
    np.savez(path, w=np.zeros(2, dtype), n=np.arange(3))
    with pytest.raises(ValueError) as want:
        np.load(path)["w"]
    for mode in ("r", None, "c"):
        with pytest.raises(ValueError) as got:
            mmnpz.load(path, mode)["w"]
        assert str(got.value) == str(want.value)
        assert_same_array(mmnpz.load(path, mode)["n"], np.arange(3))
    assert_same_array(mmnpz.load(path, max_header_size=20000)["w"],
                      np.load(path, max_header_size=20000)["w"])
    assert_same_array(mmnpz.load(path, allow_pickle=True)["w"],
                      np.load(path, allow_pickle=True)["w"])
    with pytest.raises(ValueError, match="Header info length"):
        mmnpz.load(path, max_header_size=10)["n"]


@pytest.mark.filterwarnings("ignore:Stored array in format 3.0")
def test_max_header_size_counts_a_version_3_headers_characters_as_numpy(tmp_path):
    # Field names that are not latin-1 make numpy write a version 3.0 (UTF-8) header: 400
    # names of 8 Cyrillic letters and 4 ASCII characters: 13,300 bytes, 10,100 characters.
    path = tmp_path / "utf8.npz"
    names = [f"\u0444\u0430\u0439\u043b\u0444\u0430\u0439\u043b_{i:03d}" for i in range(400)]
    np.savez(path, a=np.zeros(2, [(name, "<i1") for name in names]))
    with zipfile.ZipFile(path) as zf:
        raw = zf.read("a.npy")
    assert raw[6:8] == b"\x03\x00"
    stored = int.from_bytes(raw[8:12], "little")
    chars = len(raw[12:12 + stored].decode("utf-8"))
    assert chars < stored
    for limit in (chars, chars - 1, stored):
        for mode in ("r", None, "c"):
            try:
                want = np.load(path, max_header_size=limit)["a"]
            except ValueError as error:
                with pytest.raises(ValueError) as got:
                    mmnpz.load(path, mode, max_header_size=limit)["a"]
                assert str(got.value) == str(error)
                assert limit == chars - 1
            else:
                assert_same_array(mmnpz.load(path, mode, max_header_size=limit)["a"], want)


def test_encoding_and_fix_imports_reach_pickles(tmp_path):
    path = tmp_path / "o.npz"
    np.savez(path, o=np.array([b"\xe9t\xe9"], dtype=object))
    for encoding in ("ASCII", "latin1", "bytes"):
        got = mmnpz.load(path, allow_pickle=True, encoding=encoding, fix_imports=False)["o"]
        assert got.tolist() == np.load(path, allow_pickle=True, encoding=encoding)["o"].tolist()


# ---- mmap_mode ------------------------------------------------------------------------------

def test_mmap_mode_none_gives_fresh_writable_arrays_as_numpy(npz, deflated, arrays):
    for path in (npz, deflated):
        reader, want = mmnpz.load(path, None), np.load(path)
        for name in arrays:
            same_as_numpy(reader[name], want[name])
        first = reader["a"]
        first[0, 0] = -1
        assert reader["a"][0, 0] == 0  # a new copy at every access, as numpy
    assert np.load(npz)["a"][0, 0] == 0


def test_mmap_mode_c_gives_copy_on_write_memmaps(npz, arrays):
    before = npz.read_bytes()
    reader = mmnpz.load(npz, "c")
    a = reader["a"]
    assert isinstance(a, np.memmap) and a.flags.writeable and a.mode == "c"
    assert_same_array(a, arrays["a"])
    a[...] = 7
    assert (reader["a"] == 7).all()  # the reader's views share the private mapping
    reader.close()
    assert npz.read_bytes() == before
    assert (a == 7).all()


def test_mmap_mode_c_on_bytes_copies(npz, arrays):
    data = npz.read_bytes()
    a = mmnpz.load(data, "c")["b"]
    a[0, 0] = 5
    assert np.load(io.BytesIO(data))["b"][0, 0] == 0


def test_mmap_mode_r_plus_writes_into_the_file_and_keeps_crcs_right(npz, arrays):
    with mmnpz.load(npz, "r+") as reader:
        a = reader["a"]
        assert isinstance(a, np.memmap) and a.flags.writeable and a.mode == "r+"
        a[1] = 42
        b = reader["b"]
        b[:, 0] = -3
    want = arrays["a"].copy()
    want[1] = 42
    assert_same_array(np.load(npz)["a"], want)  # numpy checks the CRC-32 through zipfile
    assert (np.load(npz)["b"][:, 0] == -3).all()
    assert zipfile.ZipFile(npz).testzip() is None
    assert mmnpz.load(npz).verify() == {}


def test_mmap_mode_r_plus_flush_updates_crcs_while_open(npz):
    reader = mmnpz.load(npz, "r+")
    reader["s"][...] = 1.25
    reader.flush()
    assert np.load(npz)["s"] == 1.25
    assert zipfile.ZipFile(npz).testzip() is None
    reader.close()


def test_a_reader_dropped_unclosed_lets_go_of_its_file_without_a_garbage_collection(tmp_path):
    # reader.f held the reader strongly (a cycle): an unclosed reader kept its descriptor, and
    # an "r+" one the writers' lock, until the cyclic collector ran (EMFILE in a loop).
    import gc
    path = tmp_path / "a.npz"
    mmnpz.savez(path, a=np.arange(4.0))
    with mmnpz.NpzWriter(path, "a", compresslevel=6) as w:
        w.write("z", np.zeros(100))
    here = set(os.listdir("/proc/self/fd"))
    gc.disable()
    try:
        for mode in ("r", None, "c"):
            assert mmnpz.load(path, mode)["a"].sum() == 6
        edited = mmnpz.load(path, "r+")
        assert edited.f.a.sum() == 6
        del edited
        with mmnpz.NpzWriter(path, "a") as w:  # the lock was let go of
            w.write("b", np.ones(2))
        # A failed "r+" preload (a deflated member) closes what it opened.
        with pytest.raises(ValueError, match="'r\\+' cannot write into deflated member 'z.npy'"):
            mmnpz.load(path, "r+", preload=True)
        with mmnpz.NpzWriter(path, "a") as w:
            w.write("c", np.ones(2))
        assert set(os.listdir("/proc/self/fd")) == here
    finally:
        gc.enable()
    assert sorted(np.load(path).files) == ["a", "b", "c", "z"]


def test_r_plus_edits_a_forked_worker_made_get_their_crcs_when_the_parent_closes(tmp_path):
    # A worker ends with os._exit (as multiprocessing's do), which runs no exit hook: the
    # members it handed out were unknown to the parent, whose close() left their CRC-32s stale
    # (numpy: "Bad CRC-32 for file 'b.npy'").
    path = tmp_path / "a.npz"
    mmnpz.savez(path, a=np.zeros(10), b=np.zeros(10), c=np.zeros(10))
    edited = mmnpz.load(path, "r+")
    edited["a"][0] = 1  # the parent's own edit
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            edited["b"][:] = 5
            edited["a"][1] = 2
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    edited.close()
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
    with np.load(path) as z:
        assert z["a"][:3].tolist() == [1, 2, 0] and z["b"].tolist() == [5] * 10
        assert z["c"].tolist() == [0] * 10
    assert mmnpz.load(path).verify() == {}


def test_mmap_mode_r_plus_brings_the_crcs_of_many_edited_members_up_to_date(tmp_path):
    # 3,000 members: a directory of several 64 KiB pieces, walked once for every edit.
    path = tmp_path / "many.npz"
    np.savez(path, **{f"m{k}": np.full(3, k, np.int32) for k in range(3000)})
    with mmnpz.load(path, "r+") as reader:
        for k in range(0, 3000, 7):
            reader[f"m{k}"][1] = -k
        reader["m2999"][0] = 7  # the directory's last entry
        reader["m5"]  # handed out, not edited: its CRC-32 stays
    loaded = np.load(path)
    for k in (0, 7, 14, 2996, 5, 6):
        want = np.full(3, k, np.int32)
        want[1] = -k if k % 7 == 0 else k
        assert_same_array(loaded[f"m{k}"], want)
    assert loaded["m2999"].tolist() == [7, 2999, 2999]
    assert zipfile.ZipFile(path).testzip() is None
    assert mmnpz.load(path).verify() == {}


def test_mmap_mode_r_plus_holds_the_writers_lock_until_closed(npz):
    # An append meanwhile would leave the edits' CRC-32s in a directory its own supersedes.
    reader = mmnpz.load(npz, "r+")
    reader["a"][1] = 42
    for mode in ("a", "w"):
        with pytest.raises(ValueError, match="another writer .* has the archive open"):
            mmnpz.NpzWriter(npz, mode)
    with pytest.raises(ValueError, match="another writer .* has the archive open"):
        mmnpz.recover(npz)
    reader.close()
    with mmnpz.NpzWriter(npz, "a") as w:
        w.write("later", np.arange(2))
    assert (np.load(npz)["a"][1] == 42).all()  # numpy checks the CRC-32s through zipfile
    assert zipfile.ZipFile(npz).testzip() is None
    # And a writer at work keeps editors out.
    with mmnpz.NpzWriter(npz, "a") as w:
        with pytest.raises(ValueError, match="another writer .* has the archive open"):
            mmnpz.load(npz, "r+")
        with open(npz, "r+b") as f:
            with pytest.raises(ValueError, match="another writer .* has the archive open"):
                mmnpz.load(f, "r+")


R_PLUS_VIEW_KEPT_TO_EXIT = """
import sys, numpy as np, mmnpz
with mmnpz.load(sys.argv[1], "r+") as reader:
    kept = reader["a"]
kept[1] = 42  # after close(), the view alive until the interpreter exits
with mmnpz.NpzWriter(sys.argv[1], "a") as w:  # the directory moves: mapped again at exit
    w.write("appended", np.arange(3))
"""


def test_mmap_mode_r_plus_views_kept_after_close_get_their_crcs_when_they_go(npz, arrays):
    """Writes through views kept after close() reached the file but not the CRC-32s: numpy
    then refused the member ("Bad CRC-32")."""
    with mmnpz.load(npz, "r+") as reader:
        a = reader["a"]
        part = reader["b"][1:]
    reader.close()  # again: nothing more to do
    a[1] = 42
    part[0] = -3
    with mmnpz.NpzWriter(npz, "a") as w:  # writers are let in at close(), as before
        w.write("later", np.arange(2))
    a[2] = 43
    del part  # the mapping lives on in `a`
    del a
    assert np.load(npz)["b"][1].tolist() == [-3] * arrays["b"].shape[1]
    want = arrays["a"].copy()
    want[1], want[2] = 42, 43
    assert_same_array(np.load(npz)["a"], want)  # numpy checks the CRC-32s through zipfile
    assert zipfile.ZipFile(npz).testzip() is None
    assert mmnpz.load(npz).verify() == {}
    run = subprocess.run([sys.executable, "-c", R_PLUS_VIEW_KEPT_TO_EXIT, str(npz)],
                         capture_output=True, text=True, env=dict(os.environ))
    assert run.returncode == 0 and run.stderr == "", run.stderr[-2000:]
    assert np.load(npz)["a"][1].tolist() == [42.0] * 4
    assert np.load(npz)["appended"].tolist() == [0, 1, 2]
    assert zipfile.ZipFile(npz).testzip() is None


def test_mmap_mode_r_plus_refuses_to_update_crcs_of_an_archive_another_program_grew(npz):
    reader = mmnpz.load(npz, "r+")
    reader["a"][1] = 42
    with zipfile.ZipFile(npz, "a") as zf:  # not mmnpz: no lock stops it
        zf.writestr("extra.txt", b"x" * 100)
    with pytest.raises(ValueError, match=r"bytes now, \d+ when it was opened with 'r\+': "
                                         "another program wrote to it"):
        reader.close()


R_PLUS_AFTER_A_CUT = """
import os, sys, numpy as np, mmnpz
path = sys.argv[1]
reader = mmnpz.load(path, "r+")
reader["a"][0] = 1.0
os.truncate(path, 4096)
try:
    reader.close()
except mmnpz.FormatError as e:
    print(e)
"""


def test_mmap_mode_r_plus_close_after_the_file_was_cut_raises_instead_of_crashing(tmp_path):
    """The CRC-32s are brought up to date through the mapping, whose pages past the new end
    raise SIGBUS when touched: a child process, as the old code was killed by the signal."""
    path = tmp_path / "cut.npz"
    np.savez(path, a=np.zeros(1 << 16, np.float32), b=np.ones(1 << 16, np.float32))
    size = os.path.getsize(path)
    run = subprocess.run([sys.executable, "-c", R_PLUS_AFTER_A_CUT, str(path)],
                         capture_output=True, text=True, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    got = re.fullmatch(rf"{re.escape(str(path))} at offset (\d+): the archive was truncated "
                       r"after it was opened", run.stdout.strip())
    assert got, run.stdout + run.stderr
    assert 4096 <= int(got.group(1)) < size  # a byte the directory's reading met first


def test_mmap_mode_r_plus_refuses_deflated_members(deflated):
    reader = mmnpz.load(deflated, "r+")
    with pytest.raises(ValueError, match=r"'r\+' cannot write into deflated member 'a.npy'"):
        reader["a"]


def test_mmap_mode_r_plus_refuses_a_read_only_file_object(npz):
    with open(npz, "rb") as f:
        with pytest.raises(PermissionError, match="open for reading and writing"):
            mmnpz.load(f, "r+")


def test_mmap_mode_r_plus_refuses_bytes(npz):
    with pytest.raises(ValueError, match="needs a file to write into"):
        mmnpz.load(npz.read_bytes(), "r+")


# ---- writing --------------------------------------------------------------------------------

@pytest.mark.parametrize("level", [-1, 0, 1, 9])
def test_savez_compressed_is_read_by_numpy_zipfile_and_unzip(tmp_path, arrays, level):
    path = tmp_path / "c.npz"
    mmnpz.savez_compressed(path, np.arange(4), compresslevel=level, **arrays)
    want = dict(arrays, arr_0=np.arange(4))
    loaded = np.load(path)
    assert sorted(loaded.files) == sorted(want)
    for name, array in want.items():
        assert_same_array(loaded[name], array)
        assert_same_array(mmnpz.load(path)[name], array)
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-tq", str(path)], check=True, capture_output=True)


def test_savez_compressed_compresses(tmp_path):
    path = tmp_path / "z.npz"
    mmnpz.savez_compressed(path, z=np.zeros(1 << 20))
    assert path.stat().st_size < 20000
    assert mmnpz.load(path).info("z").compressed


def _zip_of_npys(path, compression, members):
    """An archive as a user writes one with zipfile: `members` (name: array or bytes) each
    saved by np.save (bytes as they are) and compressed by `compression`."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, value in members.items():
            if isinstance(value, bytes):
                z.writestr(name, value)
            else:
                f = io.BytesIO()
                np.save(f, value)
                z.writestr(name + ".npy", f.getvalue())
    return path


@pytest.mark.parametrize("compression", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_bzip2_and_lzma_members_read_as_numpy_reads_them(tmp_path, arrays, compression):
    members = dict(arrays, o=np.array([1, "x"], dtype=object), text=b"hello")
    path = _zip_of_npys(tmp_path / "c.npz", compression, members)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as z:  # and one member stored
        f = io.BytesIO()
        np.save(f, np.arange(5))
        z.writestr("plain.npy", f.getvalue())
    want = np.load(path, allow_pickle=True)
    for mode in (None, "r", "c"):
        got = mmnpz.load(path, mmap_mode=mode, allow_pickle=True)
        assert got.files == want.files
        for name in want.files:
            if name == "text":
                assert got[name] == want[name] == b"hello"
            elif name == "o":
                assert got[name].tolist() == want[name].tolist()
            else:
                assert_same_array(got[name], want[name], f"{mode} {name}")
                assert got[name].flags.writeable == (mode != "r" or name != "plain")
    npz = mmnpz.load(path)
    with pytest.raises(ValueError, match="^Object arrays cannot be loaded when "
                                         "allow_pickle=False$"):
        npz["o"]
    assert npz.verify() == {}
    npz.verify("a")
    info = npz.info("b")
    assert (info.kind, info.dtype, info.shape, info.fortran_order, info.compressed,
            info.offset) == ("array", np.dtype(">i4"), (2, 3), True, True, None)
    assert npz.info("o").kind == "object" and npz.info("text").kind == "bytes"
    assert npz.info("plain").compressed is False
    # max_header_size as numpy applies it (allow_pickle lifts it).
    wide = np.zeros(2, dtype=[(f"f{k}" + "x" * 40, "<f4") for k in range(400)])
    long_header = _zip_of_npys(tmp_path / "long.npz", compression, {"w": wide})
    with pytest.raises(ValueError, match=r"^Header info length \(\d+\) is large"):
        np.load(long_header)["w"]
    with pytest.raises(ValueError, match=r"^Header info length \(\d+\) is large"):
        mmnpz.load(long_header)["w"]
    assert_same_array(mmnpz.load(long_header, allow_pickle=True)["w"], wide, "wide")
    assert_same_array(mmnpz.load(long_header, max_header_size=10**6)["w"], wide, "wide")
    # The C++ side (Dataset, gather) does not decode them, and says so.
    with pytest.raises(mmnpz.FormatError, match=f"^{re.escape(str(path))}: member 'a.npy' at "
                                                f"offset 0: compression method {compression} "
                                                "is not supported"):
        mmnpz.Dataset(path, select="a")
    method = "bzip2" if compression == zipfile.ZIP_BZIP2 else "LZMA"
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: 'r\\+' cannot write into "
                                         f"{method} member 'a.npy'$"):
        mmnpz.load(path, mmap_mode="r+")["a"]


@pytest.mark.parametrize("compression", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_damaged_bzip2_and_lzma_members_are_errors_naming_them_as_in_numpy(
        tmp_path, compression):
    path = _zip_of_npys(tmp_path / "c.npz", compression,
                        {"a": np.arange(1000.0), "b": np.ones(3)})
    with zipfile.ZipFile(path) as z:
        a = z.getinfo("a.npy")
        data_at = a.header_offset + 30 + len(a.filename) + len(a.extra)
    good = path.read_bytes()
    method = "bzip2" if compression == zipfile.ZIP_BZIP2 else "LZMA"
    damaged = bytearray(good)
    damaged[data_at + a.compress_size // 2] ^= 0xFF  # in the stream
    path.write_bytes(damaged)
    with pytest.raises(Exception):
        np.load(path)["a"]
    npz = mmnpz.load(path)
    with pytest.raises(mmnpz.FormatError) as e:
        npz["a"]
    assert str(e.value).startswith(f"{path}: member 'a.npy': ")
    assert (e.value.path, e.value.member) == (str(path), "a.npy")
    assert re.search(f"its {method} stream is corrupt|CRC-32 is 0x[0-9a-f]{{8}}, the central "
                     f"directory says 0x{a.CRC:08x}|its {method} stream (decodes to|stops short, at) ", str(e.value))
    assert set(npz.verify()) == {"a.npy"}
    assert_same_array(npz["b"], np.ones(3), "b")
    # The directory's CRC-32 wrong, the stream intact: numpy and mmnpz both refuse it.
    crc = struct.pack("<I", a.CRC ^ 1)
    entry = next(i for i in range(len(good)) if good.startswith(b"PK\x01\x02", i)
                 and good[i + 46:i + 51] == b"a.npy")  # a.npy's directory entry
    wrong = bytearray(good)
    wrong[a.header_offset + 14:a.header_offset + 18] = crc
    wrong[entry + 16:entry + 20] = crc
    path.write_bytes(wrong)
    with pytest.raises(zipfile.BadZipFile):
        np.load(path)["a"]
    with pytest.raises(mmnpz.FormatError) as e:
        mmnpz.load(path)["a"]
    assert str(e.value) == (f"{path}: member 'a.npy': CRC-32 is 0x{a.CRC:08x}, the central "
                            f"directory says 0x{a.CRC ^ 1:08x}")
    # The code the core gives a bad CRC-32 (e.code was an AttributeError for these methods).
    stored = tmp_path / "stored.npz"
    np.savez(stored, a=np.arange(3))
    raw = bytearray(stored.read_bytes())
    raw[raw.index(b"\x93NUMPY") + 130] ^= 1  # a.npy's data
    stored.write_bytes(raw)
    with pytest.raises(mmnpz.FormatError) as core:
        mmnpz.load(stored).verify("a")
    assert "CRC-32 is" in str(core.value) and e.value.code == core.value.code
    npz = mmnpz.load(path)
    with pytest.raises(mmnpz.FormatError) as e:
        npz.verify("a")
    assert e.value.code == core.value.code


def test_savez_compressed_refuses_a_bad_level(tmp_path):
    with pytest.raises(ValueError, match="compresslevel"):
        mmnpz.savez_compressed(tmp_path / "x.npz", a=np.arange(3), compresslevel=10)


def test_savez_writes_to_a_file_object(arrays):
    buf = io.BytesIO()
    mmnpz.savez(buf, **arrays)
    buf.seek(0)
    loaded = np.load(buf)
    for name, array in arrays.items():
        assert_same_array(loaded[name], array)
    buf2 = io.BytesIO()
    mmnpz.savez_compressed(buf2, **arrays)
    assert_same_array(np.load(io.BytesIO(buf2.getvalue()))["a"], arrays["a"])


def test_savez_to_a_file_object_names_that_file_in_its_refusals_and_writes_nothing(tmp_path):
    # Written to a temporary file first: a refusal named that file, which the user never saw.
    for save in (mmnpz.savez, mmnpz.savez_compressed):
        buf = io.BytesIO()
        with pytest.raises(ValueError, match=r"^<BytesIO>: member 'b\.npy': object arrays "
                                             r"cannot be written \(they need pickle\)$"):
            save(buf, a=np.arange(3), b=np.array([None], dtype=object))
        with pytest.raises(ValueError, match=r"^<BytesIO>: member '\.\./x': a member name "
                                             r"must not contain '\.\.' components$"):
            save(buf, **{"../x": np.arange(3)})
        assert buf.getvalue() == b""
        path = tmp_path / "f.npz"
        with open(path, "wb") as named:
            with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: a member name "
                                                 f"must not be empty$"):
                save(named, **{"": np.arange(3)})
        assert path.read_bytes() == b""


def test_bytes_values_become_raw_members_of_exactly_their_name(tmp_path):
    path = tmp_path / "m.npz"
    mmnpz.savez(path, x=np.arange(3), **{"meta.json": b'{"k": 1}'})
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["meta.json", "x.npy"]
        assert z.read("meta.json") == b'{"k": 1}'
    assert mmnpz.load(path)["meta.json"] == b'{"k": 1}'
    assert np.load(path)["meta.json"] == b'{"k": 1}'  # numpy gives non-.npy members as bytes
    with mmnpz.NpzWriter(tmp_path / "w.npz", "w", compresslevel=6) as w:
        w.write("notes.txt", bytearray(b"hello " * 100))
        w.write_bytes("raw", memoryview(b"abc"))
    with zipfile.ZipFile(tmp_path / "w.npz") as z:
        assert z.read("notes.txt") == b"hello " * 100
        assert z.getinfo("notes.txt").compress_type == zipfile.ZIP_DEFLATED
        assert z.read("raw") == b"abc"


def test_archive_comments_are_written_and_read(tmp_path):
    path = tmp_path / "c.npz"
    with mmnpz.NpzWriter(path, "w", comment=b"made by a test") as w:
        w.write("a", np.arange(3))
    assert mmnpz.load(path).comment == b"made by a test"
    assert zipfile.ZipFile(path).comment == b"made by a test"
    with mmnpz.NpzWriter(path, "a") as w:  # appending keeps the comment
        w.write("b", np.arange(2))
    assert zipfile.ZipFile(path).comment == b"made by a test"
    with mmnpz.NpzWriter(path, "a", comment=b"new") as w:
        w.write("c", np.arange(2))
    assert mmnpz.load(path).comment == b"new"
    mmnpz.savez(path, x=np.arange(2), comment=b"from savez")
    assert zipfile.ZipFile(path).comment == b"from savez"
    z = tmp_path / "z.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.comment = b"zipfile's"
        f.writestr("x.npy", b"")
    assert mmnpz.load(z).comment == b"zipfile's"
    assert mmnpz.load(path.parent / "c.npz").comment == b"from savez"
    np.savez(path, x=np.arange(2))
    assert mmnpz.load(path).comment == b""
    with pytest.raises(ValueError, match="65,535"):
        mmnpz.NpzWriter(tmp_path / "long.npz", "w", comment=b"x" * 65536)
    # A comment holding an end record made numpy read the archive as empty, and an append then
    # wrote a directory of its own members only: the others were lost.
    fake_end = b"PK\x05\x06" + bytes(18)
    for call, at in ((lambda: mmnpz.savez(path, y=[5], comment=b"ab" + fake_end), 2),
                     (lambda: mmnpz.NpzWriter(path, "a", comment=fake_end + b"tail"), 0)):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value).endswith(": the archive comment holds the end-of-directory "
                                     f"signature PK\\x05\\x06 (at its byte {at}): ZIP "
                                     "readers, numpy's among them, would take it for the "
                                     "archive's end record")
    assert np.load(path).files == ["x"]  # as it was


# ---- the package's namespace ----------------------------------------------------------------

def test_the_package_exposes_only_its_api_and_submodules():
    import types
    public = {n for n in dir(mmnpz) if not n.startswith("__")}
    modules = {n for n in public if isinstance(getattr(mmnpz, n), types.ModuleType)}
    assert public - modules == set(mmnpz.__all__)
    assert all(getattr(mmnpz, n).__name__.startswith("mmnpz.") for n in modules)
    assert "savez_compressed" in mmnpz.__all__


def test_max_header_size_passes_short_headers_behind_large_alignment_padding(tmp_path):
    path = tmp_path / "aligned.npz"
    with mmnpz.NpzWriter(path, "w", align=65536) as w:
        for i in range(3):
            w.write(f"x{i}", np.arange(5 + i))
    reader = mmnpz.load(path)
    for i in range(3):
        assert isinstance(reader[f"x{i}"], np.memmap)
        assert_same_array(reader[f"x{i}"], np.load(path)[f"x{i}"])


def test_a_reader_not_opened_from_a_path_cannot_be_pickled(npz):
    with open(npz, "rb") as f:
        with pytest.raises(TypeError, match="not opened from a path"):
            pickle.dumps(mmnpz.load(f))
    with pytest.raises(TypeError, match="not opened from a path"):
        pickle.dumps(mmnpz.load(npz.read_bytes()))
    # It pickled, and its copy was refused as a second writer when unpickled (in a worker of a
    # multiprocessing pool: a task that never came back).
    with mmnpz.load(npz, "r+") as edited:
        for copy_it in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=f"^an 'r\\+' reader of {re.escape(str(npz))} "
                                                "cannot be pickled or copied: it holds the "
                                                "archive's writers' lock; open it where it is "
                                                "used$"):
                copy_it(edited)
    assert pickle.loads(pickle.dumps(mmnpz.load(npz, None))).mmap_mode is None


@pytest.mark.parametrize("encoding", ["latin-1", "utf-8"])
def test_a_text_mode_file_object_is_refused_clearly(npz, encoding):
    # In UTF-8 (the usual default), reading the archive as text was a UnicodeDecodeError.
    with open(npz, "r", encoding=encoding) as f:
        with pytest.raises(TypeError, match=f"^{re.escape(str(npz))}: the file is open in text "
                                            r"mode \(open the file in binary mode\)$"):
            mmnpz.load(f)
        # NpzReader mapped the text file's descriptor: it is refused as load() refuses it.
        with pytest.raises(TypeError, match=f"^{re.escape(str(npz))}: the file is open in text "
                                            r"mode \(open the file in binary mode\)$"):
            mmnpz.NpzReader(f)


def test_errors_from_a_file_object_name_its_file(tmp_path, npz):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with open(bad, "rb") as f:
        with pytest.raises(mmnpz.FormatError) as e:
            mmnpz.load(f)
    assert e.value.path == str(bad) and str(bad) in str(e.value)


def test_a_file_object_stays_readable_after_its_file_is_deleted(tmp_path, arrays):
    path = tmp_path / "gone.npz"
    np.savez(path, **arrays)
    with open(path, "rb") as f:
        os.unlink(path)
        assert_same_array(mmnpz.load(f)["a"], arrays["a"])


def test_an_array_passed_as_comment_or_compresslevel_is_refused_not_written(tmp_path):
    with pytest.raises(TypeError, match="no array named 'comment'"):
        mmnpz.savez(tmp_path / "a.npz", comment=np.arange(3))
    with pytest.raises(ValueError, match="no array named 'compresslevel'"):
        mmnpz.savez_compressed(tmp_path / "b.npz", compresslevel=np.arange(3))
    with pytest.raises(TypeError, match="comment must be bytes, not str"):
        mmnpz.NpzWriter(tmp_path / "c.npz", comment="text")


def test_an_archive_after_other_data_in_a_file_object_reads_as_numpy_reads_it(tmp_path, npz,
                                                                              arrays):
    path = tmp_path / "prefixed.bin"
    path.write_bytes(b"some header of another format\n" + npz.read_bytes())
    with open(path, "rb") as f:
        f.seek(len(b"some header of another format\n"))
        want = np.load(f)
        f.seek(len(b"some header of another format\n"))
        reader = mmnpz.load(f)
        for name in arrays:
            assert_same_array(reader[name], want[name])


def test_files_is_numpys_list_whenever_it_is_first_asked_for(npz):
    """`files` is made on first use (opening does not build a str per member), and is
    numpy's list however the reader was used before: not at all, items first, or closed."""
    with np.load(npz) as f:
        want = f.files
    fresh = mmnpz.load(npz)
    assert len(fresh) == len(want) and list(fresh) == want
    assert fresh.files == want and fresh.files is fresh.files
    items_first = mmnpz.load(npz)
    items_first["b"], items_first["a.npy"]
    assert sorted(items_first.arrays) == ["a", "b"]  # keyed as numpy's files are
    assert items_first.files == want
    closed = mmnpz.load(npz)
    closed.close()
    assert closed.files == want and repr(closed).endswith("closed>")


def test_files_is_left_out_of_the_cycle_collectors_passes(npz):
    """A list of a million names, tracked, was traversed by each collection of its
    generation (14 ms for the first young one: a pause every few hundred first accesses).
    `files` is untracked, and stays an ordinary list."""
    import gc

    with np.load(npz) as f:
        want = f.files
    files = mmnpz.load(npz).files
    assert not gc.is_tracked(files)
    assert files == want and type(files) is list
    files.append("extra")  # still a list to change; an item that could make a cycle tracks it
    assert files[-1] == "extra"


def _archive_bytes():
    inner = io.BytesIO()
    np.savez(inner, secret=np.arange(3))
    return inner.getvalue()


def test_a_npy_holding_the_bytes_of_an_archive_loads_as_its_array_as_numpy(tmp_path):
    """Its end record is found, after leading bytes; the .npy magic decides, as in numpy."""
    path = tmp_path / "holds_zip.npy"
    np.save(path, np.frombuffer(_archive_bytes(), np.uint8))
    want = np.load(path)
    for mode in ("r", None):
        got = mmnpz.load(path, mmap_mode=mode)
        assert isinstance(got, np.ndarray), (mode, type(got))
        assert_same_array(got, want)
    with open(path, "rb") as f:
        assert_same_array(mmnpz.load(f), want)


def test_a_pickle_holding_the_bytes_of_an_archive_loads_as_numpy_loads_it(tmp_path):
    path = tmp_path / "holds_zip.pkl"
    value = {"name": "x", "blob": _archive_bytes()}
    with open(path, "wb") as f:
        pickle.dump(value, f, protocol=4)
    assert np.load(path, allow_pickle=True) == value
    assert mmnpz.load(path, allow_pickle=True) == value
    with open(path, "rb") as f:
        assert mmnpz.load(f, allow_pickle=True) == value
    with pytest.raises(ValueError, match="Cannot load file containing pickled data"):
        np.load(path)
    with pytest.raises(ValueError, match=re.escape(f"{path}: Cannot load file containing "
                                                   "pickled data when allow_pickle=False")):
        mmnpz.load(path)
    with open(path, "rb") as f, pytest.raises(ValueError, match="Cannot load file containing "
                                                                "pickled data"):
        mmnpz.load(f)


def test_an_archive_after_bytes_that_are_no_npy_nor_pickle_still_opens(tmp_path, npz, arrays):
    path = tmp_path / "self_extracting.bin"
    path.write_bytes(b"#!/bin/sh\nexit 0\n" + npz.read_bytes())
    reader, want = mmnpz.load(path), np.load(npz)
    assert reader.files == want.files and set(want.files) == set(arrays)
    for name in arrays:
        assert_same_array(reader[name], want[name])


@pytest.mark.parametrize("mode", ["r", "c", None])
def test_arrays_saved_one_after_another_in_a_file_load_one_after_another(tmp_path, mode):
    """np.save(f, a); np.save(f, b) is read back by loading from the same file object twice:
    a memmap'd .npy leaves the file after its array, as numpy's read does."""
    path = tmp_path / "seq.npy"
    with open(path, "wb") as f:
        np.save(f, np.arange(3))
        np.save(f, np.arange(10, 15.0))
        np.save(f, np.zeros((0, 2), np.int8))
    with open(path, "rb") as f:
        got = [mmnpz.load(f, mmap_mode=mode) for _ in range(3)]
        assert f.read() == b""
    with open(path, "rb") as f:
        want = [np.load(f) for _ in range(3)]
    for g, w in zip(got, want):
        assert_same_array(g, w)


def test_a_key_utf8_cannot_encode_is_no_member_as_in_numpy(npz):
    """A lone surrogate (os.fsdecode's spelling of undecodable bytes) names no member."""
    key = "\udc81"
    for z in (np.load(npz), mmnpz.load(npz)):
        with pytest.raises(KeyError, match="is not a file in the archive"):
            z[key]
        assert key not in z and z.get(key, 0) == 0


def test_read_only_items_carry_their_file_offset_and_mode_as_numpys_memmaps(npz, arrays):
    """As np.load(a .npy, mmap_mode="r") gives them, and as the "c" items of mmnpz."""
    reader, data = mmnpz.load(npz), npz.read_bytes()
    copy_on_write = mmnpz.load(npz, "c")
    for name in arrays:
        item = reader[name]
        if not isinstance(item, np.memmap):
            continue  # deflated members are ordinary arrays
        assert (item.filename, item.mode) == (os.path.abspath(npz), "r")
        assert data[item.offset:item.offset + item.nbytes] == item.tobytes(order="A")
        other = copy_on_write[name]
        assert (item.filename, item.offset) == (other.filename, other.offset)
    assert isinstance(reader["a"], np.memmap)
