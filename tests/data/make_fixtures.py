#!/usr/bin/python3
"""Generate the "good" .npz fixtures and the manifest the C++ tests compare against.

Usage:
    /usr/bin/python3 tests/data/make_fixtures.py OUTDIR [--check]

Needs only the standard library and numpy (Debian's python3-numpy, numpy 1.24). Output is
deterministic (fixed seeds, fixed ZIP timestamps) and idempotent: OUTDIR/good/ and
OUTDIR/manifest.tsv are deleted and rewritten; nothing else in OUTDIR is touched.
With --check the manifest is read back afterwards and every record is compared with what
numpy itself loads.

Manifest (OUTDIR/manifest.tsv): UTF-8, one record per line, fields separated by a single
TAB, no header line, no quoting or escaping (no name contains a TAB or newline). Fields may
be empty strings (the shape of a 0-d array, the hex data of an empty array). Records for an
archive appear together, in this order: `count`, `leading` (if any), `member` records in
central-directory order, then `lookup` records.

    count   <archive> <N>
        The central directory of <archive> holds N entries (duplicates included).
    leading <archive> <nbytes>
        nbytes of foreign data precede the first local header (a self-extracting stub).
    member  <archive> <index> <name> array <descr> <shape> <fortran> <nbytes> <data>
    member  <archive> <index> <name> bytes <nbytes> <data>
    member  <archive> <index> <name> object
        One entry of the central directory. <archive> is relative to OUTDIR (e.g.
        good/dtypes.npz), <index> is its 0-based position in the central directory,
        <name> the full ZIP member name (e.g. a.npy, dir/sub.npy, UTF-8 allowed).
        array:  a .npy member. <descr> is repr(numpy.lib.format.dtype_to_descr(dtype)),
                i.e. the descr literal exactly as numpy writes it in the header, quotes
                included: '<f4', '|V16', [('a', '<i4'), ('b', '>f8', (2,))]. <shape> is
                comma-separated decimal ints ("" for 0-d, "3" for (3,), "3,0,2").
                <fortran> is 1 when the data is stored in Fortran order, else 0.
                <nbytes> is the array's data size (prod(shape) * itemsize). <data> is the
                lowercase hex of the data bytes exactly as they lie in the file (after the
                header; trailing junk after them is not included), or
                "sha256:<lowercase hexdigest>" when nbytes > 4096.
        bytes:  a member that does not start with the .npy magic; numpy returns its raw
                (decompressed) content as bytes. <nbytes> and <data> as above.
        object: a pickled object array (cannot be memory-mapped; no further fields).
    lookup  <archive> <key> <index>
        numpy's NpzFile resolves <key> to central-directory entry <index>. Emitted for each
        distinct key of NpzFile.files and each full member name (so both "x" and "x.npy");
        with duplicate names numpy returns the last entry of that name.

For the archive with more than 65,535 members only the entries with index 0, 1, 65534,
65535, 65536 and the last one are listed (plus their lookups); its `count` line is exact.

How "what numpy sees" is obtained: np.load(path, allow_pickle=False,
max_header_size=2**31). Two deviations from plain np.load(path, allow_pickle=False):
  * max_header_size is raised because numpy refuses .npy headers over 10,000 bytes by
    default; the v2.0-header member needs ~80 KB.
  * np.load() only recognises a file as .npz when it starts with b'PK\\x03\\x04', so the
    archives with a leading stub are opened with numpy.lib.npyio.NpzFile (which is what
    np.load uses internally) instead.
"""

import argparse
import ast
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import time
import warnings
import zipfile

import numpy as np
from numpy.lib import format as npformat

HEX_LIMIT = 4096  # arrays/bytes larger than this are recorded as sha256
MAX_HEADER_SIZE = 2**31  # lets numpy read the v2.0 header member
NPY_MAGIC = b"\x93NUMPY"
FIXED_DATE = (2024, 1, 2, 3, 4, 6)  # timestamp of every member written with zipfile here
MANY_MEMBERS = 70_000
MANY_SAMPLE = (0, 1, 65534, 65535, 65536, MANY_MEMBERS - 1)


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------

def npy_bytes(arr, allow_pickle=False):
    """The .npy file numpy writes for arr (v1/v2/v3 chosen by numpy)."""
    bio = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Stored array in format 2.0/3.0" warnings
        npformat.write_array(bio, np.asanyarray(arr), allow_pickle=allow_pickle)
    return bio.getvalue()


def raw_npy(header_text, data, align=16, version=(1, 0)):
    """A hand-made .npy: header text (str, or bytes taken as they are) padded with spaces and
    '\\n' to a multiple of align."""
    enc = "utf-8" if version[0] == 3 else "latin-1"
    len_size = 2 if version[0] == 1 else 4
    hdr = header_text if isinstance(header_text, bytes) else header_text.encode(enc)
    fixed = len(NPY_MAGIC) + 2 + len_size
    total = fixed + len(hdr) + 1
    hdr += b" " * ((-total) % align) + b"\n"
    length = struct.pack("<H" if len_size == 2 else "<I", len(hdr))
    return NPY_MAGIC + bytes(version) + length + hdr + data


