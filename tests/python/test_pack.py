"""mmnpz.pack: .npy, .npz and audio inputs into sharded archives, compared with what numpy,
wave and soundfile read from the inputs."""

import glob
import json
import os
import subprocess
import sys
import wave
import zipfile

import numpy as np
import pytest

import mmnpz
from conftest import assert_same_array
from mmnpz import pack


def write_wav(path, values, width, rate=16000):
    """A PCM WAV file of `values` ((frames, channels) ints in the file's range), written with
    wave; 8-bit values are unsigned (0..255), the others signed."""
    values = np.asarray(values, dtype=np.int64)
    frames, channels = values.shape
    data = b"".join(int(v).to_bytes(width, "little", signed=width > 1) for v in values.reshape(-1))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data)
    return path


def wave_numbers(path):
    """The samples of a WAV file as Python ints, as wave reads them: [[ch0, ch1...], ...]."""
    with wave.open(str(path), "rb") as w:
        width, channels = w.getsampwidth(), w.getnchannels()
        raw = w.readframes(w.getnframes())
    samples = [int.from_bytes(raw[i:i + width], "little", signed=width > 1)
               for i in range(0, len(raw), width)]
    return [samples[i:i + channels] for i in range(0, len(samples), channels)]


def random_samples(rng, frames, channels, width):
    if width == 1:
        low, high = 0, 255
    else:
        low, high = -(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1
    values = rng.integers(low, high, size=(frames, channels), endpoint=True)
    values[0, 0], values[-1, -1] = low, high  # both extremes
    return values


def nothing_packed(out):
    """The last line on stderr of a run that packed no input (and wrote no shard)."""
    return (f"pack: no input was packed; no shard was written ({out} and the shards of an "
            f"earlier run are as they were)\n")


def run_pack(argv, capsys):
    """(exit status, stdout, stderr) of pack.main(argv)."""
    status = pack.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def members(paths):
    """Every member of the shards, in order, as numpy reads it (arrays, or bytes for raw
    members read with zipfile)."""
    out = {}
    for path in paths:
        with np.load(path) as f, zipfile.ZipFile(path) as z:
            for name in z.namelist():
                key = name[:-4] if name.endswith(".npy") else name
                out[key] = f[key] if name.endswith(".npy") else z.read(name)
    return out


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_pcm_wav_samples_are_what_wave_reads(tmp_path, capsys, width, channels):
    rng = np.random.default_rng(8 * width + channels)
    (tmp_path / "in").mkdir()
    wav = write_wav(tmp_path / "in" / "tone.wav", random_samples(rng, 300, channels, width),
                    width, rate=22050)
    status, out, err = run_pack([tmp_path / "out.npz", tmp_path / "in"], capsys)
    assert (status, err) == (0, "")
    assert out.startswith("packed 1 input (2 members, ")
    assert out.endswith(f") into 1 shard: {tmp_path}/out@1.npz\n")
    got = members([tmp_path / "out-00000-of-00001.npz"])
    assert list(got) == ["tone", "tone.json"]
    samples = got["tone"]
    want = wave_numbers(wav)
    assert samples.shape == (300, channels)
    assert samples.dtype == {1: np.uint8, 2: np.int16, 3: np.int32, 4: np.int32}[width]
    if width == 3:
        # 24-bit samples sit in the high 24 bits of the int32, the low byte zero.
        assert (samples & 0xFF == 0).all()
        assert (samples >> 8).tolist() == want
    else:
        assert samples.tolist() == want
    meta = json.loads(got["tone.json"])
    assert meta == {"sample_rate": 22050, "channels": channels, "frames": 300,
                    "bits_per_sample": 8 * width, "source": str(wav)}


def test_npy_and_npz_inputs_equal_numpys_arrays(tmp_path, capsys, sample_arrays):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    np.save(src / "a.npy", np.arange(12, dtype=">i4").reshape(3, 4))
    np.save(src / "sub" / "f.npy", np.asfortranarray(np.ones((3, 2))))
    np.savez(src / "sub" / "arch.npz", x=np.arange(5), y=np.eye(2, dtype=np.float32))
    np.savez_compressed(tmp_path / "packed.npz", z=np.linspace(0, 1, 7))
    arrays = {k: v for k, v in sample_arrays.items()}
    mmnpz.savez(tmp_path / "samples.npz", **arrays)
    status, out, err = run_pack([tmp_path / "o.npz", src, tmp_path / "packed.npz",
                                 tmp_path / "samples.npz"], capsys)
    assert (status, err) == (0, "")
    got = members(glob.glob(str(tmp_path / "o-*-of-*.npz")))
    want = {"a": np.load(src / "a.npy"), "sub/arch/x": np.arange(5),
            "sub/arch/y": np.eye(2, dtype=np.float32), "sub/f": np.load(src / "sub" / "f.npy"),
            "packed/z": np.linspace(0, 1, 7)}
    with np.load(tmp_path / "samples.npz") as f:
        want.update({f"samples/{k}": f[k] for k in f.files})
    assert list(got) == list(want)
    for name, a in want.items():
        assert_same_array(got[name], a, name)
    assert out.startswith(f"packed 5 inputs ({len(want)} members, ")


def test_an_npy_file_of_python_objects_is_skipped_in_words_that_say_so(tmp_path, capsys):
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.save(tmp_path / "fine.npy", np.arange(3))
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "objects.npy",
                               tmp_path / "fine.npy"], capsys)
    # numpy's own words were "Array can't be memory-mapped: Python objects in dtype."
    assert (status, err) == (1, f"pack: {tmp_path / 'objects.npy'}: a pickled object array, "
                                "which cannot be packed\n")
    assert list(members([tmp_path / "o-00000-of-00001.npz"])) == ["fine"]


