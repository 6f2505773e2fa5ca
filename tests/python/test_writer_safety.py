"""Writers never break readers (issue 12): atomic replace, interrupted appends, NUL in paths,
one writer per file, shared writers, failed writes."""

import io
import os
import random
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
import zipfile

import numpy as np
import pytest

import mmnpz


def _old_and_new():
    old = {"a": np.arange(100_000, dtype=np.float64), "b": np.arange(12, dtype=np.int32).reshape(3, 4)}
    new = {"a": -np.arange(100_000, dtype=np.float64), "c": np.ones(5, np.uint8)}
    return old, new


def _child(code, *args):
    """Starts a Python child running `code` with the package importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)


# ---- 1. mode "w" replaces atomically -------------------------------------------------------

def test_replace_keeps_views_of_the_old_archive_in_this_process(tmp_path):
    path = tmp_path / "r.npz"
    old, new = _old_and_new()
    mmnpz.savez(path, **old)
    r = mmnpz.load(path)
    a, b = r["a"], r["b"]
    mmnpz.savez(path, **new)
    np.testing.assert_array_equal(a, old["a"])  # the old mapping, not SIGBUS
    np.testing.assert_array_equal(b, old["b"])
    np.testing.assert_array_equal(r["b"], old["b"])  # first access after the replace
    with mmnpz.load(path) as fresh:
        assert sorted(fresh.files) == ["a", "c"]
        np.testing.assert_array_equal(fresh["a"], new["a"])


def test_replace_keeps_views_of_the_old_archive_in_another_process(tmp_path):
    path = tmp_path / "r.npz"
    old, new = _old_and_new()
    mmnpz.savez(path, **old)
    child = _child("""
        import sys, numpy as np, mmnpz
        r = mmnpz.load(sys.argv[1])
        a = r["a"]
        print("ready", flush=True)
        sys.stdin.readline()  # the parent replaced the file
        ok = np.array_equal(a, np.arange(100_000, dtype=np.float64))
        ok = ok and np.array_equal(r["b"], np.arange(12, dtype=np.int32).reshape(3, 4))
        print("old" if ok else "changed", flush=True)
    """, path)
    assert child.stdout.readline().strip() == "ready"
    mmnpz.savez(path, **new)
    out, err = child.communicate("replaced\n", timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "old"


def test_savez_of_a_loaded_archive_over_itself_gives_the_same_arrays(tmp_path):
    path = tmp_path / "same.npz"
    arrays = {"x": np.arange(300_000, dtype=np.int64), "y": np.linspace(0, 1, 77),
              "z": np.arange(24, dtype=np.float32).reshape(2, 3, 4, order="F")}
    np.savez(path, **arrays)
    mmnpz.savez(path, **dict(mmnpz.load(path)))
    with np.load(path) as f:
        assert sorted(f.files) == sorted(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(f[k], v)
    mmnpz.savez(path, **dict(mmnpz.load(path)))  # and again, from mmnpz's own file
    with np.load(path) as f:
        for k, v in arrays.items():
            np.testing.assert_array_equal(f[k], v)


def test_replace_keeps_the_file_mode(tmp_path):
    path = tmp_path / "m.npz"
    mmnpz.savez(path, x=np.arange(3))
    os.chmod(path, 0o640)
    mmnpz.savez(path, x=np.arange(4))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    np.testing.assert_array_equal(mmnpz.load(path)["x"], np.arange(4))


def test_a_killed_replacing_writer_leaves_the_old_archive_byte_identical(tmp_path):
    path = tmp_path / "k.npz"
    old, _ = _old_and_new()
    mmnpz.savez(path, **old)
    before = path.read_bytes()
    child = _child("""
        import sys, numpy as np, mmnpz
        w = mmnpz.NpzWriter(sys.argv[1], "w")
        w.write("first", np.zeros(1 << 20))
        print("written", flush=True)
        sys.stdin.readline()
    """, path)
    assert child.stdout.readline().strip() == "written"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    assert path.read_bytes() == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".k.npz.mmnpz-tmp-")]
    assert leftovers == [f".k.npz.mmnpz-tmp-{child.pid}-1"]
    mmnpz.savez(path, x=np.arange(3))  # the next successful write removes them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.npz"]


def test_durable_writes_read_back(tmp_path):
    path = tmp_path / "d.npz"
    for mode in ("x", "w", "a"):
        with mmnpz.NpzWriter(path, mode, durable=True) as w:
            w.write("m" + mode, np.arange(5))
    assert mmnpz.load(path).files == ["mw", "ma"]


# ---- 2. interrupted appends read as they are ----------------------------------------------

def test_an_interrupted_append_opens_as_before_with_a_warning(tmp_path):
    path = tmp_path / "i.npz"
    mmnpz.savez(path, old=np.arange(10))
    old_size = path.stat().st_size
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("new", np.arange(100_000))  # more than the 64 KiB end record window
    whole = path.read_bytes()
    cut = old_size + 50_000
    path.write_bytes(whole[:cut])
    with pytest.warns(mmnpz.InterruptedAppendWarning) as caught:
        r = mmnpz.load(path)
    assert str(caught[0].message) == (
        f"{path}: an interrupted append left {cut - old_size} bytes after the archive's end "
        "record; opened the archive as it was before the append. "
        f"`mmnpz recover {path}` restores the appended members.")
    assert r.files == ["old"]
    np.testing.assert_array_equal(r["old"], np.arange(10))
    with pytest.raises(mmnpz.FormatError, match="an earlier append was interrupted here"):
        mmnpz.NpzWriter(path, "a")
    path.write_bytes(whole[:len(whole) - 10])  # cut in the new directory: every member intact
    with pytest.warns(mmnpz.InterruptedAppendWarning):
        assert mmnpz.load(path).files == ["old"]
    assert mmnpz.recover(path)["names"] == ["old.npy", "new.npy"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = mmnpz.load(path)
    np.testing.assert_array_equal(r["new"], np.arange(100_000))


def test_a_killed_first_write_names_recover(tmp_path):
    path = tmp_path / "f.npz"
    mmnpz.savez(path, x=np.arange(100_000))
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(mmnpz.FormatError, match=r"; running `mmnpz recover` on it may restore its "
                                                r"members$"):
        mmnpz.load(path)


# ---- 3. NUL in paths -----------------------------------------------------------------------

def test_nul_in_a_path_is_refused_everywhere(tmp_path):
    path = tmp_path / "n.npz"
    mmnpz.savez(path, x=np.arange(3))
    before = path.read_bytes()
    for call in (lambda: mmnpz.load(f"{path}\0x"),
                 lambda: mmnpz.NpzWriter(f"{path}\0.bak", "w"),
                 lambda: mmnpz.NpzWriter(f"{path}\0.bak", "a"),
                 lambda: mmnpz.recover(f"{path}\0x")):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    assert path.read_bytes() == before


# ---- 4. one writer per file, writers shared by threads -------------------------------------

def test_a_second_writer_of_one_file_is_refused(tmp_path):
    path = tmp_path / "two.npz"
    mmnpz.savez(path, x=np.arange(3))
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("y", np.arange(4))
        for mode in ("a", "w"):
            with pytest.raises(ValueError, match=r"another writer \(in this process\) has the "
                                                 r"archive open"):
                mmnpz.NpzWriter(path, mode)
        with pytest.raises(ValueError, match="another writer"):
            mmnpz.recover(path)
    child = _child("""
        import sys, numpy as np, mmnpz
        w = mmnpz.NpzWriter(sys.argv[1], "a")
        print("open", flush=True)
        sys.stdin.readline()
        w.write("z", np.arange(5))
        w.close()
    """, path)
    assert child.stdout.readline().strip() == "open"
    with pytest.raises(ValueError, match=fr"another writer \(process {child.pid}\) has the archive "
                                         "open"):
        mmnpz.NpzWriter(path, "a")
    child.communicate("go\n", timeout=60)
    assert child.returncode == 0
    assert mmnpz.load(path).files == ["x", "y", "z"]


def test_one_writer_shared_by_threads_loses_nothing(tmp_path):
    path = tmp_path / "threads.npz"
    w = mmnpz.NpzWriter(path, "x")
    errors = []

    def work(t):
        try:
            for i in range(40):
                a = np.full((50, 30), t * 1000 + i, dtype=np.int32)
                w.write(f"t{t}_{i}", a if i % 2 else a.T[:, ::1].T[::1, ::2])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    assert errors == []
    with np.load(path) as f:
        assert len(f.files) == 240
        for t in range(6):
            for i in range(40):
                a = f[f"t{t}_{i}"]
                assert a.shape == ((50, 30) if i % 2 else (50, 15))
                assert (a == t * 1000 + i).all()


def test_another_threads_write_waits_for_an_open_stream(tmp_path):
    path = tmp_path / "stream.npz"
    w = mmnpz.NpzWriter(path, "x")
    stream = w.begin("s", np.int64, (1000,))
    stream.write(np.arange(500))
    done = []
    other = threading.Thread(target=lambda: (w.write("t", np.ones(3)), done.append(True)))
    other.start()
    other.join(timeout=0.2)  # it waits for the stream (a deadlock would hang the test)
    stream.write(np.arange(500, 1000))
    stream.commit()
    other.join()
    assert done == [True]
    w.close()
    with np.load(path) as f:
        assert f.files == ["s", "t"]
        np.testing.assert_array_equal(f["s"], np.arange(1000))


# ---- 5. failed writes ----------------------------------------------------------------------

_EFBIG_CHILD = """
    import resource, signal, sys, numpy as np, mmnpz
    path, mode, limit, big = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    w = mmnpz.NpzWriter(path, mode)
    w.write("small", np.arange(10))
    try:
        w.write("big", np.zeros(big, np.uint8))
        print("big written")
    except OSError as e:
        print("write failed", e.errno)
    try:
        w.close()
        print("closed")
    except OSError as e:
        print("close failed", e)
