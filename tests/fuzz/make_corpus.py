#!/usr/bin/python3
"""Write the fuzz seed corpus: tiny .npz archives, each named after what it exercises.

Usage:
    /usr/bin/python3 tests/fuzz/make_corpus.py [OUTDIR]     (default: tests/fuzz/corpus)

Needs the standard library and numpy. Output is deterministic (fixed timestamps and data),
so rerunning it rewrites identical files. Only the seed files this script names are
written; other files in OUTDIR (regression inputs added by hand, named after the bug they
found) are left alone. Every seed is checked to load with zipfile (and, for the archives
numpy accepts, with numpy) before it is written, so the seeds start from valid structure
and the fuzzer spends its time on the edges.

Seeds are kept small (a few hundred bytes each) because libFuzzer mutates whole inputs:
the smaller the input, the more often a mutation lands in a header.
"""

import io
import os
import struct
import sys
import warnings
import zipfile
import zlib

import numpy as np

# The fixture generator's helpers: the same .npy and ZIP building blocks.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_fixtures import NPY_MAGIC, FIXED_DATE, Unseekable, npy_bytes, raw_npy, zinfo  # noqa: E402

DOS_TIME = (3 << 11) | (4 << 5) | (6 // 2)
DOS_DATE = ((2024 - 1980) << 9) | (1 << 5) | 2


def zip_with(members, method=zipfile.ZIP_STORED, comment=b"", stream=None):
    """An archive written by zipfile: members is a list of (name, bytes)."""
    out = stream if stream is not None else io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w") as zf:
        warnings.simplefilter("ignore")  # "Duplicate name", on purpose
        for name, data in members:
            zf.writestr(zinfo(name, method), data)
        zf.comment = comment
    return bytes(out.buf) if stream is not None else out.getvalue()


def raw_zip(members, zip64=False, comment=b""):
    """An archive built field by field, for what zipfile will not write for small files.

    members: list of dicts with name (bytes), data (bytes), and optionally method (0 or 8),
    flags, local_extra (bytes). With zip64, every size and offset in the central directory
    is saturated and given in a zip64 extra field, and zip64 end records are written.
    """
    out = bytearray()
    central = bytearray()
    for m in members:
        method = m.get("method", 0)
        flags = m.get("flags", 0)
        raw = m["data"]
        if method == 8:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            stored = c.compress(raw) + c.flush()
        else:
            stored = raw
        crc = zlib.crc32(raw) & 0xFFFFFFFF
        offset = len(out)
        local_extra = m.get("local_extra", b"")
        csize, usize, version = len(stored), len(raw), 20
        if zip64:
            local_extra = struct.pack("<HHQQ", 1, 16, usize, csize) + local_extra
            csize = usize = 0xFFFFFFFF
            version = 45
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, version, flags, method, DOS_TIME,
                           DOS_DATE, crc, csize, usize, len(m["name"]), len(local_extra))
        out += m["name"] + local_extra + stored
        central_extra = b""
        cd_offset_field = offset
        if zip64:
            central_extra = struct.pack("<HHQQQ", 1, 24, len(raw), len(stored), offset)
            cd_offset_field = 0xFFFFFFFF
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | version, version,
                               flags, method, DOS_TIME, DOS_DATE, crc, csize, usize,
                               len(m["name"]), len(central_extra), 0, 0, 0, 0o644 << 16,
                               cd_offset_field)
        central += m["name"] + central_extra
    cd_offset = len(out)
    out += central
    count = len(members)
    if zip64:
        end64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count,
                           len(central), cd_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                           0xFFFFFFFF, len(comment))
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central),
                           cd_offset, len(comment))
    return bytes(out + comment)


# Small arrays reused by several seeds.
A_I4 = np.arange(6, dtype="<i4")
B_F8 = np.array([0.5, -1.0, np.inf], dtype="<f8")
C_S = np.array([b"ab", b"c"], dtype="S2")


