"""Every fixture archive of make_fixtures.py: each item mmnpz returns is the one numpy returns.

numpy is asked with allow_pickle=True and max_header_size=2**31 (the v2.0-header member has
an 80 KB header), through NpzFile directly for the archives with leading bytes (np.load only
takes a file starting with PK\\3\\4 for an .npz); see the notes in make_fixtures.py.
"""

import hashlib
import os
import sys
import random

import numpy as np
import pytest

import mmnpz

# The fixture generator's way of opening its archives (np.load takes a leading stub for a
# pickle; NpzFile is what it uses for a real .npz).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_fixtures import open_npz  # noqa: E402

GOOD = os.path.join(os.environ.get("MMNPZ_FIXTURES", ""), "good")
ARCHIVES = sorted(os.listdir(GOOD)) if os.path.isdir(GOOD) else []
MANY = "many_members_70000.npz"


def numpy_npz(path):
    return open_npz(path, allow_pickle=True)


def keys_of(npz):
    """Every key numpy resolves: names as listed in files, and full member names."""
    return list(dict.fromkeys(list(npz.files) + list(npz._files)))


def check_item(reader, npz, key, assert_same):
    got, want = reader[key], npz[key]
    assert_same(got, want, key)
    if isinstance(want, np.ndarray) and not want.dtype.hasobject:
        info = reader.info(key)
        if info.compressed:
            assert type(got) is np.ndarray, key
        else:
            assert type(got) is np.memmap and not got.flags.writeable, key
            if got.nbytes:
                assert np.shares_memory(got, reader.mmap), key


def test_the_fixtures_are_there(fixtures_dir):
    assert MANY in ARCHIVES and "unseekable_stored.npz" in ARCHIVES
    assert len(ARCHIVES) >= 20


@pytest.mark.parametrize("archive", [a for a in ARCHIVES if a != MANY])
def test_every_key_numpy_can_load_is_the_same_item_in_mmnpz(fixtures_dir, archive, assert_same):
    path = os.path.join(fixtures_dir, "good", archive)
    reader = mmnpz.load(path, allow_pickle=True)
    with numpy_npz(path) as npz:
        assert reader.files == npz.files
        assert len(reader) == len(npz.files)
        keys = keys_of(npz)
        assert keys
        for key in keys:
            assert key in reader
            check_item(reader, npz, key, assert_same)
    assert reader.verify() == {}


def test_the_archive_of_70000_members_matches_numpy_on_a_sample(fixtures_dir, assert_same):
    path = os.path.join(fixtures_dir, "good", MANY)
    reader = mmnpz.load(path)
    with numpy_npz(path) as npz:
        assert len(reader) == len(npz.files) == 70000
        assert reader.files == npz.files
        sample = [0, 1, 65534, 65535, 65536, 69999] + random.Random(3).sample(range(70000), 200)
        for i in sample:
            key = npz.files[i]
            check_item(reader, npz, key, assert_same)
            check_item(reader, npz, key + ".npy", assert_same)
            assert int(reader[key][0]) == ((i + 32768) % 65536) - 32768


def test_stored_data_lies_at_the_offset_info_gives_as_the_manifest_records(fixtures_dir):
    members, lookups = {}, []
    with open(os.path.join(fixtures_dir, "manifest.tsv"), encoding="utf-8") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            if f[0] == "member" and f[4] == "array":
                members[f[1], int(f[2])] = f
            elif f[0] == "lookup":
                lookups.append((f[1], f[2], int(f[3])))
    readers, checked = {}, 0
    for archive, key, index in lookups:
        record = members.get((archive, index))
        if record is None:
            continue
        reader = readers.get(archive) or readers.setdefault(
            archive, mmnpz.load(os.path.join(fixtures_dir, archive)))
        info = reader.info(key)
        assert info.name == record[3]
        assert repr(np.lib.format.dtype_to_descr(info.dtype)) == record[5]
        assert ",".join(map(str, info.shape)) == record[6]
        assert info.fortran_order == (record[7] == "1") and info.nbytes == int(record[8])
        if info.compressed:
            assert info.offset is None
            continue
        data = reader.mmap[info.offset:info.offset + info.nbytes].tobytes()
        if record[9].startswith("sha256:"):
            assert hashlib.sha256(data).hexdigest() == record[9][7:], (archive, key)
        else:
            assert data.hex() == record[9], (archive, key)
        checked += 1
    assert checked > 200


NAN_PAYLOAD = np.array([0x7FF8000000000001], dtype="<u8").view("<f8")
PADDED = np.dtype({"names": ["x"], "formats": ["<u2"], "offsets": [2], "itemsize": 8})


@pytest.mark.parametrize("got, want", [
    (np.arange(4, dtype=">i4"), np.arange(4, dtype="<i4")),              # byte order
    (np.asfortranarray(np.eye(2)), np.eye(2)),                           # memory order
    (np.array([-0.0]), np.array([0.0])),                                 # sign of zero
    (NAN_PAYLOAD, np.array([np.nan])),                                   # NaN payload
    (np.array(["NaT"], "<M8[s]"), np.array(["NaT"], "<M8[ms]")),         # time unit
    (np.zeros(3, [("a", "<f8")]), np.zeros(3, [("b", "<f8")])),          # field name
    (np.zeros(1, PADDED), np.ones(1, PADDED)),                           # field value
])
def test_the_comparison_tells_apart_what_numpy_tells_apart(assert_same, got, want):
    with pytest.raises(AssertionError):
        assert_same(got, want)


def test_the_comparison_ignores_padding_bytes_of_structured_dtypes(assert_same):
    got = np.frombuffer(bytes(range(8)) * 2, dtype=PADDED)
    want = np.zeros(2, PADDED)
    want["x"] = got["x"]
    assert_same(got, want)
