"""mmnpz.ShardWriter: sharded aligned archives, compared with what numpy reads back."""

import glob
import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import mmnpz
from conftest import assert_same_array


def _arrays(n):
    rng = np.random.default_rng(7)
    return {f"clip_{k:03d}": rng.standard_normal((50 + 10 * k, 2)).astype(np.float32)
            for k in range(n)}


def test_max_items_gives_shards_that_numpy_and_the_shard_spec_read(tmp_path):
    arrays = _arrays(10)
    with mmnpz.ShardWriter(tmp_path / "train.npz", max_items=4) as w:
        for name, a in arrays.items():
            w.write(name, a)
        assert w.shards == 3 and w.items_written == 10
        with pytest.raises(ValueError, match="known once the writer is closed"):
            w.paths  # noqa: B018
    want = [str(tmp_path / f"train-0000{k}-of-00003.npz") for k in range(3)]
    assert w.paths == want
    assert sorted(glob.glob(str(tmp_path / "*"))) == want
    assert w.spec == str(tmp_path / "train@3.npz")
    got = {}
    for path, count in zip(want, (4, 4, 2)):
        with np.load(path) as f:
            assert len(f.files) == count
            got.update({k: f[k] for k in f.files})
    assert list(got) == list(arrays)
    for name, a in arrays.items():
        assert_same_array(got[name], a, name)

    d = mmnpz.Dataset(str(tmp_path / "train@3.npz"))
    assert len(d) == 10 and d.paths == tuple(want)
    for i, (name, a) in enumerate(arrays.items()):
        assert d.name(i) == name
        assert_same_array(np.asarray(d[i]), a, name)


def test_max_bytes_bounds_the_files_and_a_large_item_gets_its_own_shard(tmp_path):
    small = np.arange(1000, dtype=np.uint8)
    with mmnpz.ShardWriter(tmp_path / "b.npz", max_bytes=4096) as w:
        for k in range(3):
            w.write(f"s{k}", small)
        w.write("big", np.zeros(20000, np.uint8))
        w.write_bytes("s3.json", b'{"a": 1}')
    sizes = [os.path.getsize(p) for p in w.paths]
    members = [mmnpz.load(p).files for p in w.paths]
    assert members == [["s0", "s1"], ["s2"], ["big"], ["s3.json"]]
    assert all(size <= 4096 for k, size in enumerate(sizes) if k != 2)
    assert sizes[2] > 20000
    assert mmnpz.load(w.paths[3])["s3.json"] == b'{"a": 1}'


@pytest.mark.parametrize("align", [1, 64, 4096])
def test_array_data_is_aligned_in_every_shard(tmp_path, align):
    with mmnpz.ShardWriter(tmp_path / "a.npz", max_items=3, align=align) as w:
        for name, a in _arrays(7).items():
            w.write(name, a)
    for path in w.paths:
        r = mmnpz.load(path)
        for key in r.files:
            assert r.info(key).offset % align == 0


def test_writes_fortran_strided_and_zero_d_arrays_as_numpy_reads_them(tmp_path, sample_arrays):
    with mmnpz.ShardWriter(tmp_path / "m.npz", max_items=5) as w:
        for name, a in sample_arrays.items():
            w.write(name, a)
    got = {}
    for path in w.paths:
        with np.load(path) as f:
            got.update({k: f[k] for k in f.files})
    assert list(got) == list(sample_arrays)
    for name, a in sample_arrays.items():
        want = np.asarray(a)
        if not (want.flags.c_contiguous or want.flags.f_contiguous):
            want = want.copy(order="C")  # strided arrays are written in C order
        assert_same_array(got[name], want, name)


