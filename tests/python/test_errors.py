"""Errors: OSError subclasses for the OS, KeyError for a missing member, mmnpz.FormatError (a
ValueError with .path, .member and .offset) for a corrupt file; verify() and info()."""

import errno
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import mmnpz
from mmnpz import FormatError


@pytest.fixture
def npz(tmp_path):
    path = tmp_path / "e.npz"
    np.savez(path, a=np.arange(1000, dtype="<i8"), b=np.ones((10, 10), dtype=">f4"))
    return path


def npy_start(raw, member):
    """File offset of the .npy magic of a member in raw archive bytes."""
    return raw.index(b"\x93NUMPY", raw.index(member.encode()))


def test_format_error_is_a_value_error_exported_by_the_package():
    assert issubclass(FormatError, ValueError)
    assert mmnpz.FormatError is mmnpz._mmnpz.FormatError


def test_a_missing_file_raises_file_not_found_error(tmp_path):
    path = tmp_path / "nope.npz"
    with pytest.raises(FileNotFoundError) as e:
        mmnpz.load(path)
    assert e.value.filename == str(path)


def test_a_directory_raises_is_a_directory_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        mmnpz.load(tmp_path)


def test_a_missing_member_raises_key_error(npz):
    reader = mmnpz.load(npz)
    for key in ("c", "a.npy.npy", "A"):
        with pytest.raises(KeyError):
            reader[key]
        with pytest.raises(KeyError):
            reader.info(key)
        with pytest.raises(KeyError):
            reader.verify(key)
        with pytest.raises(KeyError):
            reader.load(key)


@pytest.mark.parametrize("keep", [0, 21, 0.5, -1])
def test_a_truncated_archive_raises_format_error_naming_the_file(npz, keep):
    raw = npz.read_bytes()
    keep = int(len(raw) * keep) if isinstance(keep, float) else keep % len(raw)
    npz.write_bytes(raw[:keep])
    with pytest.raises(FormatError) as e:
        mmnpz.load(npz)
    assert e.value.path == str(npz)
    assert e.value.member == ""
    assert e.value.offset is None or 0 <= e.value.offset <= keep
    assert str(npz) in str(e.value)


def test_a_file_that_is_not_a_zip_raises_format_error(tmp_path):
    path = tmp_path / "text.npz"
    path.write_bytes(b"this is not an archive\n" * 10)
    with pytest.raises(FormatError):
        mmnpz.load(path)
    np.save(tmp_path / "plain.npy", np.arange(3))
    with pytest.raises(FormatError):  # NpzReader reads archives only; load() reads .npy too
        mmnpz.NpzReader(tmp_path / "plain.npy")


def test_a_damaged_npy_header_raises_format_error_naming_member_and_offset(npz):
    raw = bytearray(npz.read_bytes())
    start = npy_start(raw, "b.npy")
    header = raw.index(b"'descr'", start)
    raw[header:header + 7] = b"'dexcr'"
    npz.write_bytes(raw)
    reader = mmnpz.load(npz)  # opening reads the directory only
    assert reader["a"].sum() == 999 * 1000 // 2
    for use in (lambda: reader["b"], lambda: reader.info("b")):
        with pytest.raises(FormatError) as e:
            use()
        assert e.value.path == str(npz)
        assert e.value.member == "b.npy"
        assert start <= e.value.offset < len(raw)
        assert "b.npy" in str(e.value)
    assert set(reader.verify()) == {"b.npy"}


def test_a_header_byte_that_is_not_utf8_is_escaped_in_a_format_error(npz):
    # The message quoted the raw byte: turning it into a str raised UnicodeDecodeError instead.
    raw = bytearray(npz.read_bytes())
    start = npy_start(raw, "b.npy")
    brace = raw.index(b"{", start)
    raw[brace] = 0x84
    npz.write_bytes(raw)
    reader = mmnpz.load(npz)
    for use in (lambda: reader["b"], lambda: reader.info("b"), lambda: mmnpz.Dataset(npz)):
        with pytest.raises(FormatError) as e:
            use()
        assert e.value.member == "b.npy" and e.value.offset == brace
        assert str(e.value) == (f"{npz}: member 'b.npy' at offset {brace}: bad .npy header: "
                                "unexpected character '\\x84'")


