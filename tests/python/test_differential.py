"""Random archives against numpy: mutated ones read by both, written ones read back, cut ones
recovered.

Seeded, so each run checks the same few thousand archives; a failure names the case, whose
archive is kept in pytest's tmp_path.
"""

import io
import random
import shutil
import struct
import subprocess
import warnings
import zipfile

import numpy as np
import pytest

import mmnpz
from conftest import assert_same_array, is_fortran


def _source_archive(rng):
    """An archive of 1 to 4 members written by numpy, deflated about a third of the time."""
    kinds = [np.arange(7, dtype="<i4"), np.ones((2, 3), ">f8"), np.array(["ab", "c"]),
             np.zeros((0, 3), "u1"), np.array(3.5), np.arange(6, dtype="c8").reshape(2, 3).T,
             np.array([(1, 2.0)], dtype=[("a", "i2"), ("b", "<f4")]), np.array([True, False])]
    out = io.BytesIO()
    save = np.savez_compressed if rng.random() < 0.3 else np.savez
    save(out, **{f"m{k}": rng.choice(kinds) for k in range(rng.randint(1, 4))})
    return bytearray(out.getvalue())


def _mutate(rng, data):
    """1 to 4 byte changes, deletions or insertions at random places."""
    for _ in range(rng.randint(1, 4)):
        at, op = rng.randrange(len(data)), rng.random()
        if op < 0.6:
            data[at] = rng.randrange(256)
        elif op < 0.8:
            del data[at:at + rng.randint(1, 8)]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return data


