"""The mmnpz command line: the executable MMNPZ_CLI when set (CTest), else python3 -m mmnpz."""
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import mmnpz

CLI = [os.environ["MMNPZ_CLI"]] if os.environ.get("MMNPZ_CLI") else [sys.executable, "-m", "mmnpz"]


def run(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def mixed(tmp_path):
    """An archive numpy wrote: arrays (one Fortran, one big-endian) and a text member."""
    path = tmp_path / "mixed.npz"
    np.savez(path, a=np.arange(12.0).reshape(3, 4), f=np.asfortranarray(np.ones((2, 3), ">i4")),
             s=np.array([b"ab", b"cd"]))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("readme.txt", "hello")
    return path


def test_ls_json_agrees_with_numpy_member_by_member(mixed):
    out = run("ls", "--json", mixed)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    with np.load(mixed) as f:
        for row in rows:
            if row["name"] == "readme.txt":
                assert row["dtype"] is None and row["bytes"] == 5
                continue
            a = f[row["name"]]
            assert row["dtype"] == a.dtype.str
            assert tuple(row["shape"]) == a.shape
            assert row["bytes"] == a.nbytes
            assert row["method"] == "stored"
            assert row["offset"] % row["alignment"] == 0


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
    assert f"{bad}: member 'f.npy'" in out.stderr and "CRC-32" in out.stderr
    assert f"{mixed}: OK" in out.stdout and f"{bad}: BAD" in out.stdout
    assert run("verify", "--quick", mixed).returncode == 0


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
    again = run("merge", tmp_path / "dup.npz", mixed, mixed)
    assert again.returncode == 1 and "already has a member of that name" in again.stderr
    assert not (tmp_path / "dup.npz").exists()
    assert run("merge", "--allow-duplicates", tmp_path / "dup.npz", mixed, mixed).returncode == 0
    assert run("merge", merged, other).returncode == 2  # OUT exists


def test_extract_writes_npy_files_numpy_loads_and_never_overwrites(mixed, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run("extract", "-o", out, mixed, "a", "readme.txt")
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.load(out / "a.npy"), np.arange(12.0).reshape(3, 4))
    assert (out / "readme.txt").read_text() == "hello"
    assert run("extract", "-o", out, mixed, "a").returncode == 2
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