def test_a_raw_npz_member_is_packed_as_bytes(tmp_path, capsys, mixed_npz):
    status, _, err = run_pack([tmp_path / "o.npz", mixed_npz], capsys)
    # mixed.npz holds a pickled object array: the input is reported and skipped.
    assert status == 1
    assert err == (f"pack: {mixed_npz}: member 'objects.npy' is a pickled object array, "
                   "which cannot be packed\n" + nothing_packed(tmp_path / "o.npz"))
    clean = tmp_path / "clean.npz"
    with zipfile.ZipFile(mixed_npz) as src, zipfile.ZipFile(clean, "w") as dst:
        for info in src.infolist():
            if info.filename != "objects.npy":
                dst.writestr(info, src.read(info.filename))
    status, _, err = run_pack([tmp_path / "o.npz", clean], capsys)
    assert (status, err) == (0, "")
    got = members([tmp_path / "o-00000-of-00001.npz"])
    assert got["clean/readme.txt"] == b"not an array\n"
    assert got["clean/meta.json"] == b'{"k": [1, 2, 3]}' * 50
    with np.load(clean) as f:
        for key in ("a", "fortran", "packed", "packed_f", "dir/sub"):
            assert_same_array(got[f"clean/{key}"], f[key], key)


def _wav_folder(root, count, frames=400, channels=1, width=2):
    rng = np.random.default_rng(count)
    root.mkdir(parents=True, exist_ok=True)
    return [write_wav(root / f"clip_{k:03d}.wav", random_samples(rng, frames + k, channels, width),
                      width) for k in range(count)]


def truncate(path, keep):
    with open(path, "r+b") as f:
        f.truncate(keep)


def test_a_truncated_wav_is_reported_by_name_and_skipped(tmp_path, capsys):
    wavs = _wav_folder(tmp_path / "wavs", 5)
    truncate(wavs[2], os.path.getsize(wavs[2]) - 101)
    truncate(wavs[3], 30)  # inside the header
    status, out, err = run_pack([tmp_path / "o.npz", tmp_path / "wavs"], capsys)
    assert status == 1
    lines = err.splitlines()
    assert lines[0] == (f"pack: {wavs[2]}: truncated: the header promises 402 frames, the file "
                        "holds 351 and 1 bytes")
    assert lines[1].startswith(f"pack: {wavs[3]}: ")
    assert len(lines) == 2
    assert out.endswith("into 1 shard: " + str(tmp_path / "o@1.npz") + "; 2 skipped\n")
    got = members([tmp_path / "o-00000-of-00001.npz"])
    assert [k for k in got if not k.endswith(".json")] == ["clip_000", "clip_001", "clip_004"]
    assert got["clip_004"].tolist() == wave_numbers(wavs[4])