def test_a_named_pipe_is_refused_at_once_with_or_without_a_writer(npz, tmp_path):
    """A pipe cannot be mapped, and opening one for reading would wait for a writer (the
    fallback that looks at the magic once opened it a second time, when its writer had gone)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = ("import sys, mmnpz\ntry:\n    mmnpz.load(sys.argv[1])\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    def load():
        return subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True,
                              text=True, timeout=60).stdout

    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer, holding bytes of an archive
    try:
        os.write(writer, npz.read_bytes()[:4096])
        assert load() == f"OSError {errno.ENODEV}\n"
    finally:
        os.close(writer)
    assert load() == f"OSError {errno.ENODEV}\n"


def test_a_member_running_past_its_room_raises_format_error(npz):
    raw = bytearray(npz.read_bytes())
    entry = raw.index(b"PK\x01\x02")  # central directory entry of a.npy
    raw[entry + 20:entry + 28] = struct.pack("<II", 0x7FFFFFF0, 0x7FFFFFF0)
    npz.write_bytes(raw)
    with pytest.raises(FormatError) as e:
        mmnpz.load(npz)["a"]
    assert e.value.path == str(npz)
    assert e.value.member == "a.npy"
    assert isinstance(e.value.offset, int)


def test_data_running_into_the_next_local_header_is_refused_as_zipfile_refuses_it(npz):
    """Overlapped entries (a zip bomb's trick): b.npy's entry points 4 bytes before the end of
    a.npy's data. The directory's own check cannot see it (it knows the local header's fixed
    part only); numpy, through zipfile, refuses a.npy."""
    raw = bytearray(npz.read_bytes())
    b_entry = raw.index(b"PK\x01\x02", raw.index(b"PK\x01\x02") + 1)
    b_local = struct.unpack_from("<I", raw, b_entry + 42)[0]
    struct.pack_into("<I", raw, b_entry + 42, b_local - 4)
    npz.write_bytes(raw)
    with pytest.raises(zipfile.BadZipFile, match="Overlapped entries: 'a.npy'"):
        np.load(npz)["a"]
    a_data = npy_start(bytes(raw), "a.npy")
    with pytest.raises(FormatError) as e:
        mmnpz.load(npz)["a"]
    assert str(e.value) == (f"{npz}: member 'a.npy' at offset {a_data}: data [{a_data}, "
                            f"{b_local}) runs into the local header of member 'b.npy' at "
                            f"{b_local - 4}")


def test_verify_names_the_member_whose_data_byte_changed(npz):
    reader = mmnpz.load(npz)
    assert reader.verify() == {}
    assert reader.verify("a") is None and reader.verify("b.npy") is None
    offset = reader.info("a").offset + 100
    reader.close()
    raw = bytearray(npz.read_bytes())
    raw[offset] ^= 0x40
    npz.write_bytes(raw)
    reader = mmnpz.load(npz)
    failures = reader.verify()
    assert list(failures) == ["a.npy"]
    assert "a.npy" in failures["a.npy"] and "CRC" in failures["a.npy"]
    assert reader.verify("b") is None
    with pytest.raises(FormatError) as e:
        reader.verify("a")
    assert e.value.path == str(npz) and e.value.member == "a.npy"
    assert isinstance(e.value.offset, int)
    assert reader["a"][12] != 12  # the data itself still maps: verify() is the check


def test_info_describes_a_stored_array(npz):
    reader = mmnpz.load(npz)
    info = reader.info("b")
    assert isinstance(info, mmnpz.MemberInfo)
    assert info.name == "b.npy" and info.kind == "array"
    assert info.dtype == np.dtype(">f4") and info.shape == (10, 10)
    assert info.fortran_order is False and info.compressed is False
    assert info.nbytes == 400
    data = reader.mmap[info.offset:info.offset + 400].tobytes()
    assert data == np.ones((10, 10), ">f4").tobytes()
    assert info.offset % info.alignment == 0
    assert info.alignment == 65536 or info.offset % (2 * info.alignment) != 0
    assert reader.info("b.npy") == info


def test_info_describes_a_fortran_array(tmp_path):
    np.savez(tmp_path / "f.npz", f=np.asfortranarray(np.zeros((3, 4), "<i2")))
    info = mmnpz.load(tmp_path / "f.npz").info("f")
    assert info.fortran_order is True and info.shape == (3, 4) and info.dtype == np.int16


def test_info_describes_deflated_and_non_array_members(mixed_npz):
    reader = mmnpz.load(mixed_npz)
    packed = reader.info("packed")
    assert packed.kind == "array" and packed.compressed is True
    assert packed.dtype == np.dtype(">f8") and packed.shape == (1000,)
    assert packed.fortran_order is False and packed.nbytes == 8000
    assert packed.offset is None and packed.alignment is None
    assert reader.info("packed_f").fortran_order is True
    for key, compressed in (("readme.txt", False), ("meta.json", True)):
        info = reader.info(key)
        assert info.kind == "bytes" and info.compressed is compressed
        assert info.nbytes == len(reader[key])
        assert info.dtype is info.shape is info.offset is info.alignment is None
    objects = reader.info("objects")
    assert objects.kind == "object" and objects.dtype is None and objects.offset is None


def test_a_dtype_mismatch_raises_type_error(tmp_path):
    with mmnpz.NpzWriter(tmp_path / "t.npz") as writer:
        with pytest.raises(TypeError):
            with writer.begin("s", "<i4", (2,)) as stream:
                stream.write(np.zeros(2, "<i8"))


def test_a_name_with_nul_is_refused_with_the_nul_spelled_out(tmp_path):
    path = tmp_path / "nul.npz"
    with mmnpz.NpzWriter(path) as w:
        with pytest.raises(ValueError) as info:
            w.write("a\x00b", [1])
    assert str(info.value) == f"{path}: member 'a\\0b': a member name must not hold NUL"


def test_preload_skips_pickled_arrays_which_raise_only_on_access(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, a=np.arange(3), o=np.array([{"x": 1}], dtype=object))
    reader = mmnpz.load(path, preload=True)
    assert sorted(reader.arrays) == ["a"]
    with pytest.raises(ValueError, match="allow_pickle=False"):
        reader["o"]
    assert mmnpz.load(path, preload=True, allow_pickle=True)["o"][0] == {"x": 1}


def test_preload_skips_headers_over_max_header_size_which_raise_only_on_access(tmp_path):
    path = tmp_path / "wide.npz"
    wide = np.zeros(2, [(f"f{i:04d}", "<i4") for i in range(600)])  # a header of some 10 KB
    np.savez(path, wide=wide, x=np.arange(3), raw=np.frombuffer(b"bytes", np.uint8))
    reader = mmnpz.load(path, preload=True)
    assert sorted(reader.arrays) == ["raw", "x"]
    with pytest.raises(ValueError, match=r"Header info length \(\d+\) is large"):
        reader["wide"]
    with pytest.raises(ValueError, match=r"Header info length \(\d+\) is large"):
        np.load(path)["wide"]
    assert mmnpz.load(path, preload=True, max_header_size=20000)["wide"].dtype == wide.dtype


def test_mmap_mode_none_gives_writable_copies_as_numpy(tmp_path):
    path = tmp_path / "none.npz"
    np.savez(path, a=np.arange(3))
    a = mmnpz.load(path, None)["a"]
    assert a.flags.writeable and type(a) is np.ndarray