def test_shards_are_partial_while_written_and_renamed_when_an_exception_leaves_the_block(tmp_path):
    with pytest.raises(RuntimeError, match="stop"):
        with mmnpz.ShardWriter(tmp_path / "p.npz", max_items=1) as w:
            w.write("a", np.arange(3))
            w.write("b", np.arange(4))
            # and the run's lock, which keeps a second shard writer of the path out
            assert sorted(os.listdir(tmp_path)) == [".p.npz.mmnpz-shards.lock",
                                                    "p-00000.npz.partial", "p-00001.npz.partial"]
            assert glob.glob(str(tmp_path / "p-*-of-*.npz")) == []
            raise RuntimeError("stop")
    assert sorted(os.listdir(tmp_path)) == ["p-00000-of-00002.npz", "p-00001-of-00002.npz"]
    assert list(mmnpz.Dataset(str(tmp_path / "p@2.npz"))[1]) == [0, 1, 2, 3]


def test_an_exception_before_the_first_item_leaves_an_earlier_runs_shard_as_it_was(tmp_path):
    # It was replaced by one empty shard of the same name.
    with mmnpz.ShardWriter(tmp_path / "e.npz") as w:
        w.write("earlier", np.arange(3))
    shard = tmp_path / "e-00000-of-00001.npz"
    before = shard.read_bytes()
    with pytest.raises(RuntimeError, match="the producer failed"):
        with mmnpz.ShardWriter(tmp_path / "e.npz") as w:
            raise RuntimeError("the producer failed")
    assert w.closed and shard.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["e-00000-of-00001.npz"]
    w = mmnpz.ShardWriter(tmp_path / "e.npz", max_items=1)
    w.write("a", np.arange(2))
    w.write("b", np.arange(2))
    w.discard()  # explicitly: the shards it began are removed, none renamed
    assert shard.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["e-00000-of-00001.npz"]


def test_sidecar_bytes_and_any_buffer(tmp_path):
    meta = json.dumps({"sample_rate": 16000}).encode()
    with mmnpz.ShardWriter(tmp_path / "j.npz") as w:
        w.write_bytes("x.json", meta)
        w.write_bytes("y.bin", bytearray(b"\x00\x01"))
        w.write_bytes("z.bin", memoryview(np.arange(3, dtype="<i2")))
    r = mmnpz.load(w.paths[0])
    assert r["x.json"] == meta and r["y.bin"] == b"\x00\x01"
    assert r["z.bin"] == np.arange(3, dtype="<i2").tobytes()


def test_errors_read_as_sentences(tmp_path):
    out = str(tmp_path / "t.npz")
    with pytest.raises(ValueError, match=r"t: a shard writer's path must be a file name ending "
                                         r"in \.npz"):
        mmnpz.ShardWriter(tmp_path / "t")
    for what in ("max_bytes", "max_items"):
        for bad in (0, -5):
            with pytest.raises(ValueError) as e:
                mmnpz.ShardWriter(out, **{what: bad})
            assert str(e.value) == f"{out}: {what} must be positive, not {bad}"
        with pytest.raises(TypeError, match=f"{what} must be an int or None, not str"):
            mmnpz.ShardWriter(out, **{what: "1G"})
    assert os.listdir(tmp_path) == []
    w = mmnpz.ShardWriter(out, max_items=1)
    w.write("a", np.arange(2))
    with pytest.raises(ValueError) as e:
        w.write("a", np.arange(2))
    assert str(e.value) == f"{out}: member 'a.npy': a shard already has a member of that name"
    w.close()
    w.close()
    for call in (lambda: w.write("b", np.arange(2)), lambda: w.write_bytes("b", b"")):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == f"{out}: the shard writer is closed; nothing more can be written"
    assert w.paths == [str(tmp_path / "t-00000-of-00001.npz")]
    assert "closed" in repr(w)