def _read_all(load, path):
    """("open failed", exception) or {key: array or exception} of every member."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            archive = load(path)
            out = {}
            for key in list(archive.keys()):
                try:
                    out[key] = np.asarray(archive[key])
                except Exception as e:  # noqa: BLE001 - compared below
                    out[key] = e
            return out
    except Exception as e:  # noqa: BLE001 - compared below
        return ("open failed", e)


def test_mutated_archives_give_numpys_values_or_an_error_and_never_others(tmp_path, monkeypatch):
    # A mapped member's CRC-32 is not checked (README: zero-copy views), so numpy's is turned
    # off too: what is compared is the values each library decodes from the same bytes.
    monkeypatch.setattr(zipfile.ZipExtFile, "_update_crc", lambda self, newdata: None)
    rng = random.Random(20261128)
    compared = 0
    for case in range(2000):
        path = tmp_path / f"case{case}.npz"
        path.write_bytes(_mutate(rng, _source_archive(rng)))
        want = _read_all(lambda p: np.load(p, allow_pickle=False), path)
        got = _read_all(mmnpz.load, path)
        where = f"case {case} ({path})"
        if isinstance(got, tuple):
            assert isinstance(got[1], mmnpz.FormatError), f"{where}: {got[1]!r}"
        if isinstance(want, tuple) or isinstance(got, tuple):
            path.unlink()
            continue
        assert list(got) == list(want), where
        for key, value in want.items():
            if isinstance(value, np.ndarray) and isinstance(got[key], np.ndarray):
                assert_same_array(got[key], value, f"{where}: member {key!r}")
                compared += 1
            elif isinstance(got[key], Exception):
                # mmnpz is stricter where numpy (its CRC-32 off) reads: a deflated member's
                # CRC-32, sizes that disagree; never a crash or another kind of error
                assert isinstance(got[key], mmnpz.FormatError), \
                    f"{where}: member {key!r}: {got[key]!r}"
            else:
                pytest.fail(f"{where}: member {key!r}: numpy refused it ({value!r}), "
                            f"mmnpz read {got[key]!r}")
        path.unlink()
    assert compared > 1000  # the mutations leave most members readable by both


_DTYPES = ["<i1", ">i2", "<u4", ">f8", "<f2", "c16", "?", "S5", "U3", "<M8[s]", ">m8[ms]", "V4",
           [("a", "<i2"), ("b", ">f4", (2,))], (np.int16, (2, 3)), [(("title", "t"), "<i4")],
           [("n", [("i", "u1")])]]
_NAMES = ["x", "é", "a/b", "sp ace", "x.npy", "UPPER", "m0", "m1"]


def _random_array(rng):
    dtype = np.dtype(rng.choice(_DTYPES))
    shape = tuple(rng.randint(0, 4) for _ in range(rng.randint(0, 3)))
    array = np.zeros(shape, dtype)
    if array.nbytes:
        noise = bytes(rng.randrange(256) for _ in range(array.nbytes))
        array = np.frombuffer(noise, np.uint8).view(array.dtype).reshape(array.shape).copy()
    if rng.random() < 0.3 and array.ndim >= 2:
        array = array.T  # Fortran order
    if rng.random() < 0.2 and array.ndim >= 1:
        array = array[::-1]  # not contiguous: written through a copy
    return array


def _as_saved(array):
    """What np.load gives back for `array`: Fortran order kept, anything else in C order."""
    return array if is_fortran(array) else array.copy(order="C")  # 0-d stays 0-d


def test_random_arrays_written_by_savez_read_back_as_written_by_numpy_zipfile_and_unzip(tmp_path):
    rng = random.Random(1128)
    unzip = shutil.which("unzip")
    for case in range(200):
        arrays = {}
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(_NAMES)
            other = {"x": "x.npy", "x.npy": "x"}.get(name)
            if other in arrays:
                continue  # numpy's key x.npy would be the member of x
            arrays[name] = _random_array(rng)
        path = tmp_path / f"case{case}.npz"
        save = mmnpz.savez_compressed if rng.random() < 0.3 else mmnpz.savez
        save(path, **arrays)
        where = f"case {case} ({path}, {save.__name__})"
        loaded = mmnpz.load(path)
        with np.load(path) as expected:
            assert sorted(expected.files) == sorted(loaded.files) == sorted(arrays), where
            for name, array in arrays.items():
                assert_same_array(expected[name], _as_saved(array), f"{where}: numpy: {name}")
                assert_same_array(np.asarray(loaded[name]), _as_saved(array),
                                  f"{where}: mmnpz: {name}")
        with zipfile.ZipFile(path) as z:
            assert z.testzip() is None, where
        if unzip:
            done = subprocess.run([unzip, "-tq", str(path)], capture_output=True, text=True)
            assert done.returncode == 0, f"{where}: {done.stdout}{done.stderr}"
        path.unlink()


def _write_by(rng, path, arrays):
    """Writes `arrays` as one of five writers would: mmnpz or numpy, stored or deflated, or half
    by numpy and the rest appended by mmnpz."""
    kind = rng.choice(["mmnpz", "mmnpz deflated", "numpy", "numpy deflated", "appended"])
    if kind == "appended":
        items = list(arrays.items())
        half = len(items) // 2
        np.savez(path, **dict(items[:half]))
        with mmnpz.NpzWriter(path, "a") as w:
            for name, array in items[half:]:
                w.write(name, array)
    else:
        save = {"mmnpz": mmnpz.savez, "mmnpz deflated": mmnpz.savez_compressed,
                "numpy": np.savez, "numpy deflated": np.savez_compressed}[kind]
        save(path, **arrays)
    return kind


def test_recover_restores_every_member_written_wholly_before_a_random_cut(tmp_path):
    rng = random.Random(2611)
    restored = 0
    for case in range(300):
        arrays = {f"m{k}": np.arange(rng.randint(0, 3000), dtype=rng.choice(["<f4", ">i8", "u1"]))
                  for k in range(rng.randint(1, 8))}
        path = tmp_path / f"case{case}.npz"
        kind = _write_by(rng, path, arrays)
        whole = path.read_bytes()
        ends = {}  # where each member's bytes end: local header, name, extra field, data
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                at = info.header_offset
                name_len, extra_len = struct.unpack("<HH", whole[at + 26:at + 30])
                ends[info.filename[:-4]] = at + 30 + name_len + extra_len + info.compress_size
        cut = rng.randrange(len(whole))
        path.write_bytes(whole[:cut])
        where = f"case {case} ({kind}, cut at {cut} of {len(whole)})"
        try:
            mmnpz.recover(path)
        except mmnpz.FormatError:
            pass  # nothing to restore: checked below
        kept = [name for name, end in ends.items() if end <= cut]
        if kept:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loaded = mmnpz.load(path)
            with np.load(path) as expected:
                for name in kept:
                    assert_same_array(expected[name], arrays[name], f"{where}: numpy: {name}")
                    assert_same_array(np.asarray(loaded[name]), arrays[name], f"{where}: {name}")
            restored += len(kept)
        path.unlink()
    assert restored > 300


# .npy headers as other writers (or hands) may spell them. Left out, as mmnpz refuses them
# where numpy reads them: datetime divisors whose numpy reading is garbage ('<M8[W/11]' is
# 0 years, '<M8[999999999Y/2]' a wrapped int).
_HEADER_DESCRS = [
    "'<f4'", "'>i2'", "'|u1'", "'<c16'", "'|b1'", "'|S3'", "'<U2'", "'|V4'", "'<M8[s]'",
    "'<m8[D]'", "[('a', '<i2'), ('b', '>f4')]", "[('a', '<i2', (2,))]", "[(('t', 'a'), '<i4')]",
    "[('', '|V2'), ('x', '<u2')]", "'f4'", "'i4'", "'<f8 '", "' <f8'", "'=f8'", "'<F8'", "'<i'",
    "'<f16'", "'<f2'", "'<e'", "'?'", "'O'", "'|O'", "'<U0'", "'|S0'", "'|V0'", "'|f8'", "'b'",
    "'<g'", "'c'", "'a3'", "[('a','<i4'),('a','<i4')]", "'<M8'", "'<M8[3s]'", "\"<f4\"",
    "u'<f4'", "b'<f4'", "[('a', [('b', '<i2')])]", "{'names':['a'],'formats':['<i4']}",
    "[]", "[('a', [], (2,)), ('b', '|u1')]", "('<f4', ())", "('<f4', 1)", "('<f4', (2,))",
    "[('a', '<f4', 1)]", "[('a', '<f4', 2)]", "[('a', ('<f4', (2,)))]",
    "[('a', ('<f4', (2,)), (3,))]", "[('a', (('<i2', (2,)), (3,)), (2,)), ('b', '<i2')]",
    "[('a', ('<f4', ()), (3,))]", "[('a', ('<f4', (2,)), 1)]", "[('', ('|V1', (2,)), (3,))]",
    "'<M8[us/2]'", "'<m8[10s/2]'", "'<M8[Y/5]'", "'<M8[s/3]'", "'<M8[generic/2]'",
    "('<f4', (), 3)", "('<f4', (2,), 'x', None)", "('<f4',)", "[('a', ('<i2', (2,), 1))]",
    "[('a', '<f4', (2,), 3)]"]
_HEADER_SHAPES = [
    "()", "(3,)", "(3)", "3", "(2, 3)", "(2,3,)", "(0,)", "(0, 5)", "(1_0,)", "(0x3,)", "(0o3,)",
    "(0b11,)", "(True,)", "(3.0,)", "(-1,)", "[3]", "(2**3,)", "( 3 , )", "(03,)", "(00,)",
    "(3L,)", "(3l,)", "(+3,)", "(18446744073709551616,)", "(1__0,)", "(1_,)", "(3,),"]
_HEADER_ORDERS = ["False", "True", "0", "false", "None", "'False'"]


def _npy_with_header(rng):
    keys = [f"'descr': {rng.choice(_HEADER_DESCRS)}",
            f"'fortran_order': {rng.choice(_HEADER_ORDERS)}",
            f"'shape': {rng.choice(_HEADER_SHAPES)}"]
    if rng.random() < 0.3:
        rng.shuffle(keys)
    if rng.random() < 0.05:
        keys.append("'extra': 1")
    body = ("{" + rng.choice([", ", ",", " , "]).join(keys) + rng.choice([", }", "}", ",}"]))
    version = rng.choice([1, 2, 3])
    text = body.encode("latin1" if version < 3 else "utf8")
    prefix = 10 if version == 1 else 12
    text += b" " * ((prefix + len(text) + 1 + 63) // 64 * 64 - prefix - len(text) - 1) + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, 24, 48, 96])))
    return body, version, b"\x93NUMPY" + bytes([version, 0]) + length + text + data


@pytest.mark.filterwarnings("ignore::FutureWarning")  # numpy 1.x reads "(type, 1)" as type
def test_npy_headers_spelled_in_every_way_read_as_numpy_reads_them_or_not_at_all(tmp_path):
    rng = random.Random(2811)
    read = 0
    for case in range(1500):
        body, version, npy = _npy_with_header(rng)
        path = tmp_path / f"case{case}.npz"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.npy", npy)
        where = f"case {case} ({path}): v{version} {body}"
        try:
            want = np.load(path, allow_pickle=False)["x"]
        except Exception:  # noqa: BLE001 - numpy refused: mmnpz must too
            want = None
        try:
            got = np.asarray(mmnpz.load(path)["x"])
        except ValueError as e:  # FormatError, or numpy's own refusal of object arrays
            assert want is None, f"{where}: numpy read it, mmnpz said {e!r}"
        else:
            assert want is not None, f"{where}: numpy refused it, mmnpz read {got!r}"
            assert_same_array(got, want, where)
            read += 1
        path.unlink()
    assert read > 100  # most spellings are refused by both
