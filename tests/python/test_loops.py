"""Training loops as users write them: epochs over passes, short items decided up front, errors
in the words of the call, and dataset views (slices, subsets, splits, concat, folders)."""

import itertools
import pickle
import warnings
import zipfile

import numpy as np
import pytest

import mmnpz
from test_data import write_shards


@pytest.fixture
def shards(tmp_path):
    return tmp_path / "train@3.npz", write_shards(tmp_path, rng=np.random.default_rng(13))


def write_lengths(path, lengths, bins=2):
    """An archive of members item0 .. with the given lengths; returns the list of arrays."""
    arrays = [np.arange(n * bins, dtype=np.float32).reshape(n, bins) + k for k, n in
              enumerate(lengths)]
    np.savez(path, **{f"item{k}": a for k, a in enumerate(arrays)})
    return arrays


def order_of(passes):
    return [tuple(b.indices.tolist()) for b in passes]


# ---- Epochs in loops -----------------------------------------------------------------------

def test_each_pass_over_a_loader_is_the_next_epoch(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=1, seed=3)
    loader = mmnpz.Loader(ds, sampler, 4)
    passes = []
    for _ in range(3):
        batches = list(loader)
        assert len(batches) == len(ds) // 4
        passes.append(batches)
    assert [{b.epoch for b in p} for p in passes] == [{0}, {1}, {2}]
    for e, p in enumerate(passes):
        want = sampler.sample(e)[0][: len(p) * 4].tolist()
        assert [i for b in p for i in b.indices.tolist()] == want
    assert order_of(passes[0]) != order_of(passes[1]) != order_of(passes[2])
    assert len(loader) == len(ds) // 4  # the next pass


def test_a_pass_after_a_break_finishes_that_epoch_and_the_stream_is_unchanged(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=1, seed=5)
    whole = mmnpz.Loader(ds, sampler, 2)
    want = [list(whole), list(whole)]
    loader = mmnpz.Loader(ds, sampler, 2)
    first = list(itertools.islice(loader, 3))
    assert len(loader) == len(want[0]) - 3
    rest = list(loader)
    assert order_of(first + rest) == order_of(want[0])
    assert order_of(list(loader)) == order_of(want[1])


def test_epochs_given_run_in_one_pass_and_then_the_loader_is_used_up(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=1, seed=2)
    loader = mmnpz.Loader(ds, sampler, 4, epochs=2)
    batches = list(loader)
    assert [b.epoch for b in batches] == [0] * 5 + [1] * 5
    assert len(loader) == 0
    with pytest.raises(RuntimeError) as e:
        for _ in loader:
            pass
    assert str(e.value) == (
        "Loader(epochs=2): the loader is used up (its 2 epochs ran); leave epochs= out to make "
        "each pass over the loader the next epoch, pass epochs=None for an endless loader, or "
        "go back with load_state_dict()")
    loader.load_state_dict({"epoch": 1, "position": 0})
    assert order_of(loader) == order_of(batches[5:])


def test_an_endless_loader_runs_on_through_epochs(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, length=1), 7, epochs=None)
    assert [b.epoch for b in itertools.islice(loader, 7)] == [0, 0, 0, 1, 1, 1, 2]
    assert next(iter(loader)).epoch == 2  # a new pass continues


def test_a_new_pass_or_a_loaded_state_ends_the_pass_under_way(shards):
    """Two live passes yielded the same batches (each from the place when it began), and a
    pass begun before load_state_dict() overwrote the loaded place with its own."""
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, length=1, seed=3), 2, epochs=None)
    ended = ("^Loader: this pass was ended by a newer iter\\(\\) or load_state_dict\\(\\) of the "
             "same loader; iterate the loader again to go on from its place$")
    first = iter(loader)
    assert [b.position for b in itertools.islice(first, 2)] == [0, 2]
    second = iter(loader)
    assert next(second).position == 4
    with pytest.raises(RuntimeError, match=ended):
        next(first)
    assert [next(second).position, loader.position] == [6, 8]
    loader.load_state_dict({"epoch": 0, "position": 2})
    with pytest.raises(RuntimeError, match=ended):
        next(second)
    assert loader.state_dict()["position"] == 2  # the ended pass did not move it
    assert next(iter(loader)).position == 2