def zinfo(name, method=zipfile.ZIP_STORED):
    zi = zipfile.ZipInfo(name, FIXED_DATE)
    zi.compress_type = method
    zi.external_attr = 0o644 << 16
    return zi


def savez(path, members, compressed=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (np.savez_compressed if compressed else np.savez)(path, **members)


def data_field(b):
    if len(b) > HEX_LIMIT:
        return "sha256:" + hashlib.sha256(b).hexdigest()
    return b.hex()


def local_headers(data):
    """Yield (offset, flags, method, name, extra) for every local header of a ZIP in data,
    walking via the central directory (via zipfile) to find them."""
    zf = zipfile.ZipFile(io.BytesIO(data))
    for info in zf.infolist():
        off = info.header_offset
        sig, _ver, flags, method = struct.unpack_from("<IHHH", data, off)
        assert sig == 0x04034B50, hex(off)
        nlen, xlen = struct.unpack_from("<HH", data, off + 26)
        name = data[off + 30: off + 30 + nlen]
        extra = data[off + 30 + nlen: off + 30 + nlen + xlen]
        yield off, flags, method, name, extra


def extra_ids(extra):
    ids, pos = [], 0
    while pos + 4 <= len(extra):
        hid, size = struct.unpack_from("<HH", extra, pos)
        ids.append(hid)
        pos += 4 + size
    return ids


def eocd(data):
    """(position, cd_size, cd_offset, comment_len) of the classic end record."""
    pos = data.rfind(b"PK\x05\x06")
    assert pos >= 0
    cd_size, cd_offset, comment_len = struct.unpack_from("<IIH", data, pos + 12)
    return pos, cd_size, cd_offset, comment_len


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------

def int_values(rng, dt, n=9):
    dt = np.dtype(dt)
    info = np.iinfo(dt)
    native = dt.newbyteorder("=")
    rnd = rng.integers(info.min, info.max, size=n, dtype=native, endpoint=True)
    fixed = np.array([info.min, info.max, 0, 1], dtype=native)
    return np.concatenate([fixed, rnd]).astype(dt)


def float_values(rng, dt, n=8):
    dt = np.dtype(dt)
    fi = np.finfo(dt.newbyteorder("="))
    native = dt.newbyteorder("=")
    special = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, fi.max, fi.tiny,
                        fi.smallest_subnormal, fi.eps], dtype=native)
    rnd = rng.standard_normal(n).astype(native) * native.type(100)
    return np.concatenate([special, rnd]).astype(dt)