def test_nothing_to_pack_leaves_the_shards_of_an_earlier_run_as_they_were(tmp_path, capsys):
    # A mistyped path replaced the shards of the last run with one empty shard.
    np.save(tmp_path / "a.npy", np.arange(5))
    assert run_pack([tmp_path / "o.npz", tmp_path / "a.npy"], capsys)[0] == 0
    shard = tmp_path / "o-00000-of-00001.npz"
    before = shard.read_bytes()
    (tmp_path / "empty").mkdir()
    status, out, err = run_pack([tmp_path / "o.npz", tmp_path / "typo.npy", tmp_path / "empty"],
                                capsys)
    assert (status, out) == (1, "")
    assert err == (f"pack: {tmp_path / 'typo.npy'}: No such file or directory\n"
                   f"pack: {tmp_path / 'empty'}: the directory holds no .npy, .npz or audio "
                   f"file\n" + nothing_packed(tmp_path / "o.npz"))
    assert shard.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.npy", "empty", "o-00000-of-00001.npz"]
    result = pack.run(tmp_path / "o.npz", [tmp_path / "typo.npy"], report=lambda *a: None)
    assert (result.spec, result.paths, result.skipped, result.stopped) == (None, [], 1, False)
    # --strict stopping at its first input, before any member, writes nothing either.
    (tmp_path / "bad.npy").write_bytes(b"not an npy")
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "bad.npy", tmp_path / "a.npy",
                               "--strict"], capsys)
    assert status == 1 and err.endswith(nothing_packed(tmp_path / "o.npz"))
    assert shard.read_bytes() == before
    # An input that holds no member is packed: one empty shard, as asked.
    np.savez(tmp_path / "none.npz")
    status, out, _ = run_pack([tmp_path / "o.npz", tmp_path / "none.npz"], capsys)
    assert (status, out) == (0, f"packed 1 input (0 members, 0 B) into 1 shard: "
                                f"{tmp_path / 'o@1.npz'}\n")
    with np.load(shard) as f:
        assert f.files == []
    # Options are still checked first, as when there is something to pack.
    assert run_pack([tmp_path / "o", tmp_path / "typo.npy"], capsys)[0] == 2
    assert run_pack([tmp_path / "o.npz", tmp_path / "typo.npy", "--align", "3"], capsys)[0] == 2


def test_strict_stops_at_a_truncated_wav_and_keeps_the_shards_written_before(tmp_path, capsys):
    wavs = _wav_folder(tmp_path / "wavs", 6)
    truncate(wavs[4], os.path.getsize(wavs[4]) - 100)
    status, out, err = run_pack([tmp_path / "o.npz", tmp_path / "wavs", "--strict",
                                 "--max-items", 4, "--jobs", 3], capsys)
    assert status == 1
    assert err.startswith(f"pack: {wavs[4]}: truncated")
    assert out.endswith("into 2 shards: " + str(tmp_path / "o@2.npz") + "; 1 skipped; "
                        "stopped early\n")
    assert sorted(os.listdir(tmp_path)) == ["o-00000-of-00002.npz", "o-00001-of-00002.npz",
                                            "wavs"]
    got = members(sorted(glob.glob(str(tmp_path / "o-*.npz"))))
    assert list(got) == [f"clip_00{k}{ext}" for k in range(4) for ext in ("", ".json")]
    for k in range(4):
        assert got[f"clip_00{k}"].tolist() == wave_numbers(wavs[k])
    d = mmnpz.Dataset(str(tmp_path / "o@2.npz"), select="clip_???")
    assert len(d) == 4


def test_max_bytes_gives_shards_that_numpy_and_the_shard_spec_read(tmp_path, capsys):
    wavs = _wav_folder(tmp_path / "wavs", 12, frames=2000, channels=2)
    status, out, err = run_pack([tmp_path / "ds.npz", tmp_path / "wavs", "--max-bytes", "20K"],
                                capsys)
    assert (status, err) == (0, "")
    paths = sorted(glob.glob(str(tmp_path / "ds-*-of-*.npz")))
    assert len(paths) > 2
    assert out.endswith(f"into {len(paths)} shards: {tmp_path}/ds@{len(paths)}.npz\n")
    assert all(os.path.getsize(p) <= 20 << 10 for p in paths)
    got = members(paths)
    d = mmnpz.Dataset(f"{tmp_path}/ds@{len(paths)}.npz", select="clip_???")
    assert len(d) == 12
    for k, wav in enumerate(wavs):
        want = wave_numbers(wav)
        assert got[f"clip_{k:03d}"].tolist() == want
        assert d.name(k) == f"clip_{k:03d}"
        assert np.asarray(d[k]).tolist() == want
        meta = json.loads(got[f"clip_{k:03d}.json"])
        assert meta["sample_rate"] == 16000 and meta["channels"] == 2
        assert meta["source"] == str(wav)


