"""Metadata by reads: opening and reading metadata read the file without mapping it; the first
view maps it; an archive cut after it was opened gives an error naming member and offset."""

import gc
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
    # Paths of other mappings may be any bytes (another test maps a Latin-1 name).
    with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as fh:
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
    with open(path, "rb") as f:
        assert whole.tobytes() == f.read()
    assert reader["a1"].base is whole
    reader.close()
    assert reader.mmap is None


def test_closing_the_reader_unmaps_the_file_once_its_items_are_gone(tmp_path):
    """A first access goes through a function bound to the core's reader: closing lets go of
    it too, so the mapping ends with the last item."""
    path = str(tmp_path / "unmap.npz")
    arrays = write_archive(path)
    reader = mmnpz.load(path)
    item = reader["a2"]
    np.testing.assert_array_equal(item, arrays["a2"])
    reader.close()
    assert mapped(path)  # the item still needs the mapping
    del item
    gc.collect()
    assert not mapped(path)
    with pytest.raises(ValueError, match="the reader is closed"):
        reader["a2"]


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


GATHER_FORTRAN_AFTER_A_CUT = r"""
import os, sys
import numpy as np
import mmnpz
path, io, cut = sys.argv[1], sys.argv[2], float(sys.argv[3])
ds = mmnpz.Dataset(path, io=io)
idx = np.arange(len(ds))
starts = np.zeros(len(ds), np.int64)
got = ds.gather(idx, starts, 1024)
assert all(np.array_equal(got[k], ds[int(k)][:1024]) for k in idx)
size = int(os.path.getsize(path) * cut)
os.truncate(path, size)
try:
    ds.gather(idx, starts, 1024)
except mmnpz.FormatError as e:
    print(size)
    print(e)
"""


