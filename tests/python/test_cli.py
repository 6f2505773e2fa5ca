"""The mmnpz command line: the executable MMNPZ_CLI when set (CTest), else python3 -m mmnpz."""
import importlib.metadata
import io
import json
import os
import pathlib
import re
import resource
import shutil
import struct
import subprocess
import sys
import sysconfig
import warnings
import zipfile
import zlib

import numpy as np
import pytest

import mmnpz

CLI = [os.environ["MMNPZ_CLI"]] if os.environ.get("MMNPZ_CLI") else [sys.executable, "-m", "mmnpz"]


def run(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd)


def write_mixed(path, save=np.savez):
    """An archive numpy's `save` writes: arrays (one Fortran, one big-endian) and a text member
    (deflated too when `save` deflates)."""
    save(path, a=np.arange(12.0).reshape(3, 4), f=np.asfortranarray(np.ones((2, 3), ">i4")),
         s=np.array([b"ab", b"cd"]))
    compression = zipfile.ZIP_DEFLATED if save is np.savez_compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "a", compression) as z:
        z.writestr("readme.txt", "hello")
    return path


@pytest.fixture
def mixed(tmp_path):
    return write_mixed(tmp_path / "mixed.npz")


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_ls_json_agrees_with_numpy_member_by_member(save, tmp_path):
    path = write_mixed(tmp_path / "mixed.npz", save)
    method = "deflated" if save is np.savez_compressed else "stored"
    out = run("ls", "--json", path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [row["method"] for row in rows] == [method] * 4
    with np.load(path) as f:
        for row in rows:
            if row["name"] == "readme.txt":
                assert row["dtype"] is None and row["bytes"] == 5
                continue
            a = f[row["name"]]
            assert row["dtype"] == a.dtype.str
            assert tuple(row["shape"]) == a.shape
            assert row["bytes"] == a.nbytes
            if method == "stored":
                assert row["offset"] % row["alignment"] == 0
            else:  # inflated data has no place in the file
                assert row["offset"] is None and row["alignment"] is None


def test_ls_and_info_of_more_members_than_a_chunk_agree_with_numpy_and_zipfile(tmp_path):
    # ls and info read headers 4,096 members at a time in file order (reader.visit_arrays),
    # then print in directory order: 9,000 members, among them object arrays, text and
    # deflated members, cross two chunk ends.
    path = tmp_path / "many.npz"
    rng = np.random.default_rng(5)
    arrays = {f"m{k:05d}": rng.integers(0, 9, size=rng.integers(0, 5, size=rng.integers(0, 3)))
              .astype(rng.choice(["<i2", ">f8", "<u1"])) for k in range(9000)}
    np.savez(path, **arrays)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("readme.txt", "hello")
        z.writestr("z_deflated.npy", z.read("m00007.npy"), compress_type=zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path, "a") as z:  # an object array past the second chunk end
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        z.writestr("z_object.npy", buf.getvalue())
    out = run("ls", "--json", path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    assert [row["name"] for row in rows] == [i.filename for i in infos]
    data = path.read_bytes()
    with np.load(path, allow_pickle=True) as f:
        for row, info in zip(rows, infos):
            if row["name"] == "readme.txt":
                assert row["dtype"] is None and row["shape"] is None and row["bytes"] == 5
                continue
            a = f[row["name"]]
            if a.dtype == object:
                assert row["dtype"] == "object" and row["offset"] is None
                continue
            assert (row["dtype"], tuple(row["shape"]), row["bytes"]) == \
                (a.dtype.str, a.shape, a.nbytes), row
            if info.compress_type == zipfile.ZIP_STORED:
                # the data ends where the member ends
                name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
                end = info.header_offset + 30 + name_len + extra_len + info.file_size
                assert row["offset"] + row["bytes"] == end, row
            else:
                assert row["offset"] is None
    info = run("info", path)
    assert info.returncode == 0, info.stderr
    assert "9003 members" in info.stdout, info.stdout


def test_ls_and_info_print_one_line_per_member_and_a_summary(mixed):
    ls = run("ls", mixed)
    assert ls.returncode == 0 and len(ls.stdout.splitlines()) == 4
    assert "f.npy" in ls.stdout and ">i4" in ls.stdout and "(2, 3)" in ls.stdout
    info = run("info", mixed)
    assert info.returncode == 0
    assert f"{mixed}: 4 members" in info.stdout and "duplicate names: 0" in info.stdout


def test_verify_passes_good_archives_and_names_a_damaged_member(mixed, tmp_path):
    assert run("verify", mixed).returncode == 0
    offset = mmnpz.load(mixed).info("f").offset
    data = bytearray(mixed.read_bytes())
    data[offset] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    out = run("verify", mixed, bad)
    assert out.returncode == 1
    assert out.stderr.startswith(f"mmnpz verify: {bad}: member 'f.npy' at offset ")
    assert ": CRC-32 is 0x" in out.stderr
    assert f"{mixed}: OK" in out.stdout and f"{bad}: BAD" in out.stdout
    assert run("verify", "--quick", mixed).returncode == 0


def test_verify_checks_each_member_of_a_repeated_name(tmp_path):
    path = tmp_path / "namesakes.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("a.txt", "first")
            z.writestr("a.txt", "second")
    data = bytearray(path.read_bytes())
    data[data.index(b"first")] ^= 1  # the member that numpy's rule hides
    path.write_bytes(bytes(data))
    out = run("verify", path)
    assert out.returncode == 1 and f"{path}: BAD (2 members checked, 1 bad)" in out.stdout
    assert out.stderr.startswith(f"mmnpz verify: {path}: member 'a.txt' at offset 35: CRC-32 is")


def test_align_keeps_repeated_names_and_merge_refuses_them_before_writing(tmp_path):
    # align refused an archive holding a name twice (after copying the members before it).
    path = tmp_path / "namesakes.npz"
    first, second = io.BytesIO(), io.BytesIO()
    np.save(first, np.arange(3))
    np.save(second, np.arange(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.npy", first.getvalue())
            z.writestr("x.npy", second.getvalue())
    aligned = tmp_path / "aligned.npz"
    assert run("align", path, aligned).returncode == 0
    with zipfile.ZipFile(aligned) as z:
        assert [i.filename for i in z.infolist()] == ["x.npy", "x.npy"]
    assert np.load(aligned)["x"].tolist() == [0, 1, 2, 3, 4]  # the last, as numpy reads both
    refused = run("merge", tmp_path / "m.npz", path)
    assert refused.returncode == 1 and refused.stderr == (
        f"mmnpz merge: {path}: member 'x.npy': the archive holds this name twice; pass "
        f"--allow-duplicates to keep both (readers see the last)\n")
    assert not (tmp_path / "m.npz").exists()


def test_align_rewrites_any_archive_aligned_and_readable_by_numpy(mixed, tmp_path):
    compressed = tmp_path / "c.npz"
    np.savez_compressed(compressed, x=np.arange(1000), y=np.eye(3))
    refused = run("align", compressed, tmp_path / "no.npz")
    assert refused.returncode == 1 and "pass --decompress" in refused.stderr
    assert not (tmp_path / "no.npz").exists()
    for source in (mixed, compressed):
        out = tmp_path / f"aligned_{source.name}"
        done = run("align", "--decompress", "--align", "4096", source, out)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no progress bar in a pipe
        with np.load(source) as want, np.load(out) as got:
            assert want.files == got.files
            for k in want.files:
                assert np.array_equal(want[k], got[k]) if k != "readme.txt" else want[k] == got[k]
        assert zipfile.ZipFile(out).testzip() is None
        reader = mmnpz.load(out)
        for k in reader.files:
            info = reader.info(k)
            assert info.kind == "bytes" or info.offset % 4096 == 0


def test_merge_joins_archives_and_refuses_duplicate_names(mixed, tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, b=np.arange(3))
    merged = tmp_path / "merged.npz"
    assert run("merge", merged, mixed, other).returncode == 0
    assert np.load(merged).files == ["a", "f", "s", "readme.txt", "b"]
    # Refused before OUT is made (it was refused at the first duplicate, after copying every
    # member before it), naming both inputs.
    again = run("merge", tmp_path / "dup.npz", mixed, other, mixed)
    assert again.returncode == 1 and again.stderr == (
        f"mmnpz merge: {mixed}: member 'a.npy': input 1 ('{mixed}') holds this name too; pass "
        f"--allow-duplicates to keep both (readers see the last)\n")
    assert not (tmp_path / "dup.npz").exists()
    assert run("merge", "--allow-duplicates", tmp_path / "dup.npz", mixed, mixed).returncode == 0
    assert run("merge", merged, other).returncode == 2  # OUT exists


def test_merge_joins_more_archives_than_the_process_may_have_files_open(tmp_path):
    inputs = []
    for i in range(50):
        inputs.append(tmp_path / f"in{i:02d}.npz")
        np.savez(inputs[-1], **{f"x{i}": np.full(3, i)})

    def few_files():
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, hard))

    merged = tmp_path / "merged.npz"
    got = subprocess.run(CLI + ["merge", str(merged)] + [str(p) for p in inputs],
                         capture_output=True, text=True, preexec_fn=few_files)
    assert (got.returncode, got.stderr) == (0, "")
    assert got.stdout == f"wrote {merged}: 50 members, data aligned to 64 bytes\n"
    loaded = np.load(merged)
    assert loaded.files == [f"x{i}" for i in range(50)]
    assert all(np.array_equal(loaded[f"x{i}"], np.full(3, i)) for i in range(50))


def test_ls_and_info_list_a_bzip2_member_and_verify_names_its_method(tmp_path):
    path = tmp_path / "bz.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as z:
        f = io.BytesIO()
        np.save(f, np.arange(6.0))
        z.writestr("a.npy", f.getvalue())
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as z:
        z.writestr("b.txt", "text")
    got = run("ls", "--json", path)
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)
    assert [(m["name"], m["method"], m["dtype"], m["bytes"]) for m in listed] == [
        ("a.npy", "bzip2", None, 176), ("b.txt", "stored", None, 4)]
    assert run("ls", path).stdout.split("\n")[0].split() == ["a.npy", "-", "-", "176", "bzip2",
                                                             "-", "-"]
    info = json.loads(run("info", "--json", path).stdout)
    assert (info["members"], info["bytes"], info["deflated"]) == (2, 180, 0)
    verified = run("verify", path)
    assert verified.returncode == 1
    assert (f"mmnpz verify: {path}: member 'a.npy' at offset 0: compression method 12 is not "
            "supported (only 0, stored, and 8, deflated)") in verified.stderr


def test_extract_writes_npy_files_numpy_loads_and_never_overwrites(mixed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run("extract", "-o", out, mixed, "a", "readme.txt")
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.load(out / "a.npy"), np.arange(12.0).reshape(3, 4))
    assert (out / "readme.txt").read_text() == "hello"
    again = run("extract", "-o", out, mixed, "a")
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == f"mmnpz extract: '{out}/a.npy' exists: not overwritten\n"  # no help
    missing = run("extract", "-o", out, mixed, "nope")
    assert missing.returncode == 1 and "no such member" in missing.stderr


def test_extract_keeps_files_inside_the_target_directory(tmp_path):
    sneaky = tmp_path / "sneaky.npz"
    with zipfile.ZipFile(sneaky, "w") as z:
        z.writestr("../../escape.txt", "x")
    out = tmp_path / "out"
    out.mkdir()
    assert run("extract", "-o", out, sneaky, "../../escape.txt").returncode == 0
    assert (out / "escape.txt").exists() and not (tmp_path.parent / "escape.txt").exists()


@pytest.mark.parametrize("name", ["..", "a/..", "a/.", "a/"])
def test_extract_refuses_a_member_whose_name_ends_in_no_file_name(tmp_path, name):
    """Such a member is not written at all (exit status 1, as for a file that cannot be
    written); the members named before it are."""
    path = tmp_path / "odd.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("fine.txt", "x")
        z.writestr(name, "y")
    out = tmp_path / "out"
    out.mkdir()
    done = run("extract", "-o", out, path, "fine.txt", name)
    assert (done.returncode, done.stdout) == (1, f"{out}/fine.txt\n")
    assert done.stderr == (f"mmnpz extract: {path}: member '{name}': its name ends in no usable "
                           "file name: not extracted\n")
    assert sorted(p.name for p in out.iterdir()) == ["fine.txt"]


def test_recover_restores_the_intact_members_of_a_cut_archive(tmp_path):
    path = tmp_path / "cut.npz"
    with mmnpz.NpzWriter(path) as w:
        for i in range(5):
            w.write(f"m{i}", np.full(1000, i))
    data = path.read_bytes()
    path.write_bytes(data[: mmnpz.load(path).info("m3").offset + 100])  # inside m3's data
    assert run("verify", path).returncode == 1
    done = run("recover", path)
    assert done.returncode == 0 and "recovered 3 members" in done.stdout
    assert np.load(path).files == ["m0", "m1", "m2"]
    assert "nothing changed" in run("recover", path).stdout


# Runs a command as the only child of a fresh Python, so that its peak RSS is the command's.
PEAK_RSS = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(done.stderr)
sys.stdout.write(done.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)  # KiB on Linux
sys.exit(done.returncode)
"""


class BigDeflated:
    """A 1.5 GiB C-order int32 array of `rows` rows of 0..cols-1, as one deflated member "x.npy"
    of an archive of ~12 MB; `crc` is the member's CRC-32 as the directory states it."""

    cols = 64
    rows = (3 << 29) // (4 * cols)  # 1.5 GiB; row k is 0..63, a period deflate finds at once
    nbytes = rows * cols * 4

    def __init__(self, path):
        self.path = path
        header = {"descr": "<i4", "fortran_order": False, "shape": (self.rows, self.cols)}
        npy = io.BytesIO()
        np.lib.format.write_array_header_1_0(npy, header)
        piece = np.tile(np.arange(self.cols, dtype="<i4"), 1 << 16).tobytes()  # 16 MiB
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            with z.open("x.npy", "w", force_zip64=True) as f:
                f.write(npy.getvalue())
                for _ in range(self.nbytes // len(piece)):
                    f.write(piece)
        with zipfile.ZipFile(path) as z:
            self.crc = z.getinfo("x.npy").CRC
            self.member_size = z.getinfo("x.npy").file_size
        assert path.stat().st_size < self.nbytes // 100


@pytest.fixture(scope="module")
def big_deflated(tmp_path_factory):
    """Built once for the tests of streaming; the tests delete what they write next to it."""
    directory = tmp_path_factory.mktemp("big")
    if shutil.disk_usage(directory).free < 4 << 30:
        pytest.skip("needs 4 GiB of free disk")
    big = BigDeflated(directory / "big_deflated.npz")
    yield big
    big.path.unlink(missing_ok=True)


def member_data_offset(path, name):
    """Where the member's (compressed) bytes start in the file, after its local header."""
    with zipfile.ZipFile(path) as z:
        local_header = z.getinfo(name).header_offset
    with open(path, "rb") as f:
        f.seek(local_header + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return local_header + 30 + name_len + extra_len


def peak_rss(*args):
    """Runs the CLI as the only child of a fresh Python: (its completed process, its peak RSS)."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS] + CLI + [str(a) for a in args],
                          capture_output=True, text=True)
    stdout, _, peak = done.stdout[:-1].rpartition("\n")
    done.stdout = stdout + "\n" if stdout else ""
    return done, int(peak)


def test_align_decompress_streams_a_deflated_member_larger_than_its_memory(big_deflated, tmp_path):
    """1.5 GiB of int32 that deflate shrinks to ~12 MB: align --decompress stays under 256 MiB."""
    source, out = big_deflated.path, tmp_path / "big_aligned.npz"
    rows, cols, nbytes = big_deflated.rows, big_deflated.cols, big_deflated.nbytes
    try:
        done, peak = peak_rss("align", "--decompress", source, out)
        assert done.returncode == 0, done.stderr
        print(f"align --decompress of a {nbytes} byte member: peak RSS {peak} bytes")
        assert peak < 256 << 20 and peak < nbytes // 6

        # numpy's view of the output, found with zipfile and numpy alone.
        with zipfile.ZipFile(out) as z:
            info = z.getinfo("x.npy")
            assert info.compress_type == zipfile.ZIP_STORED
        member_start = member_data_offset(out, "x.npy")
        with open(out, "rb") as f:
            f.seek(member_start)
            assert np.lib.format.read_magic(f) == (1, 0)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            data_offset = f.tell()
        assert (shape, fortran, dtype) == ((rows, cols), False, np.dtype("<i4"))
        assert data_offset % 64 == 0
        a = np.memmap(out, dtype=dtype, mode="r", offset=data_offset, shape=shape)
        want = np.arange(cols, dtype="<i4")
        for k in (0, 1, rows // 2, rows - 1):
            assert np.array_equal(a[k], want)
        assert np.array_equal(a[-1000:].sum(axis=0), want * 1000)
        crc = 0  # the CRC-32 the directory states, of the member's bytes as written
        with open(out, "rb") as f:
            f.seek(member_start)
            for _ in range(0, info.file_size, 64 << 20):
                crc = zlib.crc32(f.read(min(64 << 20, member_start + info.file_size - f.tell())), crc)
        assert crc == info.CRC
        view = mmnpz.load(out)["x"]
        assert view.shape == (rows, cols) and np.array_equal(view[rows // 3], want)
        del a, view
    finally:
        out.unlink(missing_ok=True)


def test_ls_verify_and_extract_stream_a_deflated_member_larger_than_their_memory(big_deflated,
                                                                                 tmp_path):
    """ls and info inflate only the .npy header of a 1.5 GiB deflated member, verify and extract
    inflate it in pieces: each stays under 128 MiB, and extract writes the .npy numpy reads."""
    big = big_deflated
    rows, cols, nbytes = big.rows, big.cols, big.nbytes
    limit = 128 << 20  # the executable needs ~25 MB, python -m mmnpz ~60 MB
    peaks = {}
    bad = tmp_path / "bad_crc.npz"
    out = tmp_path / "out"
    out.mkdir()
    extracted = out / "x.npy"
    try:
        ls, peaks["ls --json"] = peak_rss("ls", "--json", big.path)
        assert ls.returncode == 0, ls.stderr
        with zipfile.ZipFile(big.path) as z, z.open("x.npy") as f:  # numpy reads the header
            assert np.lib.format.read_magic(f) == (1, 0)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        assert json.loads(ls.stdout) == [{
            "name": "x.npy", "dtype": dtype.str, "shape": list(shape), "bytes": nbytes,
            "method": "deflated", "offset": None, "alignment": None}]
        ls, peaks["ls"] = peak_rss("ls", big.path)
        assert ls.returncode == 0, ls.stderr
        assert ls.stdout.split() == ["x.npy", "<i4", f"({rows},", f"{cols})", str(nbytes),
                                     "deflated", "-", "-"]
        info, peaks["info"] = peak_rss("info", big.path)
        assert info.returncode == 0 and f"{big.path}: 1 member," in info.stdout, info.stderr

        # A copy whose directory states another CRC-32: found only at the end of the stream.
        data = bytearray(big.path.read_bytes())
        entry = data.rindex(b"PK\x01\x02")  # the central directory's only entry
        struct.pack_into("<I", data, entry + 16, big.crc ^ 1)
        bad.write_bytes(bytes(data))
        with zipfile.ZipFile(bad) as z:
            assert z.getinfo("x.npy").CRC == big.crc ^ 1
        verify, peaks["verify --threads 2 (good, bad)"] = peak_rss("verify", "--threads", "2",
                                                                   big.path, bad)
        assert verify.returncode == 1
        assert f"{big.path}: OK (1 member checked)" in verify.stdout
        assert f"{bad}: BAD (1 member checked, 1 bad)" in verify.stdout
        assert verify.stderr.splitlines() == [
            f"mmnpz verify: {bad}: member 'x.npy' at offset {member_data_offset(big.path, 'x.npy')}: CRC-32 is "
            f"0x{big.crc:08x}, the central directory says 0x{big.crc ^ 1:08x}"]
        bad.unlink()

        done, peaks["extract"] = peak_rss("extract", "-o", out, big.path, "x")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{extracted}\n"
        assert extracted.stat().st_size == big.member_size
        crc = 0
        with open(extracted, "rb") as f:
            for piece in iter(lambda: f.read(64 << 20), b""):
                crc = zlib.crc32(piece, crc)
        assert crc == big.crc
        a = np.load(extracted, mmap_mode="r")  # numpy's view of the file
        assert (a.shape, a.dtype, np.isfortran(a)) == ((rows, cols), np.dtype("<i4"), False)
        want = np.arange(cols, dtype="<i4")
        for k in (0, 1, rows // 2, rows - 1):
            assert np.array_equal(a[k], want)
        assert np.array_equal(a[-1000:].sum(axis=0), want * 1000)
        del a

        print()
        for command, peak in peaks.items():
            print(f"{command} of a {nbytes} byte deflated member: peak RSS {peak} bytes")
        assert all(peak < limit for peak in peaks.values()), peaks
    finally:
        bad.unlink(missing_ok=True)
        extracted.unlink(missing_ok=True)


@pytest.mark.parametrize("command", ["ls", "info", "verify", "align", "merge", "extract", "recover"])
def test_every_subcommand_has_help(command):
    out = run(command, "--help")
    assert out.returncode == 0 and out.stdout.startswith(f"usage: mmnpz {command}")


def test_usage_errors_exit_2_with_a_sentence():
    assert run().returncode == 2
    unknown = run("frob")
    assert unknown.returncode == 2 and "unknown command 'frob'" in unknown.stderr
    missing = run("align", "only_one.npz")
    assert missing.returncode == 2 and "align needs IN and OUT" in missing.stderr
    bad_option = run("ls", "--nope", "x.npz")
    assert bad_option.returncode == 2 and "unknown option --nope" in bad_option.stderr


# --- version, help, "--", --json on every command, the installed command -----------------------

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = ["ls", "info", "verify", "align", "merge", "extract", "recover"]


def header_version():
    """The version include/mmnpz/version.hpp states."""
    text = (ROOT / "include" / "mmnpz" / "version.hpp").read_text()
    parts = [re.search(rf"#define MMNPZ_VERSION_{k} (\d+)", text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def test_version_prints_the_version_of_version_hpp():
    out = run("--version")
    assert (out.returncode, out.stdout, out.stderr) == (0, f"mmnpz {header_version()}\n", "")
    assert mmnpz.__version__ == header_version()


def test_python_m_mmnpz_runs_the_same_command_line(mixed):
    """python -m mmnpz (the extension's main()) prints what the executable prints; its help
    adds the Python package's pack command."""
    from mmnpz.__main__ import PACK_HELP

    for args in (["--version"], ["--help"], ["ls", mixed], ["info", "--json", mixed],
                 ["verify", mixed], ["ls", "--nope", mixed], ["frob"]):
        want = run(*args)
        got = subprocess.run([sys.executable, "-m", "mmnpz"] + [str(a) for a in args],
                             capture_output=True, text=True)
        executable = CLI[0] != sys.executable  # else `want` comes from python -m mmnpz too
        want_stdout = (want.stdout + PACK_HELP + "\n" if args == ["--help"] and executable
                       else want.stdout)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want_stdout,
                                                            want.stderr), args


def test_mmnpz_pack_runs_from_the_command_line(tmp_path):
    """`python -m mmnpz pack` (and so the installed `mmnpz pack`) packs arrays into shards."""
    a = np.arange(12, dtype=np.int16).reshape(6, 2)
    np.save(tmp_path / "a.npy", a)
    out = tmp_path / "out" / "train.npz"
    done = subprocess.run([sys.executable, "-m", "mmnpz", "pack", str(out), str(tmp_path / "a.npy")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (shard,) = sorted((tmp_path / "out").glob("train-*-of-*.npz"))
    with np.load(shard) as f:
        assert f.files == ["a"] and np.array_equal(f["a"], a)
    helped = subprocess.run([sys.executable, "-m", "mmnpz", "help", "pack"], capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "usage: mmnpz pack" in helped.stdout


def installed_distribution():
    """The mmnpz-native distribution that the imported mmnpz package belongs to, or None when
    mmnpz is imported from a build tree (PYTHONPATH) rather than installed by pip."""
    try:
        dist = importlib.metadata.distribution("mmnpz-native")
    except importlib.metadata.PackageNotFoundError:
        return None
    init = pathlib.Path(dist.locate_file("mmnpz/__init__.py")).resolve()
    return dist if init == pathlib.Path(mmnpz.__file__).resolve() else None


def test_pip_installs_the_mmnpz_command(mixed):
    """pip install . puts an `mmnpz` command on the environment's bin that runs the CLI."""
    dist = installed_distribution()
    if dist is None:
        pytest.skip("mmnpz is imported from a build tree, not installed by pip")
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert scripts == {"mmnpz": "mmnpz.__main__:main"}
    command = pathlib.Path(sysconfig.get_path("scripts")) / "mmnpz"
    assert command.is_file() and os.access(command, os.X_OK)
    assert dist.metadata["License"] == "MIT" and dist.version == header_version()
    for args in (["--version"], ["ls", "--json", mixed], ["align"]):
        want = subprocess.run([sys.executable, "-m", "mmnpz"] + [str(a) for a in args],
                              capture_output=True, text=True)
        got = subprocess.run([str(command)] + [str(a) for a in args], capture_output=True,
                             text=True)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout,
                                                            want.stderr), args
    assert got.returncode == 2 and "align needs IN and OUT" in got.stderr


def test_help_and_readme_agree():
    """The README shows `mmnpz --help` as it prints, and each command's usage line."""
    readme = (ROOT / "README.md").read_text()
    top = run("--help")
    assert top.returncode == 0 and top.stdout in readme
    for word in ("exit status: 0 success; 1 a failed check", "2 a usage error", "--json", "--version"):
        assert word in top.stdout
    for command in COMMANDS:
        out = run(command, "--help")
        assert out.returncode == 0, command
        assert "--json" in out.stdout and "exit status: 0 success" in out.stdout, command
        usage = out.stdout.splitlines()[0]
        assert usage in readme, usage
        assert run("help", command).stdout == out.stdout
        assert "4096" not in out.stdout and "\n\n\n" not in out.stdout


@pytest.mark.parametrize("command", ["ls", "info", "align", "merge"])
def test_help_states_alignments_up_to_65536(command):
    out = run(command, "--help")
    assert out.returncode == 0 and "65536" in out.stdout


def test_ls_and_info_report_alignments_up_to_65536(mixed, tmp_path):
    aligned = tmp_path / "aligned.npz"
    assert run("align", "--align", "65536", mixed, aligned).returncode == 0
    rows = json.loads(run("ls", "--json", aligned).stdout)
    arrays = [row for row in rows if row["dtype"] is not None]
    assert len(arrays) == 3
    assert all(row["offset"] % 65536 == 0 and row["alignment"] == 65536 for row in arrays)
    info = json.loads(run("info", "--json", aligned).stdout)
    assert info["alignments"] == {"65536": 3}
    assert "stored arrays by data alignment (bytes): 65536: 3\n" in run("info", aligned).stdout
    for bad in ("3", "131072", "0", "-1", "-64", "x", "99999999999999999999999"):
        out = run("align", "--align", bad, mixed, tmp_path / "never.npz")
        assert out.returncode == 2, bad
        assert f"--align {bad} is not a power of two from 1 to 65536" in out.stderr
    assert not (tmp_path / "never.npz").exists()


def test_a_negative_or_empty_thread_count_is_refused_not_wrapped_or_taken_as_none(mixed):
    out = run("verify", "--threads", "-1", mixed)
    assert out.returncode == 2 and out.stdout == ""
    assert "mmnpz verify: --threads -1 is not a whole number" in out.stderr
    out = run("verify", "--threads", "", mixed)  # was the default, as if not given
    assert out.returncode == 2 and out.stdout == ""
    assert "mmnpz verify: --threads  is not a whole number" in out.stderr
    assert run("verify", "--threads", "0", mixed).returncode == 0  # taken as one thread


def test_a_dangling_symlink_as_out_is_an_existing_out(mixed, tmp_path):
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "nowhere.npz")
    for command in (("align", mixed, link), ("merge", link, mixed)):
        out = run(*command)
        assert out.returncode == 2
        assert out.stderr == f"mmnpz {command[0]}: '{link}' exists: choose a new OUT\n"
    assert link.is_symlink() and not (tmp_path / "nowhere.npz").exists()


def test_double_dash_ends_options(tmp_path):
    np.savez(tmp_path / "-x.npz", a=np.arange(3))
    refused = run("ls", "-x.npz", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown option -x.npz" in refused.stderr
    ls = run("ls", "--json", "--", "-x.npz", cwd=tmp_path)
    assert ls.returncode == 0, ls.stderr
    assert [row["name"] for row in json.loads(ls.stdout)] == ["a.npy"]
    two = run("ls", "-x.npz", "--", "-x.npz", cwd=tmp_path)  # options end at "--" only
    assert two.returncode == 2 and "unknown option -x.npz" in two.stderr
    assert run("verify", "--", "-x.npz", cwd=tmp_path).stdout == "-x.npz: OK (1 member checked)\n"
    assert run("info", "--", "-x.npz", cwd=tmp_path).returncode == 0
    done = run("align", "--align", "128", "--", "-x.npz", "-y.npz", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "wrote -y.npz: 1 member, data aligned to 128 bytes\n"
    assert np.array_equal(np.load(tmp_path / "-y.npz")["a"], np.arange(3))
    out = run("extract", "-o", "out", "--", "-x.npz", "a", cwd=tmp_path)
    assert out.returncode == 1 and "'out/a.npy'" in out.stderr  # no directory out: an I/O error
    (tmp_path / "out").mkdir()
    out = run("extract", "-o", "out", "--", "-x.npz", "a", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "out/a.npy\n"
    assert run("recover", "--", "-x.npz", cwd=tmp_path).returncode == 0
    extra = run("recover", "--", "-x.npz", "-y.npz", cwd=tmp_path)
    assert extra.returncode == 2 and "recover needs one FILE" in extra.stderr


def ls_text_rows(stdout):
    """The columns of `mmnpz ls` for one FILE (fixed widths: the shape holds spaces)."""
    rows = []
    for line in stdout.splitlines():
        cells = [line[0:24], line[25:35], line[36:52], line[53:65], line[66:74], line[75:87],
                 line[88:93]]
        rows.append([c.strip() for c in cells])
    return rows


def test_ls_json_agrees_with_ls(mixed, tmp_path):
    compressed = write_mixed(tmp_path / "compressed.npz", np.savez_compressed)
    for path in (mixed, compressed):
        text = run("ls", path)
        rows = json.loads(run("ls", "--json", path).stdout)
        assert [[r["name"], r["dtype"] or "-",
                 str(tuple(r["shape"])) if r["shape"] is not None else "-", str(r["bytes"]),
                 r["method"], "-" if r["offset"] is None else str(r["offset"]),
                 "-" if r["alignment"] is None else str(r["alignment"])]
                for r in rows] == ls_text_rows(text.stdout)
    both = run("ls", "--json", mixed, compressed)  # one array per FILE, one per line
    assert [len(json.loads(line)) for line in both.stdout.splitlines()] == [4, 4]


INFO = re.compile(
    r"(?P<path>.*): (?P<members>\d+) members?, (?P<bytes>\d+) bytes \((?P<file_bytes>\d+) in the "
    r"file\), (?P<deflated>\d+) deflated, zip64 (?P<zip64>yes|no)\n"
    r"  stored arrays by data alignment \(bytes\):(?P<alignments>.*)\n"
    r"  bytes before the archive: (?P<leading_bytes>\d+); comment: (?P<comment_bytes>\d+) bytes; "
    r"duplicate names: (?P<duplicate_names>\d+)\n"
    r"  bytes after the archive: (?P<bytes_after_archive>\d+)(?P<interrupted_append> \(an "
    r"interrupted append: `mmnpz recover` restores its members\))?\n")


def test_info_json_agrees_with_info(mixed, tmp_path):
    compressed = write_mixed(tmp_path / "compressed.npz", np.savez_compressed)
    with zipfile.ZipFile(mixed, "a") as z:
        z.comment = b"twelve bytes"
    text = run("info", mixed, compressed)
    js = run("info", "--json", mixed, compressed)
    assert text.returncode == js.returncode == 0
    objects = [json.loads(line) for line in js.stdout.splitlines()]
    matches = list(INFO.finditer(text.stdout))
    assert len(objects) == len(matches) == 2
    for got, m in zip(objects, matches):
        alignments = m["alignments"].strip()
        want = {
            "path": m["path"], "zip64": m["zip64"] == "yes",
            "interrupted_append": m["interrupted_append"] is not None,
            "alignments": {} if alignments == "none" else
            {k: int(v) for k, v in re.findall(r"(\d+): (\d+)", alignments)},
            **{k: int(m[k]) for k in ("members", "bytes", "file_bytes", "deflated",
                                      "leading_bytes", "comment_bytes", "duplicate_names",
                                      "bytes_after_archive")}}
        assert got == want
    assert objects[0]["comment_bytes"] == 12 and objects[0]["deflated"] == 0
    assert objects[1]["deflated"] == 4 and objects[1]["alignments"] == {}
    assert objects[0]["path"] == str(mixed) and sum(objects[0]["alignments"].values()) == 3


def test_commands_warn_of_an_interrupted_append_and_info_counts_its_bytes(mixed, tmp_path):
    old_size = mixed.stat().st_size
    with mmnpz.NpzWriter(mixed, "a") as w:
        w.write("new", np.arange(100_000))  # more than the 64 KiB end record window
    cut = old_size + 50_000
    mixed.write_bytes(mixed.read_bytes()[:cut])
    warning = (f"mmnpz: warning: {mixed}: an interrupted append left {cut - old_size} bytes "
               "after the archive's end record; opened the archive as it was before the append. "
               f"`mmnpz recover {mixed}` restores the appended members.\n")
    out = tmp_path / "out"
    out.mkdir()
    for args in (["ls", mixed], ["info", mixed], ["verify", mixed],
                 ["align", mixed, tmp_path / "aligned.npz"],
                 ["merge", tmp_path / "merged.npz", mixed],
                 ["extract", "-o", out, mixed, "a", "readme.txt"]):
        got = run(*args)
        assert (got.returncode, got.stderr) == (0, warning), args
    info = json.loads(run("info", "--json", mixed).stdout)
    assert (info["bytes_after_archive"], info["interrupted_append"]) == (cut - old_size, True)
    assert sorted(p.name for p in out.iterdir()) == ["a.npy", "readme.txt"]
    assert mmnpz.load(tmp_path / "aligned.npz").files == ["a", "f", "s", "readme.txt"]
    assert mmnpz.load(tmp_path / "merged.npz").files == ["a", "f", "s", "readme.txt"]
    intact = json.loads(run("info", "--json", write_mixed(tmp_path / "intact.npz")).stdout)
    assert (intact["bytes_after_archive"], intact["interrupted_append"]) == (0, False)


def test_verify_json_agrees_with_verify(mixed, tmp_path):
    data = bytearray(mixed.read_bytes())
    data[mmnpz.load(mixed).info("a").offset] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    missing = tmp_path / "missing.npz"
    text = run("verify", mixed, bad, missing)
    js = run("verify", "--json", mixed, bad, missing)
    assert text.returncode == js.returncode == 1
    assert js.stderr == text.stderr  # each bad member is still named on stderr
    objects = [json.loads(line) for line in js.stdout.splitlines()]
    assert [o["path"] for o in objects] == [str(mixed), str(bad), str(missing)]
    assert [o["ok"] for o in objects] == [True, False, False]
    assert [o["checked"] for o in objects] == [4, 4, 0]
    assert objects[0]["bad"] == [] and len(objects[1]["bad"]) == len(objects[2]["bad"]) == 1
    assert f"{bad}: member 'a.npy'" in objects[1]["bad"][0]
    assert "No such file or directory" in objects[2]["bad"][0]
    want = [f"{o['path']}: {'OK' if o['ok'] else 'BAD'} ({o['checked']} member{'s' if o['checked'] != 1 else ''} checked"
            + ("" if o["ok"] else f", {len(o['bad'])} bad") + ")" for o in objects]
    assert text.stdout.splitlines() == want
    assert sorted(text.stderr.splitlines()) == sorted(
        "mmnpz verify: " + b for b in objects[1]["bad"] + objects[2]["bad"])


def test_align_and_merge_json_agree_with_their_text(mixed, tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, b=np.arange(3))
    for command, operands in (("align", lambda out: [mixed, out]),
                              ("merge", lambda out: [out, mixed, other])):
        text = run(command, "--align", "256", *operands(tmp_path / f"{command}_text.npz"))
        js = run(command, "--json", "--align", "256", *operands(tmp_path / f"{command}_json.npz"))
        assert text.returncode == js.returncode == 0, (text.stderr, js.stderr)
        got = json.loads(js.stdout)
        assert got == {"path": str(tmp_path / f"{command}_json.npz"),
                       "members": 4 if command == "align" else 5, "alignment": 256}
        assert text.stdout == (f"wrote {tmp_path / f'{command}_text.npz'}: {got['members']} "
                               f"members, data aligned to 256 bytes\n")
        assert np.load(got["path"]).files == np.load(tmp_path / f"{command}_text.npz").files


def test_extract_json_agrees_with_extract(mixed, tmp_path):
    for name in ("text", "json"):
        (tmp_path / name).mkdir()
    text = run("extract", "-o", tmp_path / "text", mixed, "a", "readme.txt")
    js = run("extract", "--json", "-o", tmp_path / "json", mixed, "a", "readme.txt")
    assert text.returncode == js.returncode == 0
    objects = [json.loads(line) for line in js.stdout.splitlines()]
    assert objects == [{"member": "a.npy", "path": f"{tmp_path / 'json'}/a.npy"},
                       {"member": "readme.txt", "path": f"{tmp_path / 'json'}/readme.txt"}]
    assert text.stdout.splitlines() == [o["path"].replace("/json/", "/text/") for o in objects]
    for o in objects:
        assert pathlib.Path(o["path"]).read_bytes() == \
            pathlib.Path(o["path"].replace("/json/", "/text/")).read_bytes()


def test_recover_json_agrees_with_recover(tmp_path):
    path = tmp_path / "cut.npz"
    with mmnpz.NpzWriter(path) as w:
        for i in range(5):
            w.write(f"m{i}", np.full(1000, i))
    cut = path.read_bytes()[: mmnpz.load(path).info("m3").offset + 100]
    (tmp_path / "text.npz").write_bytes(cut)
    (tmp_path / "json.npz").write_bytes(cut)
    text = run("recover", tmp_path / "text.npz")
    js = run("recover", "--json", tmp_path / "json.npz")
    assert text.returncode == js.returncode == 0
    got = json.loads(js.stdout)
    with zipfile.ZipFile(path) as z:  # m3 and m4 are cut off from m3's local header on
        m3_header = z.getinfo("m3.npy").header_offset
    assert got == {"path": str(tmp_path / "json.npz"), "intact": False, "members": 3,
                   "bytes_cut": len(cut) - m3_header}
    assert text.stdout == (f"{tmp_path / 'text.npz'}: recovered 3 members; cut off "
                           f"{got['bytes_cut']} bytes of incomplete data\n")
    again = json.loads(run("recover", "--json", tmp_path / "json.npz").stdout)
    assert again == {"path": str(tmp_path / "json.npz"), "intact": True, "members": 3,
                     "bytes_cut": 0}
    assert run("recover", tmp_path / "text.npz").stdout == \
        f"{tmp_path / 'text.npz'}: intact, 3 members; nothing changed\n"


def test_every_command_takes_json_and_prints_only_json_lines(mixed, tmp_path):
    (tmp_path / "x").mkdir()
    runs = {
        "ls": ["ls", "--json", mixed], "info": ["info", "--json", mixed],
        "verify": ["verify", "--json", mixed],
        "align": ["align", "--json", mixed, tmp_path / "a.npz"],
        "merge": ["merge", "--json", tmp_path / "m.npz", mixed],
        "extract": ["extract", "--json", "-o", tmp_path / "x", mixed, "a"],
        "recover": ["recover", "--json", tmp_path / "a.npz"],
    }
    assert sorted(runs) == sorted(COMMANDS)
    for command, args in runs.items():
        out = run(*args)
        assert out.returncode == 0 and out.stderr == "", (command, out.stderr)
        assert out.stdout.endswith("\n") and len(out.stdout.splitlines()) == 1, command
        json.loads(out.stdout)


@pytest.fixture(scope="module")
def sparse_big():
    """Writes an archive whose one member, big.npy, holds 2 GiB of zeros in a hole of the file
    (its bytes written are the headers and the directory alone) to the path it is given."""
    n = 2 << 30
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False,
                                                  "shape": (n,)})
    header = header.getvalue()
    crc, zeros = zlib.crc32(header), bytes(64 << 20)
    for _ in range(n // len(zeros)):
        crc = zlib.crc32(zeros, crc)
    size, name = len(header) + n, b"big.npy"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, size, size,
                        len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, size,
                          size, len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + size, 0)

    def write(path):
        with open(path, "wb") as f:
            f.write(local + header)
            f.seek(len(local) + size)
            f.write(central + end)
        return path
    return write


@pytest.mark.parametrize("command", ["extract", "merge", "align"])
def test_an_archive_cut_while_a_command_copies_it_gives_an_error_not_sigbus(command, sparse_big,
                                                                              tmp_path):
    """merge, align and extract copy stored members out of the mapping: an archive cut under
    them ends the command with exit status 1 and a message naming the member (they died of
    SIGBUS, -7, before reader::copy_bytes), and leaves no partial output."""
    import time

    path = sparse_big(tmp_path / "big.npz")
    assert mmnpz.load(path)["big"].shape == (2 << 30,)  # a valid archive before the cut
    out = tmp_path / "out"
    args = {"extract": ["extract", "-o", out, path, "big"], "merge": ["merge", out, path],
            "align": ["align", path, out]}[command]
    if command == "extract":
        out.mkdir()
    child = subprocess.Popen(CLI + [str(a) for a in args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # the command is copying 2 GiB
    os.truncate(path, 4096)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 1, (child.returncode, err)
    assert "member 'big.npy' at offset " in err, err
    assert "the archive was truncated after it was opened: the file now ends at byte 4096" in err
    # Nothing half-written is left: no .npy in out/, no OUT archive.
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == (
        ["big.npz", "out"] if command == "extract" else ["big.npz"])


def flip_data_byte(path, name):
    """Damages one byte of stored member `name`'s array data (its CRC-32 then disagrees)."""
    offset = mmnpz.load(path).info(name).offset
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["align", "merge", "extract"])
def test_a_stored_member_whose_crc32_fails_is_not_copied(command, mixed, tmp_path):
    """The copy would carry a new, matching CRC-32: the damage would pass every later check."""
    flip_data_byte(mixed, "a")
    out = tmp_path / "out"
    if command == "extract":
        out.mkdir()
        done = run("extract", "-o", out, mixed, "f", "a")
        assert np.array_equal(np.load(out / "f.npy"), np.ones((2, 3), ">i4"))  # before it
        assert not (out / "a.npy").exists()
    else:
        args = ["align", mixed, out] if command == "align" else ["merge", out, mixed]
        done = run(*args, "--json")
        assert not out.exists() and done.stdout == ""
    assert done.returncode == 1
    assert re.fullmatch(rf"mmnpz {command}: {re.escape(str(mixed))}: member 'a.npy' at offset "
                        r"\d+: CRC-32 is 0x[0-9a-f]{8}, the central directory says "
                        r"0x[0-9a-f]{8}\n", done.stderr), done.stderr


def test_extract_refuses_an_empty_directory_name(mixed, tmp_path):
    """"" + "/" + name would be a path in the root directory."""
    done = run("extract", "-o", "", mixed, "a", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("mmnpz extract: -o needs a directory name, not an empty one\n")
    assert list(tmp_path.iterdir()) == [mixed]


def test_ls_json_prints_no_part_of_an_array_when_a_member_fails(tmp_path):
    path = tmp_path / "bad_header.npz"
    good, bad = io.BytesIO(), io.BytesIO()
    np.save(good, np.arange(3))
    np.save(bad, np.arange(3))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.npy", good.getvalue())
        z.writestr("b.npy", bad.getvalue().replace(b"'descr'", b"'descx'"))
    done = run("ls", "--json", path)
    assert done.returncode == 1 and done.stdout == ""
    assert "member 'b.npy'" in done.stderr and "bad .npy header" in done.stderr


def test_json_spells_a_path_that_is_no_utf8_as_python_reads_it(mixed, tmp_path):
    """Bytes that are no UTF-8 are escaped as surrogateescape spells them (U+DC80-U+DCFF),
    so the output is JSON and os.fsencode() of the path gives the file's name back."""
    name = os.fsencode(tmp_path) + b"/bad\xffname.npz"
    shutil.copy(mixed, name)
    for command in ("ls", "info", "verify"):
        done = subprocess.run([os.fsencode(a) for a in CLI] + [command.encode(), b"--json",
                                                                   name], capture_output=True)
        assert done.returncode == 0, done.stderr
        text = done.stdout.decode("utf-8")  # strict: valid UTF-8
        if command != "ls":
            assert os.fsencode(json.loads(text)["path"]) == name
        else:
            assert len(json.loads(text)) == 4


def test_control_characters_in_names_are_escaped_in_text_output_and_exact_in_json(tmp_path):
    """A member name holding an escape sequence recoloured the terminal, and one holding a
    newline split a line of `ls` in two; --json gives the names exactly."""
    path = tmp_path / "hostile.npz"
    npy = io.BytesIO()
    np.save(npy, np.arange(3))
    red, split = "\x1b[31mred\x1b[0m.npy", "two\nlines\x7f\u0085.npy"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(red, npy.getvalue())
        z.writestr(split, npy.getvalue())
        z.writestr("bad\x07.npy", b"\x93NUMPY garbage")
    done = run("ls", path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["\\x1b[31mred\\x1b[0m.npy",
                                                    "two\\nlines\\x7f\\u0085.npy"]
    assert re.fullmatch(f"mmnpz ls: {re.escape(str(path))}: member 'bad\\\\x07\\.npy' at "
                        f"offset [0-9]+: unsupported \\.npy version 32\\.103\n", done.stderr)
    done = run("verify", path)
    assert done.stderr.startswith(f"mmnpz verify: {path}: member 'bad\\x07.npy'")
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stderr
    done = run("extract", "-o", tmp_path, path, red)
    assert done.returncode == 0 and done.stdout == f"{tmp_path}/\\x1b[31mred\\x1b[0m.npy\n"
    assert (tmp_path / red).read_bytes() == npy.getvalue()  # the file has the name as it is
    names = [json.loads(line)["member"] for line in run("extract", "--json", "-o", tmp_path,
                                                      path, split).stdout.splitlines()]
    assert names == [split]


def test_a_fifo_given_as_an_archive_is_refused_at_once(tmp_path):
    """Opening a FIFO for reading would wait for a writer: forever, if none comes."""
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    done = subprocess.run(CLI + ["ls", str(fifo)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == f"mmnpz ls: cannot map '{fifo}': No such device\n"
    loaded = subprocess.run([sys.executable, "-c", f"import mmnpz; mmnpz.load({str(fifo)!r})"],
                            capture_output=True, text=True, timeout=60)
    assert loaded.stderr.endswith(f"OSError: [Errno 19] No such device: '{fifo}'\n")
