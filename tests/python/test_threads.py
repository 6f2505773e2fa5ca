"""Many threads reading, and first-accessing, the same members get identical results."""

import threading
import zipfile

import numpy as np
import pytest

import mmnpz

THREADS = 8


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """100 stored and 20 deflated members; returns (path, {key: array numpy loads})."""
    path = tmp_path_factory.mktemp("threads") / "t.npz"
    rng = np.random.default_rng(5)
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(120):
            array = rng.standard_normal((50 + i, 7)).astype("<f4" if i % 2 else ">f8")
            method = zipfile.ZIP_DEFLATED if i % 6 == 0 else zipfile.ZIP_STORED
            info = zipfile.ZipInfo(f"m{i:03d}.npy")
            info.compress_type = method
            with zf.open(info, "w") as fh:
                np.lib.format.write_array(fh, array)
    with np.load(path) as npz:
        return path, {key: npz[key] for key in npz.files}


def run_threads(target):
    """Runs target(thread_index) in THREADS threads started together; returns their results."""
    barrier = threading.Barrier(THREADS)
    results, errors = [None] * THREADS, []

    def run(t):
        try:
            barrier.wait()
            results[t] = target(t)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def pointer(array):
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("cache", [True, False])
def test_threads_first_accessing_the_same_members_get_identical_results(archive, cache,
                                                                        assert_same):
    path, expected = archive
    keys = list(expected)
    for trial in range(4):  # a fresh reader each time: every access races to be the first
        reader = mmnpz.load(path, cache=cache)

        def access(t):
            order = keys if t % 2 else keys[::-1]  # half of them from the other end
            got = {}
            for key in order:
                item = reader[key if t % 3 else key + ".npy"]
                got[key] = (item, pointer(item), item.tobytes())
            return got

        results = run_threads(access)
        for key in keys:
            info = reader.info(key)
            items = [r[key][0] for r in results]
            assert len({r[key][2] for r in results}) == 1, key
            assert_same(items[0], expected[key], key)
            if not info.compressed:
                base = pointer(reader.mmap)
                assert {r[key][1] for r in results} == {base + info.offset}, key
            if cache:
                assert all(item is reader[key] for item in items), key


def test_threads_verifying_and_reading_at_once_agree(archive):
    path, expected = archive
    reader = mmnpz.load(path)

    def work(t):
        if t % 2:
            return reader.verify()
        return {key: float(np.asarray(reader[key], dtype="f8").sum()) for key in expected}

    results = run_threads(work)
    assert all(r == {} for r in results[1::2])
    sums = {key: float(np.asarray(a, dtype="f8").sum()) for key, a in expected.items()}
    assert all(r == sums for r in results[0::2])