"""


def test_an_append_to_an_empty_archive_after_bytes_holding_zip_records_reads_back(tmp_path):
    """Bytes before an empty archive that hold an end record and a local header of their own
    (the fuzzer's find): appended with the old shifted offsets, the reader took the new archive
    for one stored in an interrupted append and listed nothing."""
    path = tmp_path / "stub.npz"
    stub = b"PK\x05\x06" + bytes(18) + b"PK\x03\x04" + bytes(40)
    empty = io.BytesIO()
    zipfile.ZipFile(empty, "w").close()
    path.write_bytes(stub + empty.getvalue())
    assert len(mmnpz.load(path)) == 0
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("new", np.arange(3))
    assert path.read_bytes().startswith(stub + empty.getvalue())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no InterruptedAppendWarning
        assert mmnpz.load(path)["new"].tolist() == [0, 1, 2]
    assert np.load(path)["new"].tolist() == [0, 1, 2]


def test_a_failed_append_write_leaves_an_archive_with_every_committed_member(tmp_path):
    path = tmp_path / "full.npz"
    mmnpz.savez(path, old=np.arange(7))
    size = path.stat().st_size
    child = _child(_EFBIG_CHILD, path, "a", size + 100_000, 1_000_000)
    out, err = child.communicate(timeout=60)
    assert out.splitlines() == ["write failed 27", "closed"], err
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = mmnpz.load(path)
    assert r.files == ["old", "small"]
    assert r.verify() == {}


def test_a_failed_replace_leaves_the_old_archive(tmp_path):
    path = tmp_path / "full.npz"
    mmnpz.savez(path, old=np.arange(7))
    before = path.read_bytes()
    child = _child(_EFBIG_CHILD, path, "w", 100_000, 1_000_000)
    out, err = child.communicate(timeout=60)
    assert out.splitlines() == ["write failed 27", "closed"], err
    # close() succeeded: the new archive holds what was committed.
    assert mmnpz.load(path).files == ["small"]
    path.write_bytes(before)
    limit = _members_end(tmp_path / "dry.npz", "x", None)
    child = _child(_EFBIG_CHILD, path, "w", limit, 10)  # the members fit, the directory not
    out, err = child.communicate(timeout=60)
    assert out.splitlines() == [
        "big written", f"close failed [Errno 27] cannot write the new archive (the old one is "
        f"kept unchanged) over '{path}': File too large"], err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.npz"]


def _members_end(dry, mode, base):
    """Where the central directory starts once _EFBIG_CHILD wrote its members (big = 10)."""
    if base is not None:
        dry.write_bytes(base.read_bytes())
    with mmnpz.NpzWriter(dry, mode) as w:
        w.write("small", np.arange(10))
        w.write("big", np.zeros(10, np.uint8))
    info = mmnpz.load(dry).info("big")
    end = info.offset + info.nbytes
    dry.unlink()
    return end


def test_a_failed_append_close_keeps_the_old_archive_and_recover_restores_the_rest(tmp_path):
    path = tmp_path / "full.npz"
    mmnpz.savez(path, old=np.arange(7))
    limit = _members_end(tmp_path / "dry.npz", "a", path)
    child = _child(_EFBIG_CHILD, path, "a", limit, 10)
    out, err = child.communicate(timeout=60)
    assert out.splitlines() == [
        "big written", "close failed [Errno 27] cannot write the directory of 2 members appended "
        f"(the archive opens as it was, with 1 member; `mmnpz recover {path}` restores the "
        f"appended ones) to '{path}': File too large"], err
    with pytest.warns(mmnpz.InterruptedAppendWarning):
        assert mmnpz.load(path).files == ["old"]
    assert mmnpz.recover(path)["names"] == ["old.npy", "small.npy", "big.npy"]
    r = mmnpz.load(path)
    np.testing.assert_array_equal(r["small"], np.arange(10))
    assert r.verify() == {}


def test_a_new_archive_that_cannot_hold_even_its_directory_says_no_member_was_committed(
        tmp_path):
    """A writer whose file cannot grow (here past 10 bytes; disk full alike) commits nothing,
    and close() says so instead of sending the user to recover."""
    path = tmp_path / "full.npz"
    child = _child("""
        import resource, signal, sys, numpy as np, mmnpz
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10))
        w = mmnpz.NpzWriter(sys.argv[1], "x")
        try:
            w.write("a", np.arange(100))
        except OSError as e:
            print("write failed", e.errno)
        try:
            w.close()
        except OSError as e:
            print("close failed", e)
    """, path)
    out, err = child.communicate(timeout=60)
    assert out.splitlines() == [
        "write failed 27", "close failed [Errno 27] cannot write the directory of an archive "
        f"with no member committed to '{path}': File too large"], err
    assert path.stat().st_size == 0


def test_names_flagged_utf8_that_are_not_utf8_read_as_cp437(tmp_path):
    """A writer that sets the UTF-8 flag on a name that is not UTF-8: mmnpz reads the name as
    cp437 (as without the flag), so names, keys and `ls --json` stay valid text."""
    path = tmp_path / "flagged.npz"
    with mmnpz.NpzWriter(path) as w:
        w.write("zz_clip", np.arange(3))
    raw = bytearray(path.read_bytes())
    assert raw.count(b"zz_clip") == 2  # the local header and the directory entry
    raw[:] = raw.replace(b"zz_clip", b"\xff\x82_clip")
    local, central = raw.index(b"PK\x03\x04"), raw.index(b"PK\x01\x02")
    for flags_at in (local + 6, central + 8):  # general purpose flags: set bit 11 (UTF-8)
        raw[flags_at + 1] |= 0x08
    path.write_bytes(bytes(raw))
    npz = mmnpz.load(path)
    assert npz.files == ["\u00a0\u00e9_clip"]
    assert np.array_equal(npz["\u00a0\u00e9_clip"], np.arange(3))
    listed = subprocess.run([sys.executable, "-m", "mmnpz", "ls", "--json", str(path)],
                            capture_output=True, check=True).stdout
    import json

    (entry,) = json.loads(listed.decode("utf-8"))
    assert entry["name"] == "\u00a0\u00e9_clip.npy"


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_array_subclasses_are_written_as_numpy_savez_writes_them(tmp_path):
    """Masked arrays (which failed with "cannot reshape array"), matrices and record arrays
    are written as their plain data, as numpy.savez writes them."""
    items = {"masked": np.ma.array([1, 2, 3], mask=[0, 1, 0]), "matrix": np.matrix([[1, 2], [3, 4]]),
             "records": np.rec.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")])}
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    with mmnpz.NpzWriter(ours) as w:
        for name, value in items.items():
            w.write(name, value)
    np.savez(theirs, **items)
    with np.load(ours) as a, np.load(theirs) as b:
        assert a.files == b.files
        for name in a.files:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def test_a_dataset_pattern_with_a_nul_byte_is_refused(tmp_path):
    """A glob cut at its NUL byte used to open whatever the shorter pattern matched."""
    with mmnpz.NpzWriter(tmp_path / "d1.npz") as w:
        w.write("x", np.zeros((4, 2)))
    with pytest.raises(ValueError, match="embedded null byte"):
        mmnpz.Dataset(str(tmp_path / "d*.npz") + "\0x")


def test_load_with_recover_reads_an_interrupted_append_in_memory_without_writing(tmp_path):
    """mmnpz.load(path, recover=True) opens what `mmnpz recover` would make of the file, with
    the appended members, and leaves the file byte for byte as it was."""
    path = tmp_path / "interrupted.npz"
    with mmnpz.NpzWriter(path) as w:
        w.write("old", np.arange(4))
    before = path.stat().st_size
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("new", np.arange(5) * 2)
    full = path.read_bytes()
    # An append killed before its directory: the new member's bytes end the file.
    cut = full.index(b"PK\x01\x02", before)
    path.write_bytes(full[:cut])
    damaged = path.read_bytes()
    with pytest.warns(mmnpz.InterruptedAppendWarning):
        assert mmnpz.load(path).files == ["old"]
    recovered = mmnpz.load(path, recover=True)
    assert recovered.files == ["old", "new"]
    assert np.array_equal(recovered["new"], np.arange(5) * 2)
    assert path.read_bytes() == damaged
    # A first write killed before any directory opens too.
    first = tmp_path / "first.npz"
    with mmnpz.NpzWriter(first) as w:
        w.write("a", np.ones(3))
    raw = first.read_bytes()
    first.write_bytes(raw[:raw.index(b"PK\x01\x02")])
    with pytest.raises(mmnpz.FormatError, match="recover"):
        mmnpz.load(first)
    assert np.array_equal(mmnpz.load(first, recover=True)["a"], np.ones(3))
    with pytest.raises(ValueError, match="recover=True reads a path"):
        mmnpz.load(first, mmap_mode="r+", recover=True)


def test_recover_after_an_interrupted_append_keeps_the_old_entries_as_they_were(tmp_path):
    """Entry comments and attributes (a symlink, an executable) of the archive appended to
    are what an append keeps; recover keeps them too instead of making the entries anew."""
    path = tmp_path / "meta.npz"
    array = io.BytesIO()
    np.save(array, np.arange(5))
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("a.npy")
        info.comment, info.external_attr = b"member comment", 0o100755 << 16
        z.writestr(info, array.getvalue())
        link = zipfile.ZipInfo("link")
        link.external_attr = 0o120777 << 16
        z.writestr(link, b"a.npy")
    old = [(i.filename, i.comment, i.external_attr) for i in zipfile.ZipFile(path).infolist()]
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("b", np.arange(3.0))
    with zipfile.ZipFile(path) as z:
        start_dir = z.start_dir  # the append's directory: a writer killed before writing it
    with open(path, "r+b") as f:
        f.truncate(start_dir)
    with pytest.warns(mmnpz.InterruptedAppendWarning):
        assert mmnpz.load(path).files == ["a", "link"]
    assert mmnpz.recover(path)["names"] == ["a.npy", "link", "b.npy"]
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        assert z.testzip() is None
    assert [(i.filename, i.comment, i.external_attr) for i in infos[:2]] == old
    assert infos[2].filename == "b.npy"
    assert np.load(path)["b"].tolist() == [0.0, 1.0, 2.0]
    assert np.load(path)["a"].tolist() == list(range(5))
    assert subprocess.run(["unzip", "-tq", str(path)], capture_output=True).returncode == 0


def test_opening_with_recover_sees_the_archive_recover_makes_after_an_interrupted_append(
        tmp_path):
    """The in-memory copy keeps the old directory as recover does: here its order, which is
    not the order of the members in the file."""
    path = tmp_path / "reordered.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, values in (("a", np.arange(2)), ("b", np.arange(3)), ("c", np.arange(4))):
            array = io.BytesIO()
            np.save(array, values)
            z.writestr(name + ".npy", array.getvalue())
        z.filelist.reverse()  # the directory lists c, b, a
    with mmnpz.NpzWriter(path, "a") as w:
        w.write("d", np.arange(5.0))
    with zipfile.ZipFile(path) as z:
        start_dir = z.start_dir
    with open(path, "r+b") as f:
        f.truncate(start_dir)  # the append's directory: a writer killed before writing it
    in_memory = mmnpz.load(path, recover=True)
    assert in_memory.files == ["c", "b", "a", "d"]
    assert mmnpz.recover(path)["names"] == ["c.npy", "b.npy", "a.npy", "d.npy"]
    assert mmnpz.load(path).files == in_memory.files == np.load(path).files
    for name in in_memory.files:
        assert np.array_equal(in_memory[name], np.load(path)[name])


def test_an_archive_stored_in_a_member_whose_sizes_follow_its_data_is_not_taken_for_the_file(
        tmp_path):
    """A writer to a pipe (zipfile on an unseekable stream: data descriptors, sizes 0 in the
    local headers) that stored an .npz and died before its directory: the file is refused, not
    read as the inner archive, and recover restores both members."""
    class Pipe(io.RawIOBase):
        def __init__(self):
            self.written = bytearray()

        def writable(self):
            return True

        def write(self, data):
            self.written += data
            return len(data)

    inner, array = io.BytesIO(), io.BytesIO()
    np.savez(inner, x=np.arange(4))
    np.save(array, np.arange(3.0))
    pipe = Pipe()
    with zipfile.ZipFile(pipe, "w") as z:
        z.writestr("a.npy", array.getvalue())
        z.writestr("inner.npz", inner.getvalue())
    written = bytes(pipe.written)
    holder = written.index(b"PK\x03\x04", 1)  # inner.npz's local header
    assert zipfile.ZipFile(io.BytesIO(written)).infolist()[1].flag_bits & 0x08
    directory = written.index(b"PK\x01\x02", written.index(inner.getvalue()) + len(
        inner.getvalue()))
    path = tmp_path / "piped.npz"
    path.write_bytes(written[:directory])
    with pytest.raises(mmnpz.FormatError, match=re.escape(
            f"lies in the bytes of the member whose local header is at offset {holder}, which "
            "no directory lists")):
        mmnpz.load(path)
    assert mmnpz.recover(path)["names"] == ["a.npy", "inner.npz"]
    assert mmnpz.load(path)["inner.npz"] == inner.getvalue()


def test_cp437_names_longer_than_65535_bytes_in_utf8_are_found_as_numpy_finds_them(tmp_path):
    """Names whose cp437 bytes fit the ZIP's 16-bit field but whose UTF-8 form does not (each
    byte above 0x7f takes two or three): found by the name and by its stem, told apart when
    they differ only in their last character, as numpy and zipfile find them."""
    path = tmp_path / "long.npz"
    arrays = {"z" * 40000 + "a": np.arange(3), "z" * 40000 + "b": np.arange(4.0), "c": np.ones(2)}
    with mmnpz.NpzWriter(path) as w:
        for name, a in arrays.items():
            w.write(name, a)
    raw = path.read_bytes()
    assert raw.count(b"z" * 40000) == 4  # two members, each in its local header and entry
    path.write_bytes(raw.replace(b"z" * 40000, b"\x82" * 40000))  # cp437 0x82 is U+00E9
    names = ["\u00e9" * 40000 + "a", "\u00e9" * 40000 + "b", "c"]
    assert [len(n.encode()) for n in names[:2]] == [80001, 80001]
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == [n + ".npy" for n in names]
    npz = mmnpz.load(path)
    theirs = np.load(path)
    assert npz.files == theirs.files == names
    for name, a in zip(names, arrays.values()):
        np.testing.assert_array_equal(npz[name], a)
        np.testing.assert_array_equal(theirs[name], a)
        assert npz[name + ".npy"] is npz[name]
    for missing in ("\u00e9" * 40000 + "d", "\u00e9" * 40001, "\u00e9" * 39999 + "a"):
        with pytest.raises(KeyError):
            npz[missing]
