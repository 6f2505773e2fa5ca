"""Shared fixtures of the mmnpz pytest suite.

Every comparison is with numpy itself: an item is "the same" as numpy's when it has the same
type, dtype (byte order included), shape, memory order and bit-identical values (field by
field for structured dtypes, whose padding numpy leaves uninitialised).

Environment (set by CTest): PYTHONPATH=<build>/python, where the built package lives, and
MMNPZ_FIXTURES=<build>/tests/fixtures, the archives written by tests/fixtures/make_fixtures.py
(tests that need them are skipped when it is unset).
"""

import io
import os
import shutil
import warnings
import zipfile

import numpy as np
import pytest

import mmnpz


def is_fortran(array):
    """Stored in Fortran order as numpy sees it (a 1-d or 0-d array is C order)."""
    return bool(array.flags.f_contiguous and not array.flags.c_contiguous)


def _assert_same_values(got, want, where):
    if want.dtype.names is not None:
        for name in want.dtype.names:  # compares fields, never padding bytes
            _assert_same_values(got[name], want[name], f"{where}[{name!r}]")
        return
    if want.dtype.kind in "biufc":
        assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), where
    # bit-exact: -0.0, NaN payloads, NaT, bytes after a NUL in 'S' and 'V' items
    assert got.tobytes() == want.tobytes(), where


def assert_same_array(got, want, where="array"):
    assert isinstance(got, np.ndarray), f"{where}: {type(got).__name__} is not an array"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    got_descr, want_descr = (np.lib.format.dtype_to_descr(a.dtype) for a in (got, want))
    assert got_descr == want_descr, f"{where}: descr {got_descr!r} != {want_descr!r}"
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    assert is_fortran(got) == is_fortran(want), f"{where}: memory order differs"
    _assert_same_values(got, want, where)


def assert_same_item(got, want, where="item"):
    """got (from mmnpz) is what numpy returned as want: bytes, an object array or an array."""
    if isinstance(want, bytes):
        assert type(got) is bytes and got == want, where
    elif want.dtype.hasobject:
        assert isinstance(got, np.ndarray) and got.dtype.hasobject, where
        assert got.shape == want.shape and got.tolist() == want.tolist(), where
    else:
        assert_same_array(got, want, where)


@pytest.fixture(name="assert_same")
def assert_same_fixture():
    """assert_same(got, want[, where]): got is what numpy returned as want."""
    return assert_same_item


@pytest.fixture
def fixtures_dir():
    """MMNPZ_FIXTURES (holding good/ and manifest.tsv); skips when it is not set."""
    path = os.environ.get("MMNPZ_FIXTURES")
    if not path or not os.path.isdir(os.path.join(path, "good")):
        pytest.skip("MMNPZ_FIXTURES is not set to the output of tests/fixtures/make_fixtures.py")
    return path


def _complex(real, imag, dtype):
    out = np.empty(real.shape, dtype)
    out.real, out.imag = real, imag
    return out


