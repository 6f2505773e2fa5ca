"""Opening, verify(), inflation and writing run without the GIL.

Method: the switch interval is raised to 60 s, so the interpreter never takes the GIL from a
thread by force; the main thread can then run Python code while a worker thread is inside
a call only if that call released the GIL. The main thread counts loop iterations (each
ending in time.sleep(0), which hands the GIL back once the call returns) and the worker
notes how far the count advanced during the call: exactly 0 if the GIL was held.
"""

import sys
import threading
import time
import zipfile

import numpy as np

import mmnpz


def progress_during(call):
    """How many main-thread iterations ran while call() ran in another thread."""
    counter, during, errors = [0], [], []

    def worker():
        try:
            before = counter[0]
            call()
            during.append(counter[0] - before)
        except BaseException as e:
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        while thread.is_alive():
            counter[0] += 1
            time.sleep(0)
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    return during[0]


def test_a_call_holding_the_gil_lets_the_main_thread_make_no_progress():
    # the method's control: pure Python code in the worker never gives the GIL away
    assert progress_during(lambda: sum(range(3_000_000))) == 0


def test_verify_of_a_200_mb_archive_lets_python_threads_run(big_archive):
    reader = mmnpz.load(big_archive)
    result = {}
    assert progress_during(lambda: result.update(reader.verify())) > 10
    assert result == {}


def test_opening_an_archive_of_70000_members_lets_python_threads_run(fixtures_dir):
    path = f"{fixtures_dir}/good/many_members_70000.npz"
    readers = []
    assert progress_during(lambda: readers.append(mmnpz.load(path))) > 0
    assert len(readers[0]) == 70000


def test_inflating_a_deflated_member_lets_python_threads_run(tmp_path):
    path = tmp_path / "deflated.npz"
    big = np.zeros(48 << 20, dtype=np.uint8)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("big.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, big)
    reader = mmnpz.load(path)
    # info() inflates (to read the .npy header) without copying into a numpy array
    assert progress_during(lambda: reader.info("big")) > 10
    assert reader.info("big").compressed
    assert not reader["big"].any()


def test_writing_a_large_array_lets_python_threads_run(scratch_path):
    array = np.ones(96 << 20, dtype=np.uint8)
    with mmnpz.NpzWriter(scratch_path / "w.npz") as writer:
        assert progress_during(lambda: writer.write("a", array)) > 10
    assert mmnpz.load(scratch_path / "w.npz")["a"].shape == array.shape