def test_state_dict_resumes_exactly_across_passes(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=4, pad="fill", seed=9)
    want = mmnpz.Loader(ds, sampler, 3, pad="fill")
    want = [list(want) for _ in range(2)]
    loader = mmnpz.Loader(ds, sampler, 3, pad="fill")
    list(loader)
    list(itertools.islice(loader, 2))
    state = loader.state_dict()
    resumed = mmnpz.Loader(ds, sampler, 3, pad="fill")
    resumed.load_state_dict(state)
    got = list(resumed)
    assert order_of(got) == order_of(want[1][2:])
    for g, w in zip(got, want[1][2:]):
        assert np.array_equal(g.data, w.data) and np.array_equal(g.starts, w.starts)


# ---- Short items decided up front ----------------------------------------------------------

def test_a_loader_refuses_short_items_when_it_is_made_naming_the_shortest(tmp_path):
    write_lengths(tmp_path / "a.npz", [10, 3, 12, 5, 2, 9])
    ds = mmnpz.Dataset(tmp_path / "a.npz")
    sampler = mmnpz.Sampler(ds, length=6)  # shuffle, pad not known yet: no check
    with pytest.raises(ValueError) as e:
        mmnpz.Loader(ds, sampler, 2)
    assert str(e.value) == (
        "Loader(pad='none'): 3 of 6 items are shorter than length=6, the shortest 'item4' with "
        "2 rows; pass pad='fill' or pad='wrap' to pad them, or leave them out with "
        "Dataset(..., min_length=6)")
    for pad in ("fill", "wrap"):
        batches = list(mmnpz.Loader(ds, sampler, 2, pad=pad))
        assert sum(len(b.indices) for b in batches) == 6


def test_a_sampler_told_the_pad_rule_refuses_short_items(tmp_path):
    arrays = write_lengths(tmp_path / "a.npz", [10, 3, 12])
    with pytest.raises(ValueError) as e:
        mmnpz.Sampler(mmnpz.Dataset(tmp_path / "a.npz"), "sequential", length=4, pad="none")
    assert str(e.value) == (
        "Sampler(pad='none'): 1 of 3 items are shorter than length=4, the shortest 'item1' "
        "with 3 rows; pass pad='fill' or pad='wrap' to pad them, or leave them out with "
        "Dataset(..., min_length=4)")
    with pytest.raises(ValueError, match=r"^Sampler\(pad='none'\): 1 of 3 items .* the "
                                         r"shortest item 1 with 3 rows;"):
        mmnpz.Sampler([len(a) for a in arrays], "replacement", length=4, pad="none")
    mmnpz.Sampler([10, 3, 12], "shuffle", length=4, pad="wrap")
    mmnpz.Sampler([10, 3, 12], "sliding", length=4, pad="none")  # never draws item 1


def test_min_length_leaves_out_short_items_and_keeps_names_and_indices_consistent(tmp_path):
    arrays = write_lengths(tmp_path / "a.npz", [10, 3, 12, 5, 2, 9])
    ds = mmnpz.Dataset(tmp_path / "a.npz", min_length=5)
    kept = [0, 2, 3, 5]
    assert len(ds) == 4
    assert ds.lengths.tolist() == [10, 12, 5, 9]
    assert ds.names.tolist() == [f"item{k}" for k in kept]
    for i, k in enumerate(kept):
        assert ds.name(i) == f"item{k}" and ds.index(f"item{k}") == i
        assert np.array_equal(ds[i], arrays[k]) and np.array_equal(ds[f"item{k}"], arrays[k])
    with pytest.raises(KeyError):
        ds.index("item1")
    out = ds.gather([3, 0], [1, 2], 3)
    assert np.array_equal(out, np.stack([arrays[5][1:4], arrays[0][2:5]]))
    batches = list(mmnpz.Loader(ds, mmnpz.Sampler(ds, length=5), 2))  # pad="none" is fine
    assert sorted(i for b in batches for i in b.indices.tolist()) == [0, 1, 2, 3]
    again = pickle.loads(pickle.dumps(ds))
    assert again.names.tolist() == ds.names.tolist()
    longer = mmnpz.Dataset(ds[::-1], min_length=10)  # a filter of a view
    assert longer.names.tolist() == ["item2", "item0"]
    assert np.array_equal(longer[np.array(1)], arrays[0])
    with pytest.raises(ValueError, match="^Dataset: min_length must not be negative, not -1$"):
        mmnpz.Dataset(tmp_path / "a.npz", min_length=-1)