def seeds():
    """(file name, archive bytes, numpy_loads) for every seed."""
    s = []

    def add(name, data, numpy_loads=True):
        s.append((name, data, numpy_loads))

    basic = [("a.npy", npy_bytes(A_I4)), ("b.npy", npy_bytes(B_F8)), ("c.npy", npy_bytes(C_S))]
    add("stored_three_arrays.npz", zip_with(basic))
    add("deflated_three_arrays.npz", zip_with(basic, zipfile.ZIP_DEFLATED))
    add("deflated_compressible_array.npz",
        zip_with([("z.npy", npy_bytes(np.zeros(256, dtype="<u2")))], zipfile.ZIP_DEFLATED))

    add("data_descriptor_stored.npz", zip_with(basic[:2], stream=Unseekable()))
    add("data_descriptor_deflated.npz",
        zip_with(basic[:2], zipfile.ZIP_DEFLATED, stream=Unseekable()))

    # zip64: saturated central-directory fields with zip64 extras, zip64 end record and
    # locator; and zipfile's force_zip64 (zip64 extra in the local header only).
    add("zip64_end_record_stored.npz",
        raw_zip([{"name": b"a.npy", "data": npy_bytes(A_I4)},
                 {"name": b"b.npy", "data": npy_bytes(B_F8)}], zip64=True))
    add("zip64_end_record_deflated.npz",
        raw_zip([{"name": b"a.npy", "data": npy_bytes(A_I4), "method": 8}], zip64=True))
    bio = io.BytesIO()
    with zipfile.ZipFile(bio, "w") as zf:
        with zf.open(zinfo("a.npy"), "w", force_zip64=True) as f:
            f.write(npy_bytes(A_I4))
    add("zip64_local_extra_only.npz", bio.getvalue())

    add("comment.npz", zip_with(basic[:1], comment=b"an archive comment"))
    stub = b"#!/bin/sh\nexit 0\n" + bytes(range(0x20, 0x50))
    add("leading_bytes_unadjusted.npz", stub + zip_with(basic[:2]), numpy_loads=False)
    adjusted = io.BytesIO()
    adjusted.write(stub)
    with zipfile.ZipFile(adjusted, "a") as zf:
        zf.writestr(zinfo("a.npy"), npy_bytes(A_I4))
    add("leading_bytes_adjusted.npz", adjusted.getvalue(), numpy_loads=False)
    add("trailing_bytes_after_end.npz", zip_with(basic[:1]) + b"\x00" * 16)
    add("empty_archive.npz", zip_with([]))

    structured = np.dtype([("id", "<u2"), ("pos", [("x", "<f4"), ("y", ">f4")]),
                           (("a title", "t"), "S3"), ("m", "<i2", (2,))])
    arr = np.zeros(2, dtype=structured)
    arr["id"] = [1, 2]
    arr["m"] = [[1, -1], [2, -2]]
    add("structured_nested_titles_subarray.npz", zip_with([("s.npy", npy_bytes(arr))]))
    padded = np.dtype({"names": ["x", "y"], "formats": ["u1", "<i4"], "offsets": [1, 4],
                       "itemsize": 12})
    add("structured_padding.npz", zip_with([("p.npy", npy_bytes(np.zeros(1, dtype=padded)))]))

    kinds = [("bool.npy", npy_bytes(np.array([True, False]))),
             ("f2.npy", npy_bytes(np.array([1.5], dtype="<f2"))),
             ("c16_be.npy", npy_bytes(np.array([1 - 2j], dtype=">c16"))),
             ("u3.npy", npy_bytes(np.array(["x\u00e9"], dtype="<U3"))),
             ("dt.npy", npy_bytes(np.array([0, 1], dtype="<M8[ms]"))),
             ("td.npy", npy_bytes(np.array([5], dtype=">m8[10s]"))),
             ("v4.npy", npy_bytes(np.array([b"\x01\x02\x03\x04"], dtype="V4")))]
    add("dtype_kinds.npz", zip_with(kinds))
    shapes = [("zero_d.npy", npy_bytes(np.array(7, dtype="<i8"))),
              ("empty_0x3.npy", npy_bytes(np.zeros((0, 3), dtype="<f4"))),
              ("fortran_2x3.npy", npy_bytes(np.asfortranarray(np.arange(6, dtype=">i2")
                                                              .reshape(2, 3)))),
              ("s0.npy", raw_npy("{'descr': '|S0', 'fortran_order': False, 'shape': (4,), }",
                                 b""))]
    add("shapes_0d_empty_fortran.npz", zip_with(shapes))

    add("npy_v2_header.npz", zip_with([("v2.npy", raw_npy(
        "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }",
        np.array([1, 2, 3], dtype="<u2").tobytes(), version=(2, 0)))]))
    u = np.zeros(1, dtype=[("\u03b1\u4e2d", "<i4")])  # numpy writes v3.0 for this name
    v3 = npy_bytes(u)
    assert v3[6] == 3, v3[:8]
    add("npy_v3_header_utf8_field.npz", zip_with([("v3.npy", v3)]))
    nested = np.zeros(2, np.dtype([("a", (np.dtype(("<f4", (2,))), (3,))), ("b", "<i2")]))
    nested["b"] = [3, 4]
    add("npy_subarray_pairs_empty_record_datetime_divisor.npz", zip_with([
        ("nested.npy", npy_bytes(nested)),
        ("empty_record.npy", npy_bytes(np.zeros(3, np.dtype([])))),
        ("pair_of_no_item.npy", raw_npy("{'descr': ('<f4', (2,)), 'fortran_order': False, "
                                        "'shape': (0,), }", b"")),
        ("divisor.npy", raw_npy("{'descr': '<M8[us/2]', 'fortran_order': False, 'shape': (2,), }",
                                np.array([1, 2], "<i8").tobytes())),
    ]))
    add("npy_legacy_header_text.npz", zip_with([
        ("py2_long.npy", raw_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }",
                                 A_I4.tobytes())),
        ("reordered.npy", raw_npy('{"shape": (3,), "fortran_order": True, "descr": ">f8"}',
                                  B_F8.astype(">f8").tobytes())),
    ]))

    add("non_npy_members.npz", zip_with([("readme.txt", b"not an array\n"),
                                         ("a.npy", npy_bytes(A_I4)),
                                         ("empty.bin", b""),
                                         ("dir/meta.json", b'{"k": 1}')]))
    add("object_array_pickled.npz",
        zip_with([("o.npy", npy_bytes(np.array([1, "two", None], dtype=object),
                                      allow_pickle=True)),
                  ("a.npy", npy_bytes(A_I4))]))
    add("duplicate_names.npz", zip_with([("a.npy", npy_bytes(A_I4)), ("a.npy", npy_bytes(B_F8)),
                                         ("a", npy_bytes(C_S))]))
    # Names: UTF-8 (flag bit 11) and cp437 (no flag, high bytes); an alignment extra field
    # in the local header, as mmnpz's writer and Apache Commons Compress write it.
    add("names_utf8_and_cp437.npz", raw_zip([
        {"name": "\u00e9t\u00e9.npy".encode(), "data": npy_bytes(A_I4), "flags": 1 << 11},
        {"name": b"caf\x82.npy", "data": npy_bytes(C_S)}]), numpy_loads=False)
    add("align_extra_field.npz", raw_zip([
        {"name": b"a.npy", "data": npy_bytes(A_I4),
         "local_extra": struct.pack("<HHH", 0xA11E, 2 + 7, 64) + b"\x00" * 7}]))

    # Regressions: inputs that broke mmnpz once, named after what they broke. numpy refuses
    # them, and so must mmnpz (with mmnpz::error).
    bad_utf8 = b"{'descr': [('\xc3A', '<i4')], 'fortran_order': False, 'shape': (1,), }"
    add("regression_npy_v3_header_invalid_utf8_field_name.npz", zip_with([
        ("x.npy", raw_npy(bad_utf8, b"\x01\x00\x00\x00", version=(3, 0), align=64))]),
        numpy_loads=False)
    return s


def check(name, data, numpy_loads):
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            zf.read(info)  # checks the CRC too
    if numpy_loads:
        with np.load(io.BytesIO(data), allow_pickle=True) as npz:
            for key in npz.files:
                npz[key]


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(f"usage: {argv[0]} [OUTDIR]   (default: the corpus folder beside this script)")
        return 0 if argv[1:] in (["-h"], ["--help"]) else 2
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = argv[1] if len(argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(outdir, exist_ok=True)
    total = 0
    all_seeds = seeds()
    for name, data, numpy_loads in all_seeds:
        check(name, data, numpy_loads)
        with open(os.path.join(outdir, name), "wb") as fh:
            fh.write(data)
        total += len(data)
    print(f"wrote {len(all_seeds)} seeds, {total} bytes, to {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