def test_jobs_do_not_change_the_output(tmp_path, capsys):
    _wav_folder(tmp_path / "wavs", 9)
    for name, jobs in (("one", 1), ("four", 4)):
        assert run_pack([tmp_path / f"{name}.npz", tmp_path / "wavs", "--jobs", jobs,
                         "--max-items", 5], capsys)[0] == 0
    one = members(sorted(glob.glob(str(tmp_path / "one-*.npz"))))
    four = members(sorted(glob.glob(str(tmp_path / "four-*.npz"))))
    assert list(one) == list(four)
    for k in one:
        if isinstance(one[k], bytes):
            assert one[k] == four[k]
        else:
            assert_same_array(four[k], one[k], k)


@pytest.mark.parametrize("text, size", [("4096", 4096), ("64K", 64 << 10), ("512M", 512 << 20),
                                        ("2G", 2 << 30), ("1.5k", 1536), ("2GiB", 2 << 30),
                                        ("3MB", 3 << 20)])
def test_sizes_take_suffixes(text, size):
    assert pack.parse_size(text) == size


def test_usage_errors_exit_2(tmp_path, capsys):
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path, "--max-bytes", "12Q"], capsys)
    assert status == 2
    assert "--max-bytes: '12Q' is not a size (a number of bytes, or with K, M, G or T" in err
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path, "--jobs", "0"], capsys)
    assert status == 2 and "argument --jobs/-j: '0': must be positive" in err
    status, _, err = run_pack([tmp_path / "o.zip", tmp_path], capsys)
    assert status == 2
    assert err == (f"pack: {tmp_path}/o.zip: a shard writer's path must be a file name ending in "
                   ".npz (\"out/train.npz\" gives out/train-00000-of-00012.npz ...)\n")
    assert run_pack([], capsys)[0] == 2


def test_missing_unsupported_and_hidden_inputs(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "a.npy", np.arange(3))
    np.save(src / ".hidden.npy", np.arange(3))
    (src / "notes.txt").write_text("not packed")
    (tmp_path / "empty").mkdir()
    status, out, err = run_pack([tmp_path / "o.npz", src, tmp_path / "nope.wav",
                                 src / "notes.txt", tmp_path / "empty"], capsys)
    assert status == 1
    assert err.splitlines() == [
        f"pack: {tmp_path}/nope.wav: No such file or directory",
        f"pack: {src}/notes.txt: not a .npy, .npz or audio file ("
        + ", ".join(pack.SUPPORTED) + ")",
        f"pack: {tmp_path}/empty: the directory holds no .npy, .npz or audio file",
    ]
    assert list(members([tmp_path / "o-00000-of-00001.npz"])) == ["a"]
    assert out.endswith("; 3 skipped\n")


def test_the_runs_own_shards_in_an_input_folder_are_not_packed(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(3))
    for _ in range(2):
        status, out, _ = run_pack([tmp_path / "o.npz", tmp_path], capsys)
        assert status == 0 and out.startswith("packed 1 input (1 member,")


def test_a_shard_of_the_output_named_as_an_input_is_refused_before_anything_is_written(
        tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(3))
    assert run_pack([tmp_path / "o.npz", tmp_path / "a.npy"], capsys)[0] == 0
    shard = tmp_path / "o-00000-of-00001.npz"
    before = shard.read_bytes()
    np.save(tmp_path / "b.npy", np.arange(4))
    status, out, err = run_pack([tmp_path / "o.npz", shard, tmp_path / "b.npy"], capsys)
    assert status == 2 and out == ""
    assert err == (f"pack: {shard} is one of the shards this run writes ({tmp_path}/o.npz): it "
                   "would be overwritten; pack into another name\n")
    assert shard.read_bytes() == before


def test_progress_only_when_asked_off_a_terminal(tmp_path, capsys):
    _wav_folder(tmp_path / "wavs", 3)
    status, out, err = run_pack([tmp_path / "a.npz", tmp_path / "wavs"], capsys)
    assert (status, err) == (0, "")
    status, out, err = run_pack([tmp_path / "b.npz", tmp_path / "wavs", "--progress"], capsys)
    assert status == 0
    lines = err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["pack: 1/3 inputs", "pack: 2/3 inputs",
                                                      "pack: 3/3 inputs"]
    assert lines[-1].endswith(", 1 shard")
    assert out.startswith("packed 3 inputs (6 members")