def test_the_weighted_sampler_warns_about_items_it_can_never_draw(tmp_path):
    write_lengths(tmp_path / "a.npz", [10, 3, 12, 2])
    ds = mmnpz.Dataset(tmp_path / "a.npz")
    with pytest.warns(UserWarning) as caught:
        sampler = mmnpz.Sampler(ds, "weighted", length=4, num_samples=400)
    assert [str(w.message) for w in caught] == [
        "Sampler(kind='weighted'): 2 of 4 items are shorter than length=4 and are never "
        "drawn; pass pad='fill' or pad='wrap' to draw them padded, or leave them out with "
        "Dataset(..., min_length=4)"]
    assert set(sampler.sample(0)[0].tolist()) == {0, 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        padded = mmnpz.Sampler(ds, "weighted", length=4, num_samples=400, pad="fill")
        mmnpz.Sampler(ds, "weighted", length=2, num_samples=4)
    indices, starts = padded.sample(0)
    assert set(indices.tolist()) == {0, 1, 2, 3}
    assert set(starts[(indices == 1) | (indices == 3)].tolist()) == {0}
    batch = next(iter(mmnpz.Loader(ds, padded, 400, pad="fill")))
    assert batch.valid[indices == 1].tolist() == [3] * int(np.sum(indices == 1))
    with pytest.raises(ValueError, match=r"^Loader: the sampler draws items shorter than its "
                                         r"length padded \(Sampler\(pad='fill'\)\); pass the "
                                         r"Loader the same pad$"):
        mmnpz.Loader(ds, padded, 4)


# ---- Errors in the user's words ------------------------------------------------------------

def error_of(call):
    with pytest.raises((ValueError, IndexError, TypeError)) as e:
        call()
    return str(e.value)


def test_a_loader_refuses_now_what_gave_other_batches_later(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    weighted = mmnpz.Sampler(ds, "weighted", length=4, num_samples=40, pad="fill")
    # Fields given by a generator were used up by the checks: the batches had none.
    loader = mmnpz.Loader(ds, weighted, 2, pad="fill", fields=((ds, 1) for _ in range(1)))
    assert len(loader.fields) == 2 and isinstance(next(iter(loader)).data, tuple)
    # A state resumed into a Loader of another sampler, or other items, gave other batches.
    state = mmnpz.Loader(ds, weighted, 2, pad="fill").state_dict()
    others = {
        "the saved state has num_samples=40, this loader 12":
            mmnpz.Loader(ds, mmnpz.Sampler(ds, "weighted", length=4, num_samples=12, pad="fill"),
                         2, pad="fill"),
        "the saved state has length=4, this loader 3":
            mmnpz.Loader(ds, mmnpz.Sampler(ds, "weighted", length=3, num_samples=40, pad="fill"),
                         2, pad="fill"),
        "the saved state has drop_last=True, this loader False":
            mmnpz.Loader(ds, weighted, 2, pad="fill", drop_last=False),
        f"the saved state was made for other items (of other lengths; as many, {len(ds)})":
            mmnpz.Loader(ds[::-1], mmnpz.Sampler(ds[::-1], "weighted", length=4,
                                                 num_samples=40, pad="fill"), 2, pad="fill"),
    }
    for want, other in others.items():
        with pytest.raises(ValueError) as e:
            other.load_state_dict(state)
        assert str(e.value) == f"Loader.load_state_dict: {want}"
        assert other.state_dict()["position"] == 0  # unchanged
    # A state saved before these keys were added is not checked for them.
    old = {k: state[k] for k in ("epoch", "position", "seed", "kind", "batch_size", "rank",
                                 "world_size")}
    others["the saved state has length=4, this loader 3"].load_state_dict(old)
    with pytest.raises(ValueError, match=r"^Loader.load_state_dict: the saved state's epoch "
                                         r"18446744073709551616 is too large for a 64-bit "
                                         r"integer$"):
        loader.load_state_dict(dict(state, epoch=2**64))  # was refused at the first batch
    # Excerpts longer than the sampler's ran past items' ends some batches later.
    with pytest.raises(ValueError, match=r"^Loader: length=5 is longer than the sampler's "
                                         r"excerpts \(4\), whose starts keep only those inside "
                                         r"the items: make the sampler with length=5, or pad "
                                         r"\('fill', 'wrap'\)$"):
        mmnpz.Loader(ds, mmnpz.Sampler(ds, "sliding", length=4), 2, length=5)
    mmnpz.Loader(ds, mmnpz.Sampler(ds, "sliding", length=4), 2, length=3)  # shorter: inside


def test_errors_name_the_call_and_argument_not_internal_names(shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    sampler = mmnpz.Sampler(ds, length=2)
    cases = {
        lambda: mmnpz.Sampler(ds, "zigzag"):
            "Sampler: kind must be one of 'sequential', 'shuffle', 'replacement', 'sliding', "
            "'weighted', not 'zigzag'",
        lambda: mmnpz.Sampler(ds, "weighted"): "Sampler: weighted sampling needs an excerpt "
                                               "length",
        lambda: mmnpz.Sampler(ds, length=1000): "Sampler: an excerpt of 1000 rows is longer "
                                                "than every item (the longest has "
                                                f"{int(ds.lengths.max())})",
        lambda: mmnpz.Sampler(ds, rank=2, world_size=2): "Sampler: rank 2 is not below "
                                                         "world_size 2",
        lambda: mmnpz.Sampler(ds, pad="zero"): "Sampler: pad must be one of 'none', 'fill', "
                                               "'wrap' or None, not 'zero'",
        # Options the kind has no use for were ignored (one epoch of the items, not 50 draws).
        lambda: mmnpz.Sampler(ds, "shuffle", num_samples=50): "Sampler: num_samples applies "
                                                              "to replacement and weighted "
                                                              "sampling only, not to shuffle",
        lambda: mmnpz.Sampler(ds, "weighted", length=2, hop=1): "Sampler: hop applies to "
                                                                "sliding sampling only, not "
                                                                "to weighted",
        lambda: mmnpz.Sampler(ds, "sliding", length=2, random_crop=False):
            "Sampler: random_crop off applies to sequential, shuffle and replacement sampling "
            "only, not to sliding",
        lambda: sampler.sample(0, 20, 5): "Sampler.sample: positions [20, 25) run past the "
                                          "end of the epoch (21 samples for rank 0 of 1)",
        lambda: mmnpz.Loader(ds, sampler, 0): "Loader: batch_size must be positive, not 0",
        lambda: mmnpz.Loader(ds, sampler, 2, pad="zero"): "Loader: pad must be one of 'none', "
                                                          "'fill', 'wrap', not 'zero'",
        lambda: mmnpz.Loader(ds, sampler, 50): "Loader: an epoch of 21 samples for rank 0 has "
                                               "no full batch of 50",
        lambda: mmnpz.Loader(ds, sampler, 2, pad="fill").load_state_dict({"seed": 1}):
            "Loader.load_state_dict: the saved state has seed=1, this loader 0",
        lambda: mmnpz.Loader(ds, sampler, 2, pad="fill", fields=[ds]):
            "Loader: fields[0] must be a pair (mmnpz.Dataset, rate), not Dataset",
        lambda: mmnpz.Loader(ds, sampler, 2, pad="fill", fields=[(2, ds)]):
            "Loader: fields[0] must be a pair (mmnpz.Dataset, rate), not (int, ...)",
        lambda: mmnpz.Loader(ds, sampler, 2, pad="fill", epochs=1.5):
            "Loader: epochs must be an integer, not float",
        # Sizes, seeds and ranks given as floats or strings were truncated or parsed by int().
        lambda: mmnpz.Loader(ds, sampler, 2.5): "Loader: batch_size must be an integer, not "
                                                "float",
        lambda: mmnpz.Loader(ds, sampler, 2, length=1.9): "Loader: length must be an integer, "
                                                          "not float",
        lambda: mmnpz.Loader(ds, sampler, 2, prefetch="2"): "Loader: prefetch must be an "
                                                            "integer, not str",
        lambda: mmnpz.Sampler(ds, seed=1.5): "Sampler: seed must be an integer, not float",
        lambda: mmnpz.Sampler(ds, length="2"): "Sampler: length must be an integer, not str",
        lambda: mmnpz.Sampler(ds, "sliding", length=2, hop=1.0): "Sampler: hop must be an "
                                                                 "integer, not float",
        lambda: mmnpz.Sampler(ds, "replacement", num_samples=4.0): "Sampler: num_samples must "
                                                                   "be an integer, not float",
        lambda: mmnpz.Sampler(ds, rank=0.0, world_size=1): "Sampler: rank must be an integer, "
                                                           "not float",
        lambda: mmnpz.Sampler(ds, rank=0, world_size=1.0): "Sampler: world_size must be an "
                                                           "integer, not float",
        lambda: ds.gather([0], [0], 2.5): "Dataset.gather: length must be an integer, not "
                                          "float",
        lambda: mmnpz.gather_fields([(ds, [0], 1)], [0], 2.5): "gather_fields: length must be "
                                                               "an integer, not float",
        lambda: sampler.sample(2**64): "Sampler.sample: epoch 18446744073709551616 is too "
                                       "large for a 64-bit integer",
        lambda: mmnpz.Dataset(spec, threads=None): "Dataset: threads must be an integer, not "
                                                   "NoneType",
        lambda: mmnpz.Dataset(spec, min_length=2.0): "Dataset: min_length must be an integer, "
                                                     "not float",
        lambda: ds.gather([0], [0], 2, threads=1.0): "Dataset.gather: threads must be an "
                                                     "integer, not float",
        lambda: mmnpz.Loader(ds, sampler, 2, threads="1"): "Loader: threads must be an "
                                                           "integer, not str",
        lambda: ds.split([0.5], seed=1.0): "split: seed must be an integer, not float",
        lambda: sampler.sample(0, 5, 2**40): "Sampler.sample: positions [5, 1099511627781) run "
                                             "past the end of the epoch (21 samples for rank 0 "
                                             "of 1)",
        lambda: mmnpz.gather_fields([(ds, [0])], [0], 2):
            "gather_fields: fields[0] must be a triple (mmnpz.Dataset, indices, rate), not a "
            "tuple of 2 items, the first of type Dataset",
        lambda: mmnpz.gather_fields([5], [0], 2):
            "gather_fields: fields[0] must be a triple (mmnpz.Dataset, indices, rate), not int",
        lambda: sampler.sample(-1): "Sampler.sample: epoch must not be negative, not -1",
        lambda: sampler.sample(0, -2): "Sampler.sample: position must not be negative, not -2",
        lambda: sampler.sample(0, 0, -3): "Sampler.sample: count must not be negative, not -3",
        lambda: sampler.sample(1.5): "Sampler.sample: epoch must be an integer, not float",
        lambda: sampler.sample(0, 0, 2.0): "Sampler.sample: count must be an integer, not "
                                           "float",
        lambda: mmnpz.Dataset(spec, order="zip"): "Dataset: order must be one of "
                                                  "'concatenate', 'interleave', not 'zip'",
        lambda: mmnpz.Dataset([]): "Dataset: no archives given",
        # A mistyped select gave an empty dataset ("no items to sample from", later).
        lambda: mmnpz.Dataset(spec, select="clips*"): "Dataset: select 'clips*' matches no "
                                                      "member of any of the 3 archives (names "
                                                      "are matched without \".npy\")",
        lambda: ds.gather([0], [0], 2, pad="zero"): "Dataset.gather: pad must be one of "
                                                    "'none', 'fill', 'wrap', not 'zero'",
        lambda: ds[2:5].gather([3], [0], 2): "Dataset.gather: index 3 is out of range for a "
                                             "dataset of 3 items",
        lambda: mmnpz.gather_fields([(ds, [0], 0)], [0], 2): "gather_fields: a field's rate "
                                                            "must be positive, not 0",
        lambda: mmnpz.Loader(ds, sampler, 2**70): "Loader: a number given is too large for a "
                                                  "64-bit integer (int too big to convert)",
        lambda: ds.gather([0], [0], 2**64): "Dataset.gather: a number given is too large for "
                                            "a 64-bit integer (int too big to convert)",
        lambda: mmnpz.Dataset(spec, threads=2**64): "Dataset: a number given is too large for "
                                                    "a 64-bit integer (int too big to convert)",
    }
    for call, want in cases.items():
        got = error_of(call)
        assert got == want
        assert "<" not in got.split(":")[0] and "weighted_excerpts" not in got


def test_a_saved_state_that_is_no_place_in_an_epoch_is_refused_and_leaves_the_loader_as_it_was(
        shards):
    spec, _ = shards
    ds = mmnpz.Dataset(spec)
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, length=2, pad="fill", seed=3), 4, pad="fill")
    first = next(iter(loader))
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (0, 4)
    cases = {
        None: (TypeError, "state must be a dict made by state_dict(), not NoneType"),
        (0, 4): (TypeError, "state must be a dict made by state_dict(), not tuple"),
        "epoch": (TypeError, "state must be a dict made by state_dict(), not str"),
        "no position": (ValueError, "the saved state has no 'position'"),
        "epoch -1": (ValueError, "the saved state's epoch must not be negative, not -1"),
        "position -4": (ValueError, "the saved state's position must not be negative, not -4"),
        "position 22": (ValueError, "the saved state's position 22 is past the end of an "
                                    "epoch of 21 samples for rank 0"),
        "epoch '1'": (TypeError, "the saved state's epoch must be an integer, not str"),
        "position 4.0": (TypeError, "the saved state's position must be an integer, not float"),
    }
    bad = {"no position": {"epoch": 1}, "epoch -1": dict(state, epoch=-1),
           "position -4": dict(state, position=-4), "position 22": dict(state, position=22),
           "epoch '1'": dict(state, epoch="1"), "position 4.0": dict(state, position=4.0)}
    for given, (kind, want) in cases.items():
        with pytest.raises(kind) as e:
            loader.load_state_dict(bad.get(given, given) if isinstance(given, str) else given)
        assert str(e.value) == f"Loader.load_state_dict: {want}", given
        assert loader.state_dict() == state, given
    # The end of an epoch is a place, and so is a place with no full batch left (drop_last):
    # the next batch is the next epoch's first, and the state says so.
    for end in (21, 18):
        loader.load_state_dict(dict(state, position=end))
        assert (loader.state_dict()["epoch"], loader.state_dict()["position"]) == (1, 0)
        second = next(iter(loader))
        assert (second.epoch, second.position) == (1, 0)
    loader.load_state_dict(dict(state, position=17))
    assert next(iter(loader)).position == 17
    loader.load_state_dict(dict(state, epoch=0, position=0))
    assert np.array_equal(next(iter(loader)).indices, first.indices)


def test_a_gather_error_in_a_loader_names_the_archive_and_member(tmp_path):
    import os
    write_lengths(tmp_path / "a.npz", [3] * 20)
    ds = mmnpz.Dataset(tmp_path / "a.npz")
    # Starts cropped for 1-row excerpts, a Loader of 3-row ones: an error at the first batch,
    # refused when the Loader is made now.
    sampler = mmnpz.Sampler(ds, "sequential", length=1, seed=1)
    with pytest.raises(ValueError, match="^Loader: length=3 is longer than the sampler's "):
        mmnpz.Loader(ds, sampler, 20, length=3)
    # An archive cut after the Loader was made: only the gather can tell.
    loader = mmnpz.Loader(ds, mmnpz.Sampler(ds, "sequential", length=3), 20)
    os.truncate(tmp_path / "a.npz", 300)
    with pytest.raises(mmnpz.FormatError) as e:
        next(iter(loader))
    assert str(e.value).startswith(f"{tmp_path / 'a.npz'}: member 'item")
    assert str(e.value).endswith(": the archive was truncated after it was opened")


# ---- Dataset views -------------------------------------------------------------------------

def test_views_equal_numpy_indexing_of_the_items(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    items, names = list(arrays.values()), np.array(list(arrays))
    assert ds.names.tolist() == names.tolist() and not ds.names.flags.writeable
    mask = ds.lengths > 20
    for key in (slice(2, 17, 3), slice(None, None, -1), [5, 1, 3, 1], np.array([-1, 0]), mask):
        view = ds[key] if not isinstance(key, np.ndarray) or key.dtype != bool else ds.subset(key)
        picked = np.arange(len(ds))[key]
        assert len(view) == len(picked)
        assert view.names.tolist() == names[picked].tolist()
        assert view.lengths.tolist() == [len(items[k]) for k in picked]
        for i, k in enumerate(picked):
            assert np.array_equal(view[i], items[k])
            assert view.locate(i) == ds.locate(k)
        if len(view):
            starts = np.zeros(len(view), np.int64)
            got = view.gather(np.arange(len(view)), starts, 1)
            assert np.array_equal(got, np.stack([items[k][:1] for k in picked]))
    inner = ds[3:15][::2][[0, 2]]  # a view of a view of a view
    assert inner.names.tolist() == names[[3, 7]].tolist()
    assert inner.paths == ds.paths and inner._d is ds._d  # the archives are shared
    assert ds.subset(np.zeros(len(ds), bool)).lengths.tolist() == []
    with pytest.raises(IndexError, match="^subset: index 21 is out of range for a dataset "
                                         "of 21 items$"):
        ds[[0, 21]]
    with pytest.raises(ValueError, match=r"^subset: a mask must have one entry per item \(21\)"):
        ds.subset([True, False])


def test_a_loader_and_gather_fields_over_a_view_draw_only_its_items(shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    items = list(arrays.values())
    picked = np.flatnonzero(ds.lengths >= 8)
    view = ds[picked]
    sampler = mmnpz.Sampler(view, length=8, seed=4)
    for batch in mmnpz.Loader(view, sampler, 3):
        for row, i, s in zip(batch.data, batch.indices, batch.starts):
            assert np.array_equal(row, items[picked[i]][s:s + 8])
    (got,) = mmnpz.gather_fields([(view, [1, 0], 1)], [0, 0], 8)
    assert np.array_equal(got, np.stack([items[picked[1]][:8], items[picked[0]][:8]]))


def test_pickling_a_view_round_trips(shards):
    spec, arrays = shards
    view = mmnpz.Dataset(spec)[[7, 2, 19]]
    again = pickle.loads(pickle.dumps(view))
    assert again.names.tolist() == view.names.tolist()
    assert again.lengths.tolist() == view.lengths.tolist()
    for i in range(3):
        assert np.array_equal(again[i], view[i])
    assert mmnpz.Dataset(view).names.tolist() == view.names.tolist()


def test_a_split_is_stable_when_items_are_added(tmp_path):
    rng = np.random.default_rng(5)
    write_shards(tmp_path, shards=2, per_shard=40, stem="old", rng=rng)
    old = mmnpz.Dataset(tmp_path / "old@2.npz")
    train, test = old.split([0.8, 0.2], seed=1)
    assert len(train) + len(test) == len(old)
    assert not set(train.names.tolist()) & set(test.names.tolist())
    assert 40 < len(train) < 80
    write_shards(tmp_path, shards=1, per_shard=30, stem="new", rng=rng)
    grown = mmnpz.concat([old, mmnpz.Dataset(tmp_path / "new@1.npz")])
    train2, test2 = grown.split([0.8, 0.2], seed=1)
    assert set(train.names.tolist()) <= set(train2.names.tolist())
    assert set(test.names.tolist()) <= set(test2.names.tolist())
    other, _ = old.split([0.8, 0.2], seed=2)
    assert other.names.tolist() != train.names.tolist()
    (some,) = old.split([0.25])
    assert 5 < len(some) < 40
    with pytest.raises(ValueError, match=r"^split: fractions must be positive and sum to at "
                                         r"most 1, not \[0\.8, 0\.3\]$"):
        old.split([0.8, 0.3])


def test_a_split_refuses_nan_fractions_and_seeds_beyond_128_bits(tmp_path):
    write_shards(tmp_path, shards=1, per_shard=10)
    ds = mmnpz.Dataset(tmp_path / "train@1.npz")
    with pytest.raises(ValueError, match=r"^split: fractions must be positive and sum to at "
                                         r"most 1, not \[nan, 0\.5\]$"):
        ds.split([float("nan"), 0.5])
    with pytest.raises(ValueError, match=r"^split: seed 170141183460469231731687303715884105728 "
                                         r"does not fit in 128 bits \(a signed integer\)$"):
        ds.split([0.5, 0.5], seed=2**127)
    assert sum(len(part) for part in ds.split([0.5, 0.5], seed=-2**127)) == 10
    # A single fraction was "'float' object is not iterable".
    with pytest.raises(TypeError, match=r"^split: fractions must be a sequence of numbers "
                                        r"\(such as \[0\.8, 0\.1\]\), not float$"):
        ds.split(0.8)


def test_a_split_puts_each_item_where_the_keyed_blake2b_of_its_name_says(tmp_path):
    """The part of an item is fixed by hashlib.blake2b(name, digest_size=8, key=seed as 16
    little-endian bytes) as a fraction of 2**64: splits made by earlier versions (which called
    hashlib) stay as they were. The C++ hash is checked against hashlib on names of every
    length around BLAKE2b's 128-byte blocks, of any characters."""
    import hashlib
    import random

    from mmnpz.data import _name_hash

    def expected(names, seed):
        key = seed.to_bytes(16, "little", signed=True)
        return np.array([int.from_bytes(hashlib.blake2b(n.encode("utf-8"), digest_size=8,
                                                        key=key).digest(), "little") / 2.0**64
                         for n in names])

    rng = random.Random(3)
    alphabet = "abcXYZ_.-/0123456789\u00e9\u00df\u03a9\u4e2d\U0001f600\x00"
    names = ["", "a", "a\x00b"] + ["x" * k for k in (127, 128, 129, 255, 256, 257, 1000)]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(300))).rstrip("\x00")
              for _ in range(2000)]
    for seed in (0, 1, -1, 2**100, -2**127):
        assert np.array_equal(_name_hash(np.array(names), seed), expected(names, seed)), seed
    with pytest.raises(ValueError, match="surrogate"):
        _name_hash(np.array(["a\ud800"]), 0)
    rng2 = np.random.default_rng(5)
    write_shards(tmp_path, shards=2, per_shard=40, stem="s", rng=rng2)
    ds = mmnpz.Dataset(tmp_path / "s@2.npz")
    train, test = ds.split([0.7, 0.3], seed=9)
    position = expected(ds.names.tolist(), 9)
    assert sorted(train.names.tolist()) == sorted(ds.names[position < 0.7].tolist())
    assert sorted(test.names.tolist()) == sorted(ds.names[position >= 0.7].tolist())


