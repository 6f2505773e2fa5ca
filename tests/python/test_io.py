"""Gather by reads (io="read") against the mapping (io="map") and numpy slicing: every pad
mode, several dtypes, fields at other rates, excerpts crossing member ends; an archive cut
short after opening raises an error naming the member, in this process and in a worker."""

import multiprocessing
import os
import pickle

import numpy as np
import pytest

import mmnpz

DTYPES = [np.int8, np.uint16, np.float32, np.float64, np.complex64, ">i4"]


def numpy_excerpt(array, start, length, pad, fill):
    rows = np.arange(start, start + length)
    if pad == "wrap":
        return array[rows % len(array)]
    out = np.full((length,) + array.shape[1:], fill, array.dtype)
    inside = rows < len(array)
    out[inside] = array[rows[inside]]
    return out


def make_archive(path, dtype, lengths, trailing=(3,)):
    rng = np.random.default_rng(len(lengths))
    arrays = {}
    for k, n in enumerate(lengths):
        values = rng.integers(-100, 100, size=(n,) + trailing)
        arrays[f"clip_{k}"] = values.astype(dtype)
    np.savez(path, **arrays)
    return [arrays[f"clip_{k}"] for k in range(len(lengths))]


def random_excerpts(lengths, count, seed=0):
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, len(lengths), count)
    starts = np.array([rng.integers(0, lengths[i] + 1) for i in indices])  # up to the end
    return indices, starts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pad", ["fill", "wrap"])
def test_reads_and_the_mapping_both_equal_numpy_slicing(tmp_path, dtype, pad):
    lengths = [5, 17, 1, 33, 8, 64, 2]
    arrays = make_archive(tmp_path / "a.npz", dtype, lengths)
    ds = mmnpz.Dataset(str(tmp_path / "a.npz"))
    indices, starts = random_excerpts(lengths, 50)
    want = np.stack([numpy_excerpt(arrays[i], s, 20, pad, 7) for i, s in zip(indices, starts)])
    want = want.astype(arrays[0].dtype)  # np.stack makes big-endian items native
    results = {io: ds.gather(indices, starts, 20, pad=pad, fill=7, io=io)
               for io in ("read", "map", "auto")}
    for io, got in results.items():
        assert got.dtype == want.dtype, io
        assert got.tobytes() == want.tobytes(), io


def test_pad_none_and_many_threads_agree_between_modes(tmp_path):
    lengths = [40 + 3 * k for k in range(30)]
    arrays = make_archive(tmp_path / "a.npz", np.float32, lengths, trailing=(80,))
    ds = mmnpz.Dataset(str(tmp_path / "a.npz"))
    rng = np.random.default_rng(3)
    indices = rng.integers(0, len(lengths), 256)
    starts = np.array([rng.integers(0, lengths[i] - 32 + 1) for i in indices])
    want = np.stack([arrays[i][s:s + 32] for i, s in zip(indices, starts)])
    for threads in (1, 2, 0):
        for io in ("read", "map"):
            assert np.array_equal(ds.gather(indices, starts, 32, threads=threads, io=io), want)


@pytest.mark.parametrize("pad", ["none", "fill", "wrap"])
def test_fields_at_other_rates_agree_between_modes(tmp_path, pad):
    spec, labels = {}, {}
    for k in range(6):
        n = 8 * (k + 2)
        spec[f"c{k}_spec"] = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 1000 * k
        labels[f"c{k}_labels"] = np.arange(n // 4, dtype=np.int16) + 100 * k
    np.savez(tmp_path / "f.npz", **spec, **labels)
    path = str(tmp_path / "f.npz")
    indices = np.array([5, 0, 3, 3, 1])
    starts = np.array([8, 4, 12, 0, 8])
    out = {}
    for io in ("read", "map"):
        s = mmnpz.Dataset(path, select="*_spec", io=io)
        lab = mmnpz.Dataset(path, select="*_labels", io=io)
        out[io] = mmnpz.gather_fields([(s, indices, 1), (lab, indices, "1/4")], starts, 8, pad=pad,
                                      valid=True, io=io)
    (a, av), (b, bv) = out["read"], out["map"]
    for x, y in zip(a + av, b + bv):
        assert x.tobytes() == y.tobytes()
    assert np.array_equal(a[1][0], labels["c5_labels"][2:4])


def test_a_dataset_opened_with_map_can_still_be_read_and_keeps_views_mapped(tmp_path):
    arrays = make_archive(tmp_path / "a.npz", np.float32, [10, 20])
    ds = mmnpz.Dataset(str(tmp_path / "a.npz"), io="map")
    got = ds.gather([1, 0], [15, 2], 8, pad="wrap", io="read")
    assert np.array_equal(got[0], arrays[1][np.arange(15, 23) % 20])
    assert isinstance(ds[1], np.memmap) or not ds[1].flags.owndata  # a view, not a copy
    ds2 = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(ds2.gather([1], [3], 4), arrays[1][None, 3:7])
    assert ds2._options.io == "map"


def test_an_unknown_io_mode_is_refused_with_the_choices(tmp_path):
    make_archive(tmp_path / "a.npz", np.float32, [10])
    with pytest.raises(ValueError, match="io must be one of 'auto', 'read', 'map', not 'mmap'"):
        mmnpz.Dataset(str(tmp_path / "a.npz"), io="mmap")
    ds = mmnpz.Dataset(str(tmp_path / "a.npz"))
    with pytest.raises(ValueError, match="io must be one of 'auto', 'read', 'map', not 'x'"):
        ds.gather([0], [0], 4, io="x")


def truncated_dataset(tmp_path):
    arrays = make_archive(tmp_path / "t.npz", np.float32, [10, 10, 10])
    path = str(tmp_path / "t.npz")
    ds = mmnpz.Dataset(path, io="read")  # "auto" copies pages in memory through the mapping
    with open(path, "rb") as f:
        offset = f.read().index(arrays[1].tobytes())  # where clip_1's data begins
    os.truncate(path, offset + 53)  # 4 rows of 12 bytes and 5 bytes of the fifth
    return ds, path, offset


TRUNCATED = ("{path}: member 'clip_1.npy' at offset {offset}: read 29 of 72 bytes: the "
             "archive was truncated after it was opened")


def test_an_archive_truncated_after_opening_raises_an_error_naming_the_member(tmp_path):
    ds, path, offset = truncated_dataset(tmp_path)
    with pytest.raises(mmnpz.FormatError) as e:
        ds.gather([0, 1], [0, 2], 6, io="read")
    assert str(e.value) == TRUNCATED.format(path=path, offset=offset + 24)
    assert e.value.member == "clip_1.npy"
    assert e.value.offset == offset + 24
    # The Loader (reading as the Dataset says) raises it from its background gather too.
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds.lengths, "shuffle", length=6, seed=1), 3)
    with pytest.raises(mmnpz.FormatError, match="clip_1.npy.*truncated after it was opened"):
        for _ in loader:
            pass