def test_audio_other_than_wav_needs_soundfile_and_says_how_to_install_it(tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setattr(pack, "_soundfile", lambda: None)
    (tmp_path / "x.flac").write_bytes(b"fLaC not really")
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "x.flac"], capsys)
    assert status == 1
    assert err == (f"pack: {tmp_path}/x.flac: reading .flac files needs the soundfile module: "
                   "apt-get install python3-soundfile\n" + nothing_packed(tmp_path / "o.npz"))


def test_module_runs_as_a_program(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(3))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "mmnpz.pack", str(tmp_path / "o.npz"),
                           str(tmp_path / "a.npy")], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"packed 1 input (1 member, 24 B) into 1 shard: {tmp_path}/o@1.npz\n"


# ---- formats that need soundfile (skipped without python3-soundfile) -------------------------

@pytest.mark.parametrize("subtype, dtype", [("PCM_16", np.int16), ("PCM_24", np.int32)])
def test_flac_samples_are_what_soundfile_reads(tmp_path, capsys, subtype, dtype):
    sf = pytest.importorskip("soundfile")
    rng = np.random.default_rng(3)
    values = rng.integers(-(1 << 15), 1 << 15, size=(500, 2)).astype(np.int16)
    sf.write(tmp_path / "a.flac", values, 8000, subtype=subtype)
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "a.flac"], capsys)
    assert (status, err) == (0, "")
    got = members([tmp_path / "o-00000-of-00001.npz"])
    want = sf.read(tmp_path / "a.flac", dtype=np.dtype(dtype).name, always_2d=True)[0]
    assert_same_array(got["a"], want.astype(np.dtype(dtype).newbyteorder("<")), "a")
    if subtype == "PCM_24":  # as 24-bit WAV: the sample in the high 24 bits
        assert (got["a"] >> 16).tolist() == values.tolist()
    meta = json.loads(got["a.json"])
    assert meta["sample_rate"] == 8000 and meta["bits_per_sample"] == int(subtype[4:])


def test_24_bit_flac_and_wav_of_the_same_samples_pack_alike(tmp_path, capsys):
    sf = pytest.importorskip("soundfile")
    values = random_samples(np.random.default_rng(5), 200, 2, 3)
    write_wav(tmp_path / "w.wav", values, 3)
    sf.write(tmp_path / "f.flac", (values << 8).astype(np.int32), 16000, subtype="PCM_24")
    assert run_pack([tmp_path / "o.npz", tmp_path / "w.wav", tmp_path / "f.flac"], capsys)[0] == 0
    got = members([tmp_path / "o-00000-of-00001.npz"])
    assert_same_array(got["f"], got["w"], "24-bit")


def test_a_float_wav_is_read_through_soundfile(tmp_path, capsys):
    sf = pytest.importorskip("soundfile")
    values = np.linspace(-1, 1, 300, dtype=np.float32).reshape(150, 2)
    sf.write(tmp_path / "f.wav", values, 16000, subtype="FLOAT")
    assert run_pack([tmp_path / "o.npz", tmp_path / "f.wav"], capsys)[0] == 0
    got = members([tmp_path / "o-00000-of-00001.npz"])
    assert_same_array(got["f"], values, "float")
    assert "bits_per_sample" not in json.loads(got["f.json"])


def test_a_float_wav_without_soundfile_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pack, "_soundfile", lambda: None)
    import struct
    data = np.zeros(8, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)  # WAVE_FORMAT_IEEE_FLOAT
    riff = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)
    (tmp_path / "f.wav").write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "f.wav"], capsys)
    assert status == 1
    assert err == (f"pack: {tmp_path}/f.wav: Python's wave module cannot read this WAV file "
                   "(unknown format: 3); reading it needs the soundfile module: "
                   "apt-get install python3-soundfile\n" + nothing_packed(tmp_path / "o.npz"))