def test_concat_joins_views_and_datasets_in_order(tmp_path, shards):
    spec, arrays = shards
    ds = mmnpz.Dataset(spec)
    items, names = list(arrays.values()), list(arrays)
    joined = mmnpz.concat([ds[5:8], ds[[0]]])
    assert joined._d is ds._d
    assert joined.names.tolist() == names[5:8] + names[:1]
    extra = write_lengths(tmp_path / "extra.npz", [4, 6], bins=5)
    other = mmnpz.Dataset(tmp_path / "extra.npz")
    inter = mmnpz.Dataset(spec, order="interleave")
    both = mmnpz.concat([inter[[1, 0, 4]], other[::-1], ds[[2]]])
    want = [inter[1], inter[0], inter[4], extra[1], extra[0], items[2]]
    assert both.names.tolist() == [inter.name(1), inter.name(0), inter.name(4), "item1",
                                   "item0", names[2]]
    assert both.lengths.tolist() == [len(a) for a in want]
    for i, a in enumerate(want):
        assert np.array_equal(both[i], a)
    again = pickle.loads(pickle.dumps(both))
    assert again.names.tolist() == both.names.tolist()


def test_concat_keeps_the_io_its_datasets_were_opened_with_and_refuses_a_mix(tmp_path):
    write_lengths(tmp_path / "a.npz", [3, 4])
    write_lengths(tmp_path / "b.npz", [5])
    for io in ("read", "map"):
        joined = mmnpz.concat([mmnpz.Dataset(tmp_path / "a.npz", io=io),
                               mmnpz.Dataset(tmp_path / "b.npz", io=io)])
        assert joined._options.io == io
        assert pickle.loads(pickle.dumps(joined))._options.io == io
    with pytest.raises(ValueError, match=r"^concat: the datasets copy by different io "
                                         r"\(\['auto', 'read'\]\); open them with the same io"):
        mmnpz.concat([mmnpz.Dataset(tmp_path / "a.npz"),
                      mmnpz.Dataset(tmp_path / "b.npz", io="read")])