def test_write_group_keeps_an_array_and_its_sidecar_in_one_shard(tmp_path):
    a = np.arange(100, dtype=np.int16)
    with mmnpz.ShardWriter(tmp_path / "g.npz", max_items=3) as w:
        w.write("first", a)
        for name in ("x", "y"):
            w.write_group([(name, a), (f"{name}.json", b'{"sample_rate": 8000}')])
        w.write_group([("alone", a[::2])])  # strided: copied as write() does
    assert [mmnpz.load(p).files for p in w.paths] == [["first", "x", "x.json"],
                                                    ["y", "y.json", "alone"]]
    with np.load(w.paths[1]) as f:
        assert_same_array(f["alone"], a[::2].copy(), "alone")
    with mmnpz.ShardWriter(tmp_path / "big.npz", max_bytes=1024) as w:
        w.write("s", a[:10])
        w.write_group([("big", np.zeros(4000, np.uint8)), ("big.json", b"{}")])
        w.write("t", a[:10])
    assert [mmnpz.load(p).files for p in w.paths] == [["s"], ["big", "big.json"], ["t"]]


def test_limits_past_64_bits_are_refused_by_name(tmp_path):
    path = str(tmp_path / "l.npz")
    for what in ("max_bytes", "max_items"):
        with pytest.raises(ValueError, match=f"^{re.escape(path)}: {what} 1180591620717411303424 "
                                             f"is too large for a 64-bit integer$"):
            mmnpz.ShardWriter(path, **{what: 2**70})
    assert not os.listdir(tmp_path)


def test_a_group_with_a_member_that_would_be_refused_writes_none_of_it(tmp_path):
    a = np.arange(4, dtype=np.int16)
    with mmnpz.ShardWriter(tmp_path / "g.npz") as w:
        w.write_group([("x", a), ("x.json", b"{}")])
        for group, message in (
                ([("y", a), ("x.json", b"{}")], "member 'x.json': a shard already has a member "
                                                 "of that name"),
                ([("y", a), ("y", a[:2])], "member 'y.npy': the group names it twice"),
                ([("y", a), ("y.meta", np.array([None]))], "g.npz: member 'y.meta.npy': "
                                                           "object arrays cannot be written "
                                                           "(they need pickle)"),
                ([("y", a), ("", b"{}")], "g.npz: a member name must not be empty"),
                ([("y", a), ("../y.json", b"{}")], "member '../y.json': a member name must not "
                                                    "contain '..' components")):
            with pytest.raises(ValueError, match=re.escape(message)):
                w.write_group(group)
        assert w.items_written == 2
        w.write_group([("y", a), ("y.json", b"{}")])
    assert mmnpz.load(w.paths[0]).files == ["x", "x.json", "y", "y.json"]


SHARDS_FROM_THREADS = """
import sys, threading, numpy as np, mmnpz
writer = mmnpz.ShardWriter(sys.argv[1], max_items=7)
data = np.ones(20000, np.float32)
errors = []
def work(t):
    try:
        for i in range(150):
            if i % 3:
                writer.write(f"t{t}_{i}", data)
            else:
                writer.write_group([(f"t{t}_{i}", data), (f"t{t}_{i}.json", b"{}")])
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
writer.close()
print(errors, writer.items_written, writer.spec)
"""


def test_threads_sharing_a_shard_writer_take_turns(tmp_path):
    """The core's shard writer is for one thread at a time: four threads writing through one
    ShardWriter corrupted the heap (glibc aborted the process) or abandoned members."""
    run = subprocess.run([sys.executable, "-c", SHARDS_FROM_THREADS, str(tmp_path / "t.npz")],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("[] 800 "), run.stdout
    spec = run.stdout.split()[-1]
    names = set()
    for path in sorted(glob.glob(str(tmp_path / "t-*-of-*.npz"))):
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None
            members = archive.namelist()
        assert len(members) <= 7
        for name in members:  # a sidecar is in its array's shard
            assert not name.endswith(".json") or name[:-5] + ".npy" in members, (path, name)
        names.update(members)
    assert len(names) == 800
    assert len(mmnpz.Dataset(spec)) == 600  # the arrays
