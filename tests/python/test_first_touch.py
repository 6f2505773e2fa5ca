"""Metadata by reads: opening and reading metadata read the file without mapping it; the first
view maps it; an archive cut after it was opened gives an error naming member and offset."""

import os
import re
import zipfile

import numpy as np
import pytest

import mmnpz
from mmnpz import _mmnpz


def mapped(path):
    """Whether this process maps the file at `path` (a line of /proc/self/maps with its inode)."""
    inode = os.stat(path).st_ino
    name = os.path.basename(path)
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) >= 6 and int(fields[4]) == inode and fields[5].endswith(name):
                return True
    return False


def write_archive(path, count=6):
    arrays = {f"a{k}": np.arange(k, k + 3 + k, dtype="<i4").reshape(1, -1) for k in range(count)}
    arrays["readme.txt"] = None
    with mmnpz.NpzWriter(path) as writer:
        for name, value in arrays.items():
            if value is None:
                writer.write_bytes(name, b"not an array")
            else:
                writer.write(name, value)
    return {k: v for k, v in arrays.items() if v is not None}


def test_metadata_leaves_the_file_unmapped_and_the_first_view_maps_it(tmp_path):
    path = str(tmp_path / "meta.npz")
    arrays = write_archive(path)
    reader = mmnpz.load(path)
    assert sorted(reader.files) == sorted(list(arrays) + ["readme.txt"])
    for name, value in arrays.items():
        info = reader.info(name)
        assert (info.kind, info.dtype, info.shape) == ("array", value.dtype, value.shape)
        assert name in reader
    assert reader.info("readme.txt").kind == "bytes"
    assert len(reader) == len(arrays) + 1
    assert not mapped(path)
    item = reader["a3"]
    assert mapped(path)
    np.testing.assert_array_equal(item, arrays["a3"])
    assert item.base is reader.mmap
    assert np.shares_memory(item, reader.mmap)
    np.testing.assert_array_equal(reader["a5"], arrays["a5"])


def test_the_mmap_attribute_maps_the_file_when_first_asked_for(tmp_path):
    path = str(tmp_path / "whole.npz")
    write_archive(path)
    reader = mmnpz.load(path)
    assert not mapped(path)
    whole = reader.mmap
    assert mapped(path)
    assert whole is reader.mmap
    assert whole.tobytes() == open(path, "rb").read()
    assert reader["a1"].base is whole
    reader.close()
    assert reader.mmap is None


def cut_message(path, member, offset, size):
    return (f"{path}: member '{member}' at offset {offset}: the archive was truncated after it "
            f"was opened: the file now ends at byte {size}")


def test_an_archive_cut_after_opening_raises_naming_member_and_offset(tmp_path):
    path = str(tmp_path / "cut.npz")
    arrays = write_archive(path)
    offset = zipfile.ZipFile(path).getinfo("a4.npy").header_offset
    reader = mmnpz.load(path)
    np.testing.assert_array_equal(reader["a0"], arrays["a0"])  # decoded before the cut
    os.truncate(path, offset + 5)
    with pytest.raises(mmnpz.FormatError) as caught:
        reader["a4"]
    assert str(caught.value) == cut_message(path, "a4.npy", offset, offset + 5)
    assert (caught.value.member, caught.value.offset) == ("a4.npy", offset)
    with pytest.raises(mmnpz.FormatError, match="truncated after it was opened"):
        reader.info("a5")


def test_a_dataset_whose_archive_is_cut_while_it_opens_raises_naming_member_and_offset(tmp_path):
    path = str(tmp_path / "cut_dataset.npz")
    write_archive(path, count=40)
    offset = zipfile.ZipFile(path).getinfo("a30.npy").header_offset
    _mmnpz._after_archives_open(lambda: os.truncate(path, offset + 3))
    try:
        with pytest.raises(mmnpz.FormatError) as caught:
            mmnpz.Dataset(path, select="a*")
    finally:
        _mmnpz._after_archives_open(None)
    assert str(caught.value) == cut_message(path, "a30.npy", offset, offset + 3)


def test_a_dataset_opens_without_the_seam_and_gives_every_item(tmp_path):
    path = str(tmp_path / "dataset.npz")
    arrays = write_archive(path, count=40)
    ds = mmnpz.Dataset(path, select="a*")
    assert len(ds) == 40
    for name, value in arrays.items():
        np.testing.assert_array_equal(ds[name], value)


GATHER_AFTER_A_CUT = r"""
import os, sys
import numpy as np
import mmnpz
path, io, cut = sys.argv[1], sys.argv[2], float(sys.argv[3])
ds = mmnpz.Dataset(path, io=io)
idx = np.arange(len(ds))
starts = np.zeros(len(ds), np.int64)
for _ in range(4):  # io="auto": granules read, then re-used through the mapping, then mapped
    ds.gather(idx, starts, 1024)
size = int(os.path.getsize(path) * cut)
os.truncate(path, size)  # as numpy rewriting the file in place
try:
    ds.gather(idx, starts, 1024)
except mmnpz.FormatError as e:
    print(size)
    print(e)
"""


@pytest.mark.parametrize("io", ["auto", "map"])
@pytest.mark.parametrize("cut", [0.3, 0.45, 0.9])
def test_gathering_through_the_mapping_from_an_archive_cut_since_raises_instead_of_sigbus(
        tmp_path, io, cut):
    """Excerpts copied through the mapping from pages the file no longer has fault (SIGBUS);
    the gather reads them instead and says which member was cut. Run in a child: the old code
    was killed by the signal."""
    import subprocess
    import sys

    path = str(tmp_path / "cut.npz")
    with mmnpz.NpzWriter(path) as writer:
        for k in range(64):
            writer.write(f"a{k}", np.full((4096, 64), k, np.float32))  # 1 MiB each
    run = subprocess.run([sys.executable, "-c", GATHER_AFTER_A_CUT, path, io, str(cut)],
                         capture_output=True, text=True, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    size, message = run.stdout.strip().split("\n")
    # Whichever thread meets the cut first names its excerpt: one that the file's end cuts
    # short, or one wholly past it.
    got = re.fullmatch(rf"{re.escape(path)}: member 'a(\d+)\.npy' at offset (\d+): read (\d+) "
                       r"of 262144 bytes: the archive was truncated after it was opened", message)
    assert got, message
    member, offset, read = (int(x) for x in got.groups())
    assert offset + read == int(size) if read else offset >= int(size), message
    assert member >= int(64 * cut) - 1, message