def _gather_in_worker(ds, opened, truncated, results):
    opened.set()  # the worker holds the dataset (spawn: reopened from its pickle) ...
    truncated.wait(60)  # ... before the archive is cut
    try:
        ds.gather([0, 1], [0, 2], 6, io="read")
        results.put("no error")
    except mmnpz.FormatError as e:
        results.put(str(e))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_process_gets_the_truncation_error_too(tmp_path, method):
    arrays = make_archive(tmp_path / "t.npz", np.float32, [10, 10, 10])
    path = str(tmp_path / "t.npz")
    with open(path, "rb") as f:
        offset = f.read().index(arrays[1].tobytes())
    ds = mmnpz.Dataset(path, io="read")
    ctx = multiprocessing.get_context(method)
    opened, truncated, results = ctx.Event(), ctx.Event(), ctx.Queue()
    worker = ctx.Process(target=_gather_in_worker, args=(ds, opened, truncated, results))
    worker.start()
    try:
        assert opened.wait(60)
        os.truncate(path, offset + 53)
        truncated.set()
        assert results.get(timeout=60) == TRUNCATED.format(path=path, offset=offset + 24)
    finally:
        worker.join(60)
    assert worker.exitcode == 0


def _gather_batches(ds, io, batches, out):
    for indices, starts in batches:
        ds.gather(indices, starts, out.shape[1], out=out, threads=2, io=io)


@pytest.mark.parametrize("io", ["read", "map"])
def test_gathering_by_reads_adds_no_resident_memory_beyond_its_output(scratch_path, io):
    # 24 MiB of data, 24 batches of 8 MiB taken at random: by reads the pieces go from the
    # page cache straight into `out` (no staging buffer, no file page mapped into this
    # process); through the mapping, the pages touched join this process's RssFile. The
    # second case shows that the measure sees what the first one rules out.
    from test_zero_copy import grown_kib, memory_kib

    path = scratch_path / "rows.npz"
    rows, members = 8192, 12
    with mmnpz.NpzWriter(path) as writer:
        for k in range(members):
            writer.write(f"m{k}", np.full((rows, 64), k, np.float32))  # 2 MiB each
    ds = mmnpz.Dataset(path, io=io)
    rng = np.random.default_rng(3)
    length, batch = 512, 64
    batches = [(rng.integers(0, members, batch), rng.integers(0, rows - length + 1, batch))
               for _ in range(24)]
    out = np.ones((batch, length, 64), np.float32)  # its pages resident before the measure
    # The pool's threads and first allocations, on an archive of their own: the measured
    # gathers meet every page of rows.npz first.
    np.savez(scratch_path / "warm.npz", w=np.zeros((length, 64), np.float32))
    warm = mmnpz.Dataset(scratch_path / "warm.npz", io=io)
    _gather_batches(warm, io, [(np.zeros(batch, np.int64), np.zeros(batch, np.int64))], out)
    before = memory_kib()
    _gather_batches(ds, io, batches, out)
    grown = grown_kib(before)
    indices, _ = batches[-1]
    assert [np.unique(out[k]).tolist() for k in range(batch)] == [[float(i)] for i in indices]
    data_kib = members * rows * 64 * 4 >> 10
    assert grown["RssAnon"] < 1024, grown
    if io == "read":
        assert grown["RssFile"] < 1024, grown
    else:
        assert grown["RssFile"] > data_kib // 2, grown