def complex_values(rng, dt, n=6):
    dt = np.dtype(dt)
    part = np.dtype("f%d" % (dt.itemsize // 2))
    re = float_values(rng, part, n)
    im = float_values(rng, part, n)[::-1]
    out = np.empty(re.shape, dtype=dt.newbyteorder("="))
    out.real, out.imag = re, im
    return out.astype(dt)


def time_values(unit_dtype):
    ints = np.array([0, 1, -1, 1_700_000_000_123, -86_400_000, np.iinfo(np.int64).min,
                     np.iinfo(np.int64).max], dtype="<i8")
    dt = np.dtype(unit_dtype)
    return ints.view(dt.newbyteorder("<")).astype(dt)


def dtype_members(rng):
    m = {}
    m["bool"] = rng.integers(0, 2, size=(2, 5)).astype("?")
    for dt in ("i1", "u1"):
        m["int8" if dt == "i1" else "uint8"] = int_values(rng, dt)
    for bits in (16, 32, 64):
        for kind, label in (("i", "int"), ("u", "uint")):
            for order, suffix in (("<", "le"), (">", "be")):
                m["%s%d_%s" % (label, bits, suffix)] = int_values(
                    rng, "%s%s%d" % (order, kind, bits // 8))
    for bits in (16, 32, 64):
        for order, suffix in (("<", "le"), (">", "be")):
            m["float%d_%s" % (bits, suffix)] = float_values(rng, "%sf%d" % (order, bits // 8))
    for bits in (64, 128):
        for order, suffix in (("<", "le"), (">", "be")):
            m["complex%d_%s" % (bits, suffix)] = complex_values(
                rng, "%sc%d" % (order, bits // 8))
    m["bytes_S5"] = np.array([b"", b"a", b"hello", b"ab\x00c", b"\xff\xfe\x00\x00\x01",
                              b"12345"], dtype="S5")
    texts = ["", "a", "naïve", "ℵ₀", "スペクトル", "\U0001F600x", "seven77"]
    m["unicode_U7_le"] = np.array(texts, dtype="<U7")
    m["unicode_U7_be"] = np.array(texts, dtype=">U7")
    m["void_V16"] = np.frombuffer(rng.bytes(16 * 4), dtype="V16").copy()
    for unit in ("ns", "D", "s"):
        for order, suffix in (("<", "le"), (">", "be")):
            m["datetime64_%s_%s" % (unit, suffix)] = time_values("%sM8[%s]" % (order, unit))
    for unit in ("ms", "D"):
        for order, suffix in (("<", "le"), (">", "be")):
            m["timedelta64_%s_%s" % (unit, suffix)] = time_values("%sm8[%s]" % (order, unit))
    # layouts
    m["fortran_2d_f8"] = np.asfortranarray(rng.standard_normal((3, 4)))
    m["fortran_3d_i2_be"] = np.asfortranarray(
        rng.integers(-30000, 30000, size=(2, 3, 4)).astype(">i2"))
    m["fortran_2d_c8"] = np.asfortranarray(complex_values(rng, "<c8", 1)[:12].reshape(3, 4))
    m["transposed_view_u4"] = np.arange(15, dtype="<u4").reshape(3, 5).T  # F-contiguous view
    m["strided_view_i8"] = np.arange(48, dtype="<i8").reshape(6, 8)[::2, ::3]  # written as C
    m["fortran_row_1x5"] = np.asfortranarray(np.arange(5.0).reshape(1, 5))  # C and F: fortran 0
    m["zero_d_f8"] = np.array(3.25)
    m["zero_d_i4_be"] = np.array(-7, dtype=">i4")
    m["zero_d_U3"] = np.array("ℵb", dtype="<U3")
    m["empty_f8"] = np.zeros((0,), dtype="<f8")
    m["empty_3x0x2_i4"] = np.zeros((3, 0, 2), dtype="<i4")
    m["empty_S5"] = np.zeros((0,), dtype="S5")
    m["one_element_c16"] = np.array([1 + 2j], dtype="<c16")
    m["one_element_1x1x1_u2"] = np.array([[[65535]]], dtype=">u2")
    return m


def structured_members(rng):
    m = {}
    simple = np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "S3")])
    m["simple"] = np.array([(1, 1.5, b"abc"), (-2, -0.0, b""), (3, np.inf, b"x")], dtype=simple)

    nested = np.dtype([("id", "<u2"),
                       ("pos", [("x", "<f4"), ("y", "<f4")]),
                       ("flags", [("inner", [("p", "u1"), ("q", "<i2")]), ("r", "?")])])
    m["nested"] = np.array([(1, (0.5, -0.5), ((7, -300), True)),
                            (2, (1e30, -1e-30), ((255, 32767), False))], dtype=nested)

    titled = np.dtype([(("Title of a", "a"), "<i4"), ("b", "<f8"), (("t\u00eftle c", "c"), ">u2")])
    m["titles"] = np.array([(1, 2.0, 3), (4, 5.0, 6)], dtype=titled)

    sub = np.dtype([("a", "<i4"), ("b", "<f8", (2, 3)), ("c", [("x", "<i2")], (2,)),
                    ("d", "S2", (3,))])
    arr = np.zeros(2, dtype=sub)
    arr["a"] = [10, 20]
    arr["b"] = rng.standard_normal((2, 2, 3))
    arr["c"]["x"] = [[1, 2], [3, 4]]
    arr["d"] = [[b"ab", b"c", b""], [b"xy", b"z", b"w"]]
    m["subarray_fields"] = arr

    aligned = np.dtype([("a", "u1"), ("b", "<i4"), ("c", "u1"), ("d", "<f8")], align=True)
    arr = np.zeros(3, dtype=aligned)  # padding bytes are zero
    arr["a"], arr["b"], arr["c"], arr["d"] = [1, 2, 3], [-1, 0, 1], [9, 8, 7], [0.25, 0.5, 1.0]
    m["aligned_padding"] = arr

    gaps = np.dtype({"names": ["x", "y"], "formats": ["<u2", ">f4"], "offsets": [2, 8],
                     "itemsize": 16})  # leading, middle and trailing padding
    arr = np.zeros(2, dtype=gaps)
    arr["x"], arr["y"] = [513, 1027], [1.5, -2.5]
    m["explicit_offsets"] = arr

    be = np.dtype([("a", ">i4"), ("b", ">f8"), ("c", "<u2"), ("d", ">c8"), ("e", ">U2")])
    m["big_endian_fields"] = np.array([(1, 2.5, 3, 1 + 1j, "ab"), (-1, -2.5, 65535, -1j, "ℵ")],
                                      dtype=be)

    mixed = np.dtype([("t", "<M8[us]"), ("dt", ">m8[s]"), ("s", "<U3"), ("v", "V4"), ("b", "?"),
                      ("h", "<f2")])
    m["mixed_kinds"] = np.array([(0, 5, "xyz", b"\x01\x02\x03\x04", True, 0.5),
                                 (1_700_000_000_000_000, -5, "", b"\x00\x00\x00\xff", False,
                                  -np.inf)], dtype=mixed)

    arr = np.zeros((2, 3), dtype=simple, order="F")
    arr["a"] = np.arange(6).reshape(2, 3)
    arr["b"] = np.arange(6).reshape(2, 3) / 4
    arr["c"] = [[b"a", b"b", b"c"], [b"d", b"e", b"f"]]
    m["fortran_2d_structured"] = arr
    m["zero_d_structured"] = np.array((5, 6.5, b"zz"), dtype=simple)
    m["empty_structured"] = np.zeros((0,), dtype=nested)
    return m


# ---------------------------------------------------------------------------------------
# Archive writers. Each returns {"leading": n} or {} for the manifest.
# ---------------------------------------------------------------------------------------

class Unseekable:
    """A write-only stream like a pipe: no seek, tell raises."""

    def __init__(self):
        self.buf = bytearray()

    def write(self, b):
        self.buf += b
        return len(b)

    def flush(self):
        pass

    def read(self, *args):  # np.savez only takes objects with .read for file objects
        raise OSError("write-only stream")

    def seekable(self):
        return False

    def tell(self):
        raise OSError("unseekable stream")

    def seek(self, *args):
        raise OSError("unseekable stream")


def write_dtypes(good, rng):
    savez(os.path.join(good, "dtypes.npz"), dtype_members(rng))
    return {}


def write_structured(good, rng):
    savez(os.path.join(good, "structured_dtypes.npz"), structured_members(rng))
    return {}


def write_compressed(good, rng):
    d = dtype_members(np.random.default_rng(1))
    s = structured_members(np.random.default_rng(2))
    subset = {k: d[k] for k in ("bool", "int16_be", "uint64_le", "float32_le", "float64_be",
                                "complex128_le", "bytes_S5", "unicode_U7_be", "void_V16",
                                "datetime64_ns_le", "timedelta64_D_be", "fortran_3d_i2_be",
                                "zero_d_f8", "empty_3x0x2_i4", "one_element_c16")}
    subset.update({k: s[k] for k in ("nested", "aligned_padding", "big_endian_fields")})
    # ~1 MB, compresses to a few KB; plus an incompressible 64 KB member
    subset["big_compressible_f8"] = np.tile(np.arange(1024, dtype="<f8"), 128)
    subset["random_u1_64k"] = rng.integers(0, 256, size=65536, dtype=np.uint8)
    savez(os.path.join(good, "compressed.npz"), subset, compressed=True)
    return {}


def write_header_versions(good, rng):
    names = ["field_with_a_rather_long_name_%04d" % i for i in range(2000)]
    cycle = ["<u1", ">i2", "<f4", "|b1"]
    v2_dtype = np.dtype([(n, cycle[i % 4]) for i, n in enumerate(names)])
    v2 = np.frombuffer(rng.bytes(v2_dtype.itemsize * 3), dtype=v2_dtype).copy()
    for n in names[3::4]:  # keep booleans canonical (0/1)
        v2[n] = v2[n].view("u1") & 1
    v3 = np.array([(1, 2.5, (3,)), (-4, -5.5, (6,))],
                  dtype=[("ℵ", "<i4"), ("b", "<f8"), ("スペクトル", [("ß", "<u2")])])
    members = {
        "v1_plain": np.arange(6, dtype="<i8").reshape(2, 3),
        "v1_latin1_field": np.array([(1, 2)], dtype=[("café", "<i4"), ("naïve", "u1")]),
        "v2_many_fields": v2,
        "v3_utf8_field": v3,
        "v3_zero_d": np.array((7, 8.0, (9,)), dtype=v3.dtype),
    }
    path = os.path.join(good, "npy_header_versions.npz")
    savez(path, members)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("v1_plain.npy")[6:8] == b"\x01\x00"
        assert zf.read("v1_latin1_field.npy")[6:8] == b"\x01\x00"
        v2raw = zf.read("v2_many_fields.npy")
        assert v2raw[6:8] == b"\x02\x00", v2raw[6:8]
        assert struct.unpack_from("<I", v2raw, 8)[0] > 65535
        assert zf.read("v3_utf8_field.npy")[6:8] == b"\x03\x00"
        assert zf.read("v3_zero_d.npy")[6:8] == b"\x03\x00"
    return {}


def write_legacy_headers(good, rng):
    """Headers as older or foreign writers produced them (all accepted by numpy 1.24)."""
    a = np.arange(6, dtype="<i8")
    f = np.asfortranarray(np.arange(6, dtype=">f4").reshape(3, 2))
    members = [
        # numpy 1.14..1.23: 64-byte aligned, no growth padding
        ("pre_1_24_no_growth_padding.npy",
         raw_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (6,), }", a.tobytes(), 64)),
        # numpy < 1.14: 16-byte alignment, so the data is not 64-byte aligned in the member
        ("align16.npy",
         raw_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", a.tobytes(), 16)),
        # Python 2 numpy: long-integer L suffixes in the shape
        ("python2_long_suffix.npy",
         raw_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (3L, 2L), }",
                 a.tobytes(), 16)),
        # keys in another order, double quotes, no trailing comma, Fortran data
        ("keys_reordered_fortran.npy",
         raw_npy('{"shape": (3, 2), "fortran_order": True, "descr": ">f4"}',
                 f.tobytes(order="F"), 16)),
        # v2.0 header although it is small (allowed; numpy would pick v1)
        ("small_v2_header.npy",
         raw_npy("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }",
                 np.array([1, 2, 65535], dtype="<u2").tobytes(), 64, version=(2, 0))),
    ]
    path = os.path.join(good, "legacy_headers.npz")
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members:
            zf.writestr(zinfo(name), raw)
    return {}


def write_non_npy(good, rng):
    path = os.path.join(good, "non_npy_members.npz")
    meta = json.dumps({"source": "mmnpz fixtures", "version": 1, "members": ["a", "b"]},
                      sort_keys=True).encode()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zinfo("readme.txt"), b"This archive mixes .npy and other members.\n")
        zf.writestr(zinfo("a.npy"), npy_bytes(np.arange(5, dtype="<i4")))
        zf.writestr(zinfo("meta.json", zipfile.ZIP_DEFLATED), meta)
        zf.writestr(zinfo("b.npy", zipfile.ZIP_DEFLATED),
                    npy_bytes(np.linspace(0, 1, 7, dtype=">f8")))
        zf.writestr(zinfo("empty.txt"), b"")
        zf.writestr(zinfo("notes.md", zipfile.ZIP_DEFLATED), b"# notes\n" * 700)  # > 4096
    return {}


def write_object(good, rng):
    members = {
        "numbers": np.arange(4, dtype="<i2"),
        "objects": np.array([1, "two", None, 3.5, {"k": [1, 2]}], dtype=object),
        "labels": np.array(["x", "yy"], dtype="<U2"),
    }
    savez(os.path.join(good, "object_member.npz"), members)
    return {}


def write_unseekable(good, rng):
    members = {
        "a": np.arange(10, dtype="<i4"),
        "b": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "c": np.array(["data", "descriptor"], dtype="<U10"),
        "big": np.tile(np.arange(256, dtype="<u2"), 16),  # 8 KB
    }
    for name, compressed in (("unseekable_stored.npz", False),
                             ("unseekable_deflated.npz", True)):
        stream = Unseekable()
        savez(stream, members, compressed=compressed)
        data = bytes(stream.buf)
        for _off, flags, method, _name, _extra in local_headers(data):
            assert flags & 0x8, "expected a data descriptor (flag bit 3)"
            assert method == (8 if compressed else 0)
        assert data[6] & 0x8
        assert b"PK\x07\x08" in data
        with open(os.path.join(good, name), "wb") as fh:
            fh.write(data)
    return {}


def write_many_members(good, rng):
    path = os.path.join(good, "many_members_70000.npz")
    template = npy_bytes(np.zeros(1, dtype="<i2"))
    header = template[:-2]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(MANY_MEMBERS):
            value = ((i + 32768) % 65536) - 32768  # i as a wrapped int16
            zf.writestr(zinfo("m%05d.npy" % i), header + struct.pack("<h", value))
    with open(path, "rb") as fh:
        data = fh.read()
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data
    pos, _size, _off, _clen = eocd(data)
    assert struct.unpack_from("<HH", data, pos + 8) == (0xFFFF, 0xFFFF)
    return {"sample": MANY_SAMPLE}


def stub_bytes(rng):
    junk = bytearray(rng.integers(0, 256, size=1000, dtype=np.uint8).tobytes())
    junk = bytes(b if b != 0x50 else 0x51 for b in junk)  # no 'P', so no fake signatures
    return b"#!/bin/sh\n" + junk


def leading_members():
    return {"a": np.arange(12, dtype="<i4").reshape(3, 4),
            "b": np.array([0.5, -1.0], dtype="<f8"),
            "c": np.array([b"stub"], dtype="S4")}


def write_leading_unadjusted(good, rng):
    stub = stub_bytes(rng)
    bio = io.BytesIO()
    savez(bio, leading_members())
    data = stub + bio.getvalue()  # like `cat stub a.npz > b.npz`: offsets not adjusted
    pos, cd_size, cd_offset, _ = eocd(data)
    assert pos - (cd_offset + cd_size) == len(stub)
    with open(os.path.join(good, "leading_bytes_unadjusted.npz"), "wb") as fh:
        fh.write(data)
    return {"leading": len(stub)}


def write_leading_adjusted(good, rng):
    stub = stub_bytes(rng)
    path = os.path.join(good, "leading_bytes_adjusted.npz")
    with open(path, "wb") as fh:
        fh.write(stub)
    # zipfile in 'a' mode on a non-ZIP file appends an archive whose offsets count from
    # the start of the file (as zip -A does for self-extractors)
    with zipfile.ZipFile(path, "a") as zf:
        for key, arr in leading_members().items():
            with zf.open(key + ".npy", "w", force_zip64=True) as fid:
                npformat.write_array(fid, arr)
    with open(path, "rb") as fh:
        data = fh.read()
    pos, cd_size, cd_offset, _ = eocd(data)
    assert pos == cd_offset + cd_size
    assert data[len(stub):len(stub) + 4] == b"PK\x03\x04"
    return {"leading": len(stub)}


def comment_text(n):
    unit = b"mmnpz archive comment; the end record is not the last thing in the file. "
    return (unit * (n // len(unit) + 1))[:n]


def write_comments(good, rng):
    for name, n in (("comment_1000.npz", 1000), ("comment_65535.npz", 65535)):
        path = os.path.join(good, name)
        savez(path, {"a": np.arange(3, dtype="<u8"),
                     "b": np.array([[1, 2], [3, 4]], dtype=">i2")})
        with zipfile.ZipFile(path, "a") as zf:
            zf.comment = comment_text(n)
        with open(path, "rb") as fh:
            data = fh.read()
        pos, _, _, clen = eocd(data)
        assert clen == n and pos + 22 + n == len(data)
    return {}


def write_duplicates(good, rng):
    path = os.path.join(good, "duplicate_names.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile: "Duplicate name: 'x.npy'"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(zinfo("x.npy"), npy_bytes(np.array([1, 2, 3], dtype="<i4")))
            zf.writestr(zinfo("y.npy"), npy_bytes(np.array([9.5], dtype="<f8")))
            zf.writestr(zinfo("x.npy", zipfile.ZIP_DEFLATED),
                        npy_bytes(np.array([[4.0, 5.0], [6.0, 7.0]], dtype=">f4")))
            zf.writestr(zinfo("notes.txt"), b"first")
            zf.writestr(zinfo("notes.txt"), b"second")
    return {}


def write_utf8_names(good, rng):
    path = os.path.join(good, "utf8_names.npz")
    savez(path, {"données": np.array([1.5, 2.5], dtype="<f4"),
                 "スペクトル": np.arange(4, dtype="<u2"),
                 "dir/sub": np.array([True, False]),
                 "ascii": np.array([42], dtype="<i8")})
    with open(path, "rb") as fh:
        data = fh.read()
    flags = {name: fl for _o, fl, _m, name, _x in local_headers(data)}
    assert flags["données.npy".encode()] & 0x800
    assert flags["スペクトル.npy".encode()] & 0x800
    assert not flags[b"dir/sub.npy"] & 0x800
    return {}


def write_trailing(good, rng):
    path = os.path.join(good, "trailing_bytes.npz")
    a = np.arange(5, dtype="<i4")
    b = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=">f8")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zinfo("a.npy"), npy_bytes(a) + b"trailing junk after the array data")
        zf.writestr(zinfo("b.npy", zipfile.ZIP_DEFLATED), npy_bytes(b) + bytes(100))
        zf.writestr(zinfo("c.npy"), npy_bytes(np.array([7], dtype="u1")))
        zf.writestr(zinfo("empty.npy"), npy_bytes(np.zeros(0, dtype="<f8")) + b"\x00junk")
    return {}


def write_zip64_variants(good, rng):
    members = {"a": np.arange(8, dtype="<i4"), "b": np.array([1.0, -1.0], dtype=">f8"),
               "s": np.array([b"no", b"zip64"], dtype="S5")}
    forced = os.path.join(good, "zip64_forced.npz")
    savez(forced, members)
    with open(forced, "rb") as fh:
        for _o, _f, _m, _n, extra in local_headers(fh.read()):
            assert 0x0001 in extra_ids(extra)
    for name, method in (("no_zip64_stored.npz", zipfile.ZIP_STORED),
                         ("no_zip64_deflated.npz", zipfile.ZIP_DEFLATED)):
        path = os.path.join(good, name)
        with zipfile.ZipFile(path, "w", allowZip64=False) as zf:
            for key, arr in members.items():
                zf.writestr(zinfo(key + ".npy", method), npy_bytes(arr))
        with open(path, "rb") as fh:
            data = fh.read()
        for _o, _f, _m, _n, extra in local_headers(data):
            assert 0x0001 not in extra_ids(extra)
        with zipfile.ZipFile(path) as zf:
            assert all(0x0001 not in extra_ids(i.extra) for i in zf.infolist())
        assert b"PK\x06\x06" not in data
    return {}


WRITERS = [
    write_dtypes, write_structured, write_compressed, write_header_versions,
    write_legacy_headers, write_non_npy, write_object, write_unseekable, write_many_members,
    write_leading_unadjusted, write_leading_adjusted, write_comments, write_duplicates,
    write_utf8_names, write_trailing, write_zip64_variants,
]


# ---------------------------------------------------------------------------------------
# What numpy sees
# ---------------------------------------------------------------------------------------

def open_npz(path, allow_pickle=False):
    """np.load of a fixture archive, also of those with bytes before the archive."""
    kw = dict(allow_pickle=allow_pickle, max_header_size=MAX_HEADER_SIZE)
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"PK\x03\x04":
        return np.load(path, **kw)
    # np.load would take this for a pickle; NpzFile is what it uses for a real .npz
    return np.lib.npyio.NpzFile(open(path, "rb"), own_fid=True, **kw)


def parse_npy_header(raw):
    """(version, header dict, data offset) read straight from the member bytes."""
    major, minor = raw[6], raw[7]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", raw, 8), 10
    else:
        (hlen,), start = struct.unpack_from("<I", raw, 8), 12
    text = raw[start:start + hlen].decode("utf-8" if major == 3 else "latin-1")
    if major < 3:
        text = npformat._filter_header(text)  # drops Python 2 'L' suffixes, like numpy
    return (major, minor), ast.literal_eval(text), start + hlen


def resolve(npz, key):
    """The full member name NpzFile.__getitem__ uses for key."""
    if key in npz._files:
        return key
    if key in npz.files:
        return key + ".npy"
    raise KeyError(key)


def lookup_table(npz, infos, wanted_names=None):
    """[(key, index)] for every distinct key and full name, as numpy resolves them."""
    last = {}
    for i, info in enumerate(infos):
        last[info.filename] = i  # zipfile (and so numpy) keeps the last entry of a name
    keys = []
    for stripped, full in zip(npz.files, npz._files):
        if wanted_names is not None and full not in wanted_names:
            continue
        for k in (stripped, full):
            if k not in keys:
                keys.append(k)
    return [(k, last[resolve(npz, k)]) for k in keys]


def canonical_bytes(arr, fortran=None):
    """arr's bytes with every padding byte of a structured dtype set to zero.

    numpy's read_array fills an np.ndarray field by field, so the padding bytes of dtypes
    with gaps (align=True, explicit offsets) are left uninitialised in what np.load
    returns; only the field bytes are meaningful to compare."""
    if fortran is None:
        fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)
    order = "F" if fortran else "C"
    if arr.dtype.names is None:
        return arr.tobytes(order=order)
    out = np.zeros(arr.shape, dtype=arr.dtype, order=order)
    out[...] = arr
    return out.tobytes(order=order)


def has_padding(dtype):
    if dtype.names is None or dtype.itemsize == 0:
        return False
    ones = np.frombuffer(b"\xff" * dtype.itemsize, dtype=dtype)
    return canonical_bytes(ones) != b"\xff" * dtype.itemsize


def file_array(data, dtype, shape, fortran):
    flat = np.frombuffer(data, dtype=dtype) if dtype.itemsize else np.zeros(0, dtype)
    return flat.reshape(shape, order="F" if fortran else "C")


def array_record(raw, arr):
    """Fields after 'array' for a loaded .npy member, cross-checked with its header.
    The data field holds the bytes of the file, which for padded structured dtypes can
    differ from arr.tobytes() in the padding (see canonical_bytes)."""
    _version, hdr, data_off = parse_npy_header(raw)
    descr = repr(npformat.dtype_to_descr(arr.dtype))
    assert descr == repr(hdr["descr"]), (descr, hdr["descr"])
    assert tuple(hdr["shape"]) == arr.shape
    fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)
    assert fortran == bool(hdr["fortran_order"]) or arr.ndim < 2, (fortran, hdr)
    data = raw[data_off:data_off + arr.nbytes]
    assert len(data) == arr.nbytes, "member shorter than its array"
    in_file = file_array(data, arr.dtype, arr.shape, fortran)
    assert canonical_bytes(in_file, fortran) == canonical_bytes(arr, fortran), \
        "data bytes differ from the file"
    if not has_padding(arr.dtype):
        assert data == arr.tobytes(order="F" if fortran else "C")
    shape = ",".join(str(n) for n in arr.shape)
    return ["array", descr, shape, "1" if fortran else "0", str(arr.nbytes), data_field(data)]


def member_record(zf, info, npz_value=None):
    raw = zf.read(info)
    if raw[:6] != NPY_MAGIC:
        if npz_value is not None:
            assert npz_value == raw
        return ["bytes", str(len(raw)), data_field(raw)]
    _version, hdr, _off = parse_npy_header(raw)
    if npformat.descr_to_dtype(hdr["descr"]).hasobject:
        return ["object"]
    arr = npformat.read_array(io.BytesIO(raw), allow_pickle=False,
                              max_header_size=MAX_HEADER_SIZE)
    if npz_value is not None:  # the entry numpy returns for this name: must be identical
        assert npz_value.dtype == arr.dtype and npz_value.shape == arr.shape
        assert canonical_bytes(npz_value) == canonical_bytes(arr)
    return array_record(raw, arr)


def describe(outdir, rel, meta):
    path = os.path.join(outdir, rel)
    lines = []
    with zipfile.ZipFile(path) as zf, open_npz(path) as npz:
        infos = zf.infolist()
        lines.append(["count", rel, str(len(infos))])
        if "leading" in meta:
            assert min(i.header_offset for i in infos) == meta["leading"]
            lines.append(["leading", rel, str(meta["leading"])])
        sample = meta.get("sample")
        indices = sample if sample is not None else range(len(infos))
        wanted = {infos[i].filename for i in indices} if sample is not None else None
        lookups = lookup_table(npz, infos, wanted)
        resolved = {idx: key for key, idx in lookups}
        for idx in indices:
            info = infos[idx]
            value = None
            if idx in resolved and not _is_object(zf, info):
                value = npz[resolved[idx]]
            rec = member_record(zf, info, value)
            lines.append(["member", rel, str(idx), info.filename] + rec)
        for key, idx in lookups:
            lines.append(["lookup", rel, key, str(idx)])
    return lines


def _is_object(zf, info):
    with zf.open(info) as fh:
        head = fh.read(6)
    if head != NPY_MAGIC:
        return False
    _v, hdr, _o = parse_npy_header(zf.read(info))
    return npformat.descr_to_dtype(hdr["descr"]).hasobject


# ---------------------------------------------------------------------------------------
# --check: read the manifest back and compare with numpy, independently of describe()
# ---------------------------------------------------------------------------------------

def check(outdir):
    records = {}
    with open(os.path.join(outdir, "manifest.tsv"), encoding="utf-8") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            records.setdefault(f[1], []).append(f)
    on_disk = sorted("good/" + n for n in os.listdir(os.path.join(outdir, "good")))
    assert sorted(records) == on_disk, (sorted(records), on_disk)
    n_checked = 0
    for rel, recs in records.items():
        path = os.path.join(outdir, rel)
        with zipfile.ZipFile(path) as zf, open_npz(path) as npz:
            infos = zf.infolist()
            counts = [r for r in recs if r[0] == "count"]
            assert len(counts) == 1 and int(counts[0][2]) == len(infos), rel
            members = {int(r[2]): r for r in recs if r[0] == "member"}
            lookups = {r[2]: int(r[3]) for r in recs if r[0] == "lookup"}
            if len(infos) <= 65535:
                assert sorted(members) == list(range(len(infos))), rel
                all_keys = set(npz.files) | set(npz._files)
                assert set(lookups) == all_keys, rel
            for r in recs:
                if r[0] == "leading":
                    assert int(r[2]) == min(i.header_offset for i in infos)
            for key, idx in lookups.items():
                assert infos[idx].filename == resolve(npz, key)
                assert all(i.filename != infos[idx].filename for i in infos[idx + 1:])
            by_index = {}
            for key, idx in lookups.items():
                by_index.setdefault(idx, key)
            for idx, r in members.items():
                assert r[3] == infos[idx].filename, (rel, idx)
                kind = r[4]
                if kind == "object":
                    with zf.open(infos[idx]) as fh:
                        arr = npformat.read_array(fh, allow_pickle=True)
                    assert arr.dtype.hasobject
                    continue
                if idx in by_index:
                    value = npz[by_index[idx]]  # via np.load
                else:  # shadowed duplicate: numpy cannot reach it by name
                    with zf.open(infos[idx]) as fh:
                        head = fh.read(6)
                    if head == NPY_MAGIC:
                        with zf.open(infos[idx]) as fh:
                            value = npformat.read_array(fh, allow_pickle=False,
                                                        max_header_size=MAX_HEADER_SIZE)
                    else:
                        value = zf.read(infos[idx])
                if kind == "bytes":
                    assert isinstance(value, bytes), (rel, idx)
                    assert int(r[5]) == len(value) and r[6] == data_field(value), (rel, idx)
                else:
                    assert kind == "array" and isinstance(value, np.ndarray), (rel, idx)
                    descr, shape, fortran, nbytes, data = r[5:10]
                    assert descr == repr(npformat.dtype_to_descr(value.dtype)), (rel, idx)
                    assert shape == ",".join(map(str, value.shape)), (rel, idx)
                    fo = value.flags.f_contiguous and not value.flags.c_contiguous
                    assert fortran == ("1" if fo else "0"), (rel, idx)
                    assert int(nbytes) == value.nbytes, (rel, idx)
                    if has_padding(value.dtype):  # compare fields, not padding
                        assert not data.startswith("sha256:"), (rel, idx)
                        from_file = file_array(bytes.fromhex(data), value.dtype,
                                               value.shape, fo)
                        assert canonical_bytes(from_file, fo) == canonical_bytes(value, fo)
                    else:
                        got = value.tobytes(order="F" if fo else "C")
                        assert data == data_field(got), (rel, idx)
                    # and the descr really round-trips to the same dtype
                    assert npformat.descr_to_dtype(ast.literal_eval(descr)) == value.dtype
                n_checked += 1
    return n_checked


# ---------------------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--check", action="store_true",
                    help="afterwards compare every manifest record with numpy")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    outdir = args.outdir
    good = os.path.join(outdir, "good")
    shutil.rmtree(good, ignore_errors=True)
    manifest_path = os.path.join(outdir, "manifest.tsv")
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    os.makedirs(good)

    metas = {}
    for seed, writer in enumerate(WRITERS):
        before = set(os.listdir(good))
        meta = writer(good, np.random.default_rng(1000 + seed))
        for name in sorted(set(os.listdir(good)) - before):
            metas["good/" + name] = meta

    lines = []
    for rel in sorted(metas):
        lines.extend(describe(outdir, rel, metas[rel]))
    tmp = manifest_path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for f in lines:
            assert all("\t" not in x and "\n" not in x for x in f), f
            fh.write("\t".join(f) + "\n")
    os.replace(tmp, manifest_path)

    total = sum(os.path.getsize(os.path.join(good, n)) for n in os.listdir(good))
    total += os.path.getsize(manifest_path)
    msg = "wrote %d archives, %d manifest lines, %.1f MB in %.1f s" % (
        len(metas), len(lines), total / 1e6, time.monotonic() - t0)
    if args.check:
        n = check(outdir)
        msg += "; checked %d member records against numpy in %.1f s total" % (
            n, time.monotonic() - t0)
    print(msg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