def test_a_write_error_stops_the_run_and_keeps_the_shards_written_before(tmp_path):
    # Files may not grow past 64 KiB in the child: the big array's write fails with EFBIG.
    np.save(tmp_path / "a.npy", np.arange(1000))
    np.save(tmp_path / "b.npy", np.zeros(100_000))
    np.save(tmp_path / "c.npy", np.arange(10))
    script = (
        "import resource, signal, sys\n"
        "from mmnpz import pack\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
        "sys.exit(pack.main(sys.argv[1:]))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out" / "o.npz"),
                           *(str(tmp_path / f"{n}.npy") for n in "abc"), "--max-items", "1"],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    assert done.stderr == (f"pack: cannot write '{tmp_path}/out/o-00001.npz.partial': "
                           "File too large\n")
    assert done.stdout == (f"packed 1 input (1 member, 7.8 KiB) into 1 shard: "
                           f"{tmp_path}/out/o@1.npz; stopped early\n")
    assert os.listdir(tmp_path / "out") == ["o-00000-of-00001.npz"]
    assert_same_array(np.load(tmp_path / "out" / "o-00000-of-00001.npz")["a"],
                      np.load(tmp_path / "a.npy"), "a")


def test_run_returns_the_spec_and_reports_through_a_callable(tmp_path):
    _wav_folder(tmp_path / "wavs", 4, frames=3000)
    (tmp_path / "wavs" / "bad.wav").write_bytes(b"RIFF")
    reports = []
    r = pack.run(tmp_path / "o" / "t.npz", [tmp_path / "wavs"], max_bytes="8K",
                 report=lambda path, message: reports.append((path, message)))
    assert reports == [(str(tmp_path / "wavs" / "bad.wav"),
                        "truncated or not a WAV file (unexpected end of file)")]
    assert (r.packed, r.members, r.skipped, r.stopped, r.error) == (4, 8, 1, False, None)
    assert r.spec == f"{tmp_path}/o/t@4.npz"
    assert r.paths == [f"{tmp_path}/o/t-0000{k}-of-00004.npz" for k in range(4)]
    d = mmnpz.Dataset(r.spec, select="clip_*[0-9]")
    assert [d.name(i) for i in range(len(d))] == [f"clip_00{k}" for k in range(4)]
    with pytest.raises(ValueError, match="'8Q' is not a size"):
        pack.run(tmp_path / "x.npz", [tmp_path / "wavs"], max_bytes="8Q")
    with pytest.raises(ValueError, match="jobs must be a positive int, not 0"):
        pack.run(tmp_path / "x.npz", [tmp_path / "wavs"], jobs=0)


def test_an_audio_file_and_its_sidecar_share_a_shard(tmp_path, capsys):
    _wav_folder(tmp_path / "wavs", 5, frames=1000)
    for argv in (["--max-items", "3"], ["--max-bytes", "5K"]):
        for old in glob.glob(str(tmp_path / "o-*")):
            os.remove(old)
        assert run_pack([tmp_path / "o.npz", tmp_path / "wavs", *argv], capsys)[0] == 0
        paths = sorted(glob.glob(str(tmp_path / "o-*-of-*.npz")))
        assert len(paths) == 5, argv
        for k, path in enumerate(paths):
            assert mmnpz.load(path).files == [f"clip_00{k}", f"clip_00{k}.json"]


def test_a_truncated_flac_is_reported_by_name_and_skipped(tmp_path, capsys):
    sf = pytest.importorskip("soundfile")
    sf.write(tmp_path / "t.flac", (np.arange(48000) % 3000).astype(np.int16), 16000)
    truncate(tmp_path / "t.flac", os.path.getsize(tmp_path / "t.flac") // 2)
    np.save(tmp_path / "ok.npy", np.arange(4))
    status, _, err = run_pack([tmp_path / "o.npz", tmp_path / "t.flac", tmp_path / "ok.npy"],
                              capsys)
    assert status == 1
    assert err.startswith(f"pack: {tmp_path}/t.flac: ") and err.count("\n") == 1
    assert list(members([tmp_path / "o-00000-of-00001.npz"])) == ["ok"]


def test_a_hostile_file_name_is_reported_escaped_not_raw(tmp_path, capsys):
    # An escape sequence in a file name reached the terminal raw (this one clears it).
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad\x1b[2J.npy").write_bytes(b"not an npy")
    (folder / os.fsdecode(b"caf\xe9\n.npy")).write_bytes(b"not an npy either")
    status, _, err = run_pack([tmp_path / "o.npz", folder], capsys)
    assert status == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"pack: {folder}/bad\\x1b[2J.npy: not a readable .npy file")
    assert lines[1].startswith(f"pack: {folder}/caf\\xe9\\n.npy: not a readable .npy file")
    assert "\x1b" not in err and len(lines) == 3