@pytest.mark.parametrize("io", ["auto", "map", "read"])
def test_gathering_fortran_order_members_from_an_archive_cut_since_raises_instead_of_sigbus(
        tmp_path, io):
    """Fortran-order members are copied element by element through the mapping, whatever
    `io` says: a page the file no longer has is an error naming member and offset (in a
    child: the old code was killed by the signal)."""
    import subprocess
    import sys

    path = str(tmp_path / "fortran.npz")
    with mmnpz.NpzWriter(path) as writer:
        for k in range(16):
            writer.write(f"f{k}", np.asfortranarray(
                np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64) + k))  # 1 MiB each
    assert not mmnpz.load(path)["f3"].flags.c_contiguous
    starts = {i.filename: i.header_offset for i in zipfile.ZipFile(path).infolist()}
    run = subprocess.run([sys.executable, "-c", GATHER_FORTRAN_AFTER_A_CUT, path, io, "0.5"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    size, message = run.stdout.strip().split("\n")
    got = re.fullmatch(rf"{re.escape(path)}: member 'f(\d+)\.npy' at offset (\d+): the "
                       rf"archive was truncated after it was opened: the file now ends at byte "
                       rf"{size}", message)
    assert got, message
    member, offset = (int(x) for x in got.groups())
    assert offset >= int(size), message  # a byte past the cut
    assert starts[f"f{member}.npy"] < offset < starts[f"f{member}.npy"] + 4096 + (1 << 20)


def without_faulthandler():
    """The environment for a child that enables faulthandler only where it says so."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}


GATHER_AFTER_FAULTHANDLER = r"""
import faulthandler, os, sys
import numpy as np
import mmnpz
path, when = sys.argv[1], sys.argv[2]
ds = mmnpz.Dataset(path, io="map")
idx = np.arange(len(ds))
starts = np.zeros(len(ds), np.int64)
ds.gather(idx, starts, 1024)  # installs mmnpz's SIGBUS handler
faulthandler.enable()  # on top of it, as a user or a test runner may do
if when == "enabled, then disabled":
    ds.gather(idx, starts, 1024)
    faulthandler.disable()  # gives back the handler it found
os.truncate(path, os.path.getsize(path) // 2)
try:
    ds.gather(idx, starts, 1024)
except mmnpz.FormatError as e:
    print(e)
"""


@pytest.mark.parametrize("when", ["enabled", "enabled, then disabled"])
def test_a_gather_after_faulthandler_replaced_the_sigbus_handler_still_raises_on_a_cut(
        tmp_path, when):
    """faulthandler.enable() installs its own SIGBUS handler, which reports a fatal error and
    ends the process; each gather puts mmnpz's back in front of it (which hands faulthandler
    every SIGBUS that is not of a gather's copy)."""
    import subprocess
    import sys

    path = str(tmp_path / "cut.npz")
    with mmnpz.NpzWriter(path) as writer:
        for k in range(16):
            writer.write(f"a{k}", np.full((4096, 64), k, np.float32))
    run = subprocess.run([sys.executable, "-c", GATHER_AFTER_FAULTHANDLER, path, when],
                         capture_output=True, text=True, env=without_faulthandler(), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Fatal Python error" not in run.stderr, run.stderr[-2000:]
    assert re.fullmatch(rf"{re.escape(path)}: member 'a\d+\.npy' at offset \d+: read \d+ of "
                        r"262144 bytes: the archive was truncated after it was opened",
                        run.stdout.strip()), run.stdout


FOREIGN_SIGBUS = r"""
import faulthandler, mmap, os, sys
import numpy as np
import mmnpz
path, other, when = sys.argv[1], sys.argv[2], sys.argv[3]
ds = mmnpz.Dataset(path, io="map")
ds.gather(np.arange(len(ds)), np.zeros(len(ds), np.int64), 1024)
if when != "alone":
    faulthandler.enable()
    ds.gather(np.arange(len(ds)), np.zeros(len(ds), np.int64), 1024)
if when == "faulthandler enabled, then disabled":
    faulthandler.disable()
with open(other, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    os.truncate(other, 0)
    print("touching", flush=True)
    m[8192]  # not a gather's copy: SIGBUS goes on to what was there before
print("survived", flush=True)
"""


@pytest.mark.parametrize("when", ["alone", "faulthandler enabled",
                                  "faulthandler enabled, then disabled"])
def test_a_sigbus_outside_a_gather_still_ends_the_process(tmp_path, when):
    """mmnpz's handler passes a SIGBUS that is not of its copies on: to faulthandler while it
    is enabled (which reports it), else to the default action. Once faulthandler is disabled
    its handler returns without doing anything; the fault then repeats, and the default
    action ends the process (not a loop of faults)."""
    import signal
    import subprocess
    import sys

    path = str(tmp_path / "data.npz")
    with mmnpz.NpzWriter(path) as writer:
        writer.write("a", np.ones((2048, 8), np.float32))
    other = str(tmp_path / "other.bin")
    with open(other, "wb") as f:
        f.write(b"x" * 65536)
    run = subprocess.run([sys.executable, "-c", FOREIGN_SIGBUS, path, other, when],
                         capture_output=True, text=True, env=without_faulthandler(), timeout=120)
    assert run.returncode == -signal.SIGBUS, (run.returncode, run.stderr[-2000:])
    assert run.stdout == "touching\n"
    assert ("Fatal Python error: Bus error" in run.stderr) == (when == "faulthandler enabled")


READ_AFTER_A_CUT = r"""
import os, sys
import mmnpz
path, what, cut = sys.argv[1], sys.argv[2], int(sys.argv[3])
reader = mmnpz.load(path, mmap_mode=None if what == "copy" else "r")
reader.mmap  # the file is mapped before the cut
os.truncate(path, cut)
try:
    if what == "verify":
        print(next(m for name, m in reader.verify().items() if name.startswith("big")))
    elif what == "bytes":
        reader["big.bin"]
    elif what == "copy":  # mmap_mode=None: in memory, as np.load gives it
        reader["big"]
    elif what == "verify one":
        reader.verify("big")
    else:
        reader["big"]
except mmnpz.FormatError as e:
    print(e)
"""


@pytest.mark.parametrize("kind, what", [("stored", "verify"), ("stored", "verify one"),
                                        ("stored", "copy"), ("deflated", "verify"),
                                        ("deflated", "first access"), ("bytes", "bytes")])
def test_checking_or_inflating_a_member_the_file_lost_since_it_was_mapped_raises(
        tmp_path, kind, what):
    """verify() checks stored members' CRC-32 through the mapping, deflated members are
    inflated from it, and mmap_mode=None and members that are not arrays are copied out of
    it: a page the file no longer has is an error naming the member and the byte, not SIGBUS
    (in a child: the old code was killed by the signal)."""
    import subprocess
    import sys

    path = str(tmp_path / f"{kind}.npz")
    big = np.random.default_rng(5).random(1 << 20).astype(np.float32)  # 4 MiB, incompressible
    if kind == "bytes":  # a member that is no .npy: its bytes are copied out of the mapping
        with mmnpz.NpzWriter(path) as writer:
            writer.write("small", np.arange(3))
            writer.write_bytes("big.bin", big.tobytes())
    else:
        save = mmnpz.savez_compressed if kind == "deflated" else mmnpz.savez
        save(path, small=np.arange(3), big=big)
    member = "big.bin" if kind == "bytes" else "big.npy"
    info = zipfile.ZipFile(path).getinfo(member)
    assert info.compress_type == (zipfile.ZIP_DEFLATED if kind == "deflated" else
                                  zipfile.ZIP_STORED)
    # A page boundary in the middle of the member's data: beyond it, every byte faults.
    cut = (info.header_offset + info.compress_size // 2) // 4096 * 4096
    run = subprocess.run([sys.executable, "-c", READ_AFTER_A_CUT, path, what, str(cut)],
                         capture_output=True, text=True, env=without_faulthandler(), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = re.fullmatch(rf"{re.escape(path)}: member '{member}' at offset (\d+): the archive "
                       rf"was truncated after it was opened: the file now ends at byte {cut}",
                       run.stdout.strip())
    assert got, run.stdout
    # A byte of the member past the cut (a large memcpy begins with the source's last bytes).
    assert cut <= int(got.group(1)) < info.header_offset + 200 + info.compress_size, run.stdout