def test_a_name_no_member_can_have_is_no_item_and_a_name_must_be_a_str(tmp_path):
    """A lone surrogate (os.fsdecode's spelling of undecodable bytes) cannot be UTF-8."""
    write_lengths(tmp_path / "a.npz", [3, 4])
    ds = mmnpz.Dataset(tmp_path / "a.npz")
    for d in (ds, ds[[1, 0]]):
        with pytest.raises(KeyError, match=r"no item named '\\+udc81'"):
            d.index("\udc81")
        with pytest.raises(KeyError, match=r"no item named '\\+udc81'"):
            d["\udc81"]
        with pytest.raises(TypeError, match="^index: a name must be a str, not bytes$"):
            d.index(b"item0")
    assert ds.index("item1") == 1 and ds[[1, 0]].index("item1") == 0


def test_a_folder_is_every_npz_inside_it_and_sidecar_members_are_no_items(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    b = write_lengths(folder / "b.npz", [3, 4])
    a = write_lengths(folder / "a.npz", [5])
    (folder / "notes.txt").write_text("not an archive")
    with zipfile.ZipFile(folder / "b.npz", "a") as z:
        z.writestr("item0.json", b'{"rate": 16000}')
    ds = mmnpz.Dataset(folder)
    assert ds.paths == (str(folder / "a.npz"), str(folder / "b.npz"))
    assert ds.names.tolist() == ["item0", "item0", "item1"]
    assert [len(x) for x in (ds[0], ds[1], ds[2])] == [5, 3, 4]
    assert np.array_equal(ds[2], b[1]) and np.array_equal(ds[0], a[0])
    with pytest.raises(mmnpz.FormatError, match="not a .npy array"):
        mmnpz.Dataset(folder, select="item0*")  # a select chooses the sidecar too
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        mmnpz.Dataset(tmp_path / "empty")


def test_the_torch_batches_take_a_view_as_their_source(shards):
    mmnpz_torch = pytest.importorskip("mmnpz.torch")
    spec, arrays = shards
    items = list(arrays.values())
    ds = mmnpz.Dataset(spec)
    picked = np.flatnonzero(ds.lengths >= 6)
    view = ds[picked]
    seen = []
    for batch in mmnpz_torch.loader(view, length=6, batch_size=2, pad="none"):
        for row, i, s in zip(batch["data"].numpy(), batch["indices"].tolist(),
                             batch["starts"].tolist()):
            assert np.array_equal(row, items[picked[i]][s:s + 6])
            seen.append(i)
    assert len(seen) == len(view) - len(view) % 2 and len(set(seen)) == len(seen)