def make_sample_arrays():
    """Arrays of every dtype kind and byte order, in C, Fortran and strided layouts."""
    rng = np.random.default_rng(20240102)
    floats = np.array([0.0, -0.0, 1.5, np.inf, -np.inf, np.nan, 1e-310, 3.0e38])
    padded = np.dtype([("a", "u1"), ("b", "<i4"), ("c", "u1"), ("d", "<f8")], align=True)
    nested = np.dtype([("id", ">u2"), ("pos", [("x", "<f4"), ("y", ">f4")]),
                       ("m", "<f8", (2, 3)), ("s", "S3")])
    base = np.arange(7 * 11, dtype="<i4").reshape(7, 11)
    out = {
        "bool": rng.integers(0, 2, size=(3, 4)).astype("?"),
        "i1": np.array([-128, 0, 127], dtype="i1"),
        "u1": np.arange(256, dtype="u1"),
        "i2_be": np.array([-32768, -1, 0, 32767], dtype=">i2"),
        "u4_le": np.array([0, 1, 2**32 - 1], dtype="<u4"),
        "i8_be": np.array([-(2**63), 2**63 - 1, 12345], dtype=">i8"),
        "u8_le": np.array([0, 2**64 - 1], dtype="<u8"),
        "f2": floats[:5].astype("<f2"),
        "f4_be": floats.astype(">f4"),
        "f8_le": floats.astype("<f8"),
        "f8_be": floats.astype(">f8"),
        "c8_le": _complex(floats, floats[::-1], "<c8"),
        "c16_be": _complex(floats[::-1], floats, ">c16"),
        "S5": np.array([b"", b"abc", b"a\x00b", b"\xff" * 5], dtype="S5"),
        "U4_le": np.array(["", "naïve"[:4], "ℵ₀", "\U0001F600"], dtype="<U4"),
        "U4_be": np.array(["abcd", "スペ"], dtype=">U4"),
        "V8": np.frombuffer(rng.bytes(24), dtype="V8").copy(),
        "M8_ns": np.array(["2024-01-02T03:04:05.123456789", "NaT"], dtype="<M8[ns]"),
        "m8_s_be": np.array([0, -5, "NaT"], dtype=">m8[s]"),
        "M8_10ms": np.array([0, 1, "NaT"], dtype="<M8[10ms]"),
        "m8_generic": np.array([3, -4], dtype="<m8"),
        "struct_datetime": np.array([(5, 0.5), (-1, 2.0)], dtype=[("t", "<M8[us]"), ("x", "<f4")]),
        "struct_padded": np.array([(1, -2, 3, 0.5), (4, 5, 6, -1.0)], dtype=padded),
        "struct_nested": np.array([(1, (0.5, -0.5), np.arange(6.0).reshape(2, 3), b"xyz")] * 3,
                                  dtype=nested),
        "fortran_2d": np.asfortranarray(rng.standard_normal((5, 3))),
        "fortran_3d_be": np.asfortranarray(np.arange(24, dtype=">i2").reshape(2, 3, 4)),
        "transposed": base.T,
        "strided": base[::2, ::3],
        "reversed": np.arange(10.0)[::-1],
        "broadcast": np.broadcast_to(np.arange(4, dtype="<u2"), (3, 4)),
        "zero_d": np.array(2.5),
        "zero_d_U": np.array("ℵb", dtype="<U3"),
        "empty": np.zeros((0,), dtype="<f8"),
        "empty_3x0x2": np.zeros((3, 0, 2), dtype=">i4"),
        "one": np.array([[[7]]], dtype="<u2"),
    }
    return out


@pytest.fixture
def sample_arrays():
    """A fresh dict {name: array} of every dtype kind, byte order and layout."""
    return make_sample_arrays()


def npy_bytes(array, allow_pickle=False):
    """The .npy file numpy writes for array."""
    bio = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.lib.format.write_array(bio, np.asanyarray(array), allow_pickle=allow_pickle)
    return bio.getvalue()


@pytest.fixture
def mixed_npz(tmp_path):
    """An archive holding every member kind numpy's NpzFile knows, written with zipfile:
    stored and deflated .npy members, stored and deflated non-.npy members and a pickled
    object array. Returns its path."""
    path = tmp_path / "mixed.npz"
    stored, deflated = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED
    members = [
        ("a.npy", stored, npy_bytes(np.arange(12, dtype="<i4").reshape(3, 4))),
        ("fortran.npy", stored, npy_bytes(np.asfortranarray(np.arange(6.0).reshape(2, 3)))),
        ("packed.npy", deflated, npy_bytes(np.linspace(0, 1, 1000, dtype=">f8"))),
        ("packed_f.npy", deflated, npy_bytes(np.asfortranarray(np.ones((4, 5), "<c8")))),
        ("readme.txt", stored, b"not an array\n"),
        ("meta.json", deflated, b'{"k": [1, 2, 3]}' * 50),
        ("objects.npy", stored, npy_bytes(np.array([1, "two", None], dtype=object), True)),
        ("dir/sub.npy", stored, npy_bytes(np.array([True, False]))),
    ]
    with zipfile.ZipFile(path, "w") as zf:
        for name, method, data in members:
            zf.writestr(zipfile.ZipInfo(name, (2024, 1, 2, 3, 4, 6)), data, compress_type=method)
    return path


@pytest.fixture
def scratch_path(tmp_path):
    """tmp_path, deleted after the test: for files of tens of MB (pytest keeps tmp_path)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="session")
def big_archive(tmp_path_factory):
    """An archive of 8 stored members of 25 MiB (about 210 MB), written once per session."""
    path = tmp_path_factory.mktemp("big") / "big.npz"
    chunk = np.full(25 << 20, 7, dtype=np.uint8)
    with mmnpz.NpzWriter(path) as writer:
        for i in range(8):
            writer.write(f"m{i}", chunk)
    yield path
    path.unlink()
