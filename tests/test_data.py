"""torchlean.utils.data against torch.utils.data: the same programs under both, compared.

Shuffled orders come from each framework's own generator, so they are compared for coverage and
for determinism under a seed, not element by element.
"""

from __future__ import annotations

import collections
import gc
import multiprocessing
import pickle

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.utils.data as tud
from data_helpers import Dies, FailsAt, Records, Shards, Slow, WhoAmI, mark_init
from torchlean.errors import ArgumentError, TorchLeanError, WorkerError

Point = collections.namedtuple("Point", ["a", "b"])


def same(ours, theirs):
    """Recursive comparison of a torchlean batch with a PyTorch one (structure, values, dtypes)."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tl.Tensor), type(ours)
        assert tuple(ours.shape) == tuple(theirs.shape)
        want = theirs.numpy()
        if want.dtype == np.float64:  # Python floats: float64 in PyTorch, float32 here (documented)
            want = want.astype(np.float32)
        got = ours.numpy()
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
        return
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for k in theirs:
            same(ours[k], theirs[k])
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            same(o, t)
    else:
        assert ours == theirs


def both(fn):
    """fn(framework) under torchlean and torch."""
    return fn(tl), fn(torch)


# -- namespaces ------------------------------------------------------------------------------------
def test_import_paths_as_pytorch_programs_write_them():
    import torchlean.utils.data.distributed as dist_mod
    from torchlean.utils.data import DataLoader, Dataset  # noqa: F401

    assert tl.utils.data is tud
    assert tl.utils.data.distributed.DistributedSampler is dist_mod.DistributedSampler is tud.DistributedSampler
    for name in torch.utils.data.__all__:
        if name in ("Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset",
                    "random_split", "default_collate", "default_convert", "DataLoader", "Sampler",
                    "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
                    "BatchSampler", "DistributedSampler", "get_worker_info"):
            assert hasattr(tud, name), name


# -- batches in order ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (10, False), (16, True)])
def test_batches_without_shuffle_match_torch(batch_size, drop_last):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10)

    def run(fw):
        ds = fw.utils.data.TensorDataset(fw.tensor(x), fw.tensor(y))
        dl = fw.utils.data.DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
        return len(dl), list(dl)

    (n_ours, ours), (n_torch, theirs) = both(run)
    assert n_ours == n_torch == len(theirs) == len(ours)
    same(ours, theirs)


def test_collate_structures_match_torch():
    def sample(fw, i):
        return {"t": fw.tensor([float(i), 2.0 * i]), "arr": np.full((2, 2), i, dtype=np.int64),
                "i": i, "f": i / 4, "s": f"name{i}", "p": Point(i, np.float32(i)), "tup": (i, f"t{i}"),
                "lst": [np.int64(i), [i, i + 1]], "flag": i % 2 == 0, "np_scalar": np.float32(i) * 0.5}

    ours, theirs = both(lambda fw: fw.utils.data.default_collate([sample(fw, i) for i in range(3)]))
    same(ours, theirs)
    assert ours["i"].dtype == tl.int64 and ours["flag"].dtype == tl.bool


def test_default_convert_matches_torch():
    def data(fw):
        return {"a": np.arange(4), "s": "x", "p": Point(np.float32(1.5), 2), "t": (np.ones(2, np.float32), 3)}

    ours, theirs = both(lambda fw: fw.utils.data.default_convert(data(fw)))
    same(ours, theirs)


def test_collate_errors_match_torch():
    for bad in ([object(), object()], [np.array(["a", "b"]), np.array(["c", "d"])]):
        with pytest.raises(TypeError):
            torch.utils.data.default_collate(bad)
        with pytest.raises(TypeError) as err:
            tud.default_collate(bad)
        assert isinstance(err.value, TorchLeanError) and "default_collate" in str(err.value)
    for bad in ([[1, 2], [3]], [np.zeros(2), np.zeros(3)]):
        with pytest.raises(RuntimeError):
            torch.utils.data.default_collate(bad)
        with pytest.raises(TorchLeanError, match="default_collate"):
            tud.default_collate(bad)


def test_batch_size_none_converts_single_samples_like_torch():
    ours, theirs = both(lambda fw: list(fw.utils.data.DataLoader(Records(3), batch_size=None)))
    same(ours, theirs)


def test_iterable_dataset_batches_and_len_match_torch():
    class Stream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(7))

        def __len__(self):
            return 7

    class TorchStream(torch.utils.data.IterableDataset):
        __iter__, __len__ = Stream.__iter__, Stream.__len__

    for kw in ({"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        ours = tud.DataLoader(Stream(), **kw)
        theirs = torch.utils.data.DataLoader(TorchStream(), **kw)
        assert len(ours) == len(theirs)
        same(list(ours), list(theirs))


def test_concat_subset_and_add_match_torch():
    def run(fw):
        a = fw.utils.data.TensorDataset(fw.tensor(np.arange(4)))
        b = fw.utils.data.TensorDataset(fw.tensor(np.arange(10, 13)))
        cat = a + b
        sub = fw.utils.data.Subset(cat, [6, 0, 4, -1])
        return len(cat), [cat[i] for i in (-7, 0, 3, 4, 6)], [sub[i] for i in range(4)], list(
            fw.utils.data.DataLoader(sub, batch_size=2))

    ours, theirs = both(run)
    assert ours[0] == theirs[0]
    same(list(ours[1:]), list(theirs[1:]))
    with pytest.raises(IndexError):
        tud.ConcatDataset([tud.TensorDataset(tl.zeros(2))])[2]


def test_tensor_dataset_size_mismatch():
    with pytest.raises(TorchLeanError, match="size mismatch"):
        tud.TensorDataset(tl.zeros(3), tl.zeros(4))


# -- samplers -----------------------------------------------------------------------------------------
def test_sequential_and_batch_sampler_match_torch():
    for drop_last in (False, True):
        ours = tud.BatchSampler(tud.SequentialSampler(range(10)), 4, drop_last)
        theirs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(10)), 4, drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_random_samplers_cover_and_have_torchs_lengths():
    g = tl.Generator().manual_seed(3)
    s = tud.RandomSampler(range(10), generator=g)
    assert sorted(s) == list(range(10)) and len(s) == len(torch.utils.data.RandomSampler(range(10)))
    s = tud.RandomSampler(range(10), num_samples=25, generator=g)
    drawn = list(s)
    assert len(drawn) == len(s) == 25 and sorted(drawn) == sorted(list(range(10)) * 2 + drawn[20:])
    s = tud.RandomSampler(range(5), replacement=True, num_samples=70, generator=g)
    drawn = list(s)
    assert len(drawn) == 70 and set(drawn) == set(range(5))
    s = tud.SubsetRandomSampler([3, 9, 4, 1], generator=g)
    assert sorted(s) == [1, 3, 4, 9] and len(s) == 4


def test_weighted_random_sampler():
    g = tl.Generator().manual_seed(0)
    s = tud.WeightedRandomSampler([0.0, 1.0, 3.0, 0.0], 4000, generator=g)
    drawn = np.array(list(s))
    assert len(s) == len(drawn) == 4000 and set(drawn.tolist()) == {1, 2}
    assert abs((drawn == 2).mean() - 0.75) < 0.03
    s = tud.WeightedRandomSampler([1.0, 5.0, 2.0, 0.5], 4, replacement=False, generator=g)
    assert sorted(s) == [0, 1, 2, 3]
    for m in (tud, torch.utils.data):  # weight zero comes last, once the others are used up
        assert list(m.WeightedRandomSampler([0.0, 1.0], 2, replacement=False)) == [1, 0]
    with pytest.raises(ArgumentError, match="without replacement"):
        list(tud.WeightedRandomSampler([1.0, 0.0], 3, replacement=False))
    with pytest.raises(RuntimeError):
        list(torch.utils.data.WeightedRandomSampler([1.0, 0.0], 3, replacement=False))


def test_sampler_argument_errors_match_torch():
    for make in (lambda m: m.RandomSampler(range(3), num_samples=0),
                 lambda m: m.BatchSampler(range(3), 0, False),
                 lambda m: m.BatchSampler(range(3), 2, drop_last=1),
                 lambda m: m.WeightedRandomSampler([1.0], num_samples=-1)):
        with pytest.raises(ValueError):
            make(torch.utils.data)
        with pytest.raises(ValueError) as err:
            make(tud)
        assert isinstance(err.value, TorchLeanError)
    with pytest.raises(TypeError):
        tud.RandomSampler(range(3), replacement=1)


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (12, 4, False), (2, 3, False)])
def test_distributed_sampler(n, replicas, drop_last):
    shares = []
    for rank in range(replicas):
        ours = tud.DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        theirs = torch.utils.data.distributed.DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                                                 shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
        shuffled = tud.DistributedSampler(range(n), num_replicas=replicas, rank=rank, seed=5, drop_last=drop_last)
        assert len(list(shuffled)) == len(theirs)
        shares.append(list(shuffled))
    flat = sum(shares, [])
    if not drop_last:
        assert set(flat) == set(range(n))
    assert len(set(flat)) == len(flat) or n % replicas or not drop_last  # no repeats unless padded


def test_distributed_sampler_epochs_and_errors():
    s = tud.DistributedSampler(range(20), num_replicas=2, rank=1, seed=7)
    e0 = list(s)
    assert list(s) == e0 == list(tud.DistributedSampler(range(20), num_replicas=2, rank=1, seed=7))
    s.set_epoch(1)
    assert list(s) != e0 and len(list(s)) == 10
    with pytest.raises(ArgumentError, match="no process group is initialized"):
        tud.DistributedSampler(range(4))
    with pytest.raises(ValueError, match="rank"):
        tud.DistributedSampler(range(4), num_replicas=2, rank=2)


# -- random_split ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,lengths", [(10, [3, 7]), (10, [0.3, 0.7]), (11, [0.33, 0.33, 0.34]), (7, [0.5, 0.5]),
                                       (5, [5, 0])])
def test_random_split_sizes_match_torch(n, lengths):
    ours = tud.random_split(range(n), lengths, generator=tl.Generator().manual_seed(1))
    theirs = torch.utils.data.random_split(range(n), lengths, generator=torch.Generator().manual_seed(1))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    assert sorted(i for s in ours for i in s) == list(range(n))
    again = tud.random_split(range(n), lengths, generator=tl.Generator().manual_seed(1))
    assert [list(s) for s in again] == [list(s) for s in ours]


def test_random_split_bad_lengths_raise_like_torch():
    for lengths in ([3, 3], [0.5, 0.6]):
        with pytest.raises(ValueError):
            torch.utils.data.random_split(range(10), lengths)
        with pytest.raises(ArgumentError):
            tud.random_split(range(10), lengths)


# -- shuffling ------------------------------------------------------------------------------------------
def _order(loader):
    return [int(v) for batch in loader for v in batch[0].numpy()]


def test_shuffle_is_deterministic_under_a_seeded_generator():
    ds = tud.TensorDataset(tl.tensor(np.arange(40)))
    a = tud.DataLoader(ds, batch_size=8, shuffle=True, generator=tl.Generator().manual_seed(11))
    b = tud.DataLoader(ds, batch_size=8, shuffle=True, generator=tl.Generator().manual_seed(11))
    c = tud.DataLoader(ds, batch_size=8, shuffle=True, generator=tl.Generator().manual_seed(12))
    first = _order(a)
    assert sorted(first) == list(range(40)) and first != list(range(40))
    assert first == _order(b) and first != _order(c)
    assert _order(a) != first  # a new order each epoch
    tl.manual_seed(4)
    d1 = _order(tud.DataLoader(ds, batch_size=8, shuffle=True))
    tl.manual_seed(4)
    assert _order(tud.DataLoader(ds, batch_size=8, shuffle=True)) == d1


def test_loader_argument_errors_match_torch():
    ds_t = torch.utils.data.TensorDataset(torch.zeros(4))
    ds = tud.TensorDataset(tl.zeros(4))
    cases = [dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2), dict(persistent_workers=True),
             dict(sampler=[0, 1], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_size=None, drop_last=True), dict(multiprocessing_context="spawn"),
             dict(num_workers=1, multiprocessing_context="no-such-method")]
    for kw in cases:
        with pytest.raises(ValueError):
            torch.utils.data.DataLoader(ds_t, **kw)
        with pytest.raises(ArgumentError, match="DataLoader"):
            tud.DataLoader(ds, **kw)
    with pytest.raises(ArgumentError):
        tud.DataLoader(Shards(4), shuffle=True)
    dl = tud.DataLoader(ds)
    with pytest.raises(ValueError):
        dl.batch_size = 3


def test_batch_sampler_and_custom_collate():
    dl = tud.DataLoader(Records(6), batch_sampler=[[5, 0], [2]], collate_fn=lambda b: [s["y"] for s in b])
    assert list(dl) == [[5, 0], [2]] and len(dl) == 2


# -- worker processes ----------------------------------------------------------------------------------------
def _children():
    return [p for p in multiprocessing.active_children()]


def test_workers_give_the_same_batches_as_the_main_process():
    def epochs(workers, persistent=False):
        g = tl.Generator().manual_seed(5)
        dl = tud.DataLoader(Records(13), batch_size=3, shuffle=True, generator=g, num_workers=workers,
                            persistent_workers=persistent)
        return [list(dl), list(dl)]

    main = epochs(0)
    for got in (epochs(2), epochs(2, persistent=True)):
        for e_got, e_main in zip(got, main):
            assert len(e_got) == len(e_main) == 5
            for bg, bm in zip(e_got, e_main):
                assert bg["name"] == bm["name"]
                np.testing.assert_array_equal(bg["x"].numpy(), bm["x"].numpy())
                assert bg["y"].dtype == bm["y"].dtype == tl.int64
    assert main[0][0]["name"] != main[1][0]["name"] or main[0][1]["name"] != main[1][1]["name"]
    gc.collect()
    assert _children() == []


def test_tensor_datasets_go_to_workers_and_tensors_come_back():
    x = tl.randn(7, 2)
    y = tl.tensor(np.arange(7))
    got = list(tud.DataLoader(tud.TensorDataset(x, y), batch_size=4, num_workers=2))
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in got]), x.numpy())
    assert [b[1].dtype for b in got] == [tl.int64, tl.int64]
    with pytest.raises(TypeError):  # plain pickle still refuses tensors
        pickle.dumps(x)


def test_worker_exception_surfaces_with_its_message_and_traceback():
    dl = tud.DataLoader(FailsAt(8, bad=5), batch_size=2, num_workers=2)
    it = iter(dl)
    assert [float(v) for v in next(it).numpy()] == [0.0, 1.0]  # batches before the failing one arrive
    next(it)
    with pytest.raises(ValueError, match="sample 5 is corrupt") as err:
        list(it)
    assert "DataLoader worker process" in str(err.value) and "__getitem__" in str(err.value)
    gc.collect()
    assert _children() == []


def test_abandoned_iterators_leave_no_live_workers():
    it = iter(tud.DataLoader(Records(50), batch_size=2, num_workers=2))
    next(it)
    assert len(_children()) == 2
    del it
    gc.collect()
    assert _children() == []
    dl = tud.DataLoader(Records(50), batch_size=2, num_workers=2, persistent_workers=True)
    next(iter(dl))
    assert len(next(iter(dl))["y"]) == 2  # a new epoch after an abandoned one: no stale batches
    assert [int(v) for v in next(iter(dl))["y"].numpy()] == [0, 1]
    del dl
    gc.collect()
    assert _children() == []


def test_timeout_and_dead_workers_raise():
    with pytest.raises(WorkerError, match="timed out after 0.2 seconds"):
        next(iter(tud.DataLoader(Slow(), num_workers=1, timeout=0.2)))
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        next(iter(tud.DataLoader(Dies(), num_workers=1)))
    gc.collect()
    assert _children() == []


def test_worker_info_seeds_and_init_fn():
    assert tud.get_worker_info() is None
    dl = tud.DataLoader(WhoAmI(), batch_size=None, num_workers=2, worker_init_fn=mark_init,
                        generator=tl.Generator().manual_seed(9))
    samples = list(dl)
    assert [s["worker"] for s in samples] == [0, 1] * 4  # round robin, delivered in order
    assert {s["init"] for s in samples} == {"init0", "init1"}
    assert len({s["seed"] for s in samples}) == 2 and {s["num_workers"] for s in samples} == {2}
    again = list(tud.DataLoader(WhoAmI(), batch_size=None, num_workers=2, worker_init_fn=mark_init,
                                generator=tl.Generator().manual_seed(9)))
    assert [s["draw"] for s in again] == [s["draw"] for s in samples]  # workers seeded from the generator
    assert len({tuple(s["draw"][:2]) for s in samples}) == 8  # (tuples come back as lists, as in PyTorch)
    assert [s["draw"][2] for s in samples[:2]] == [[s["seed"], 0] for s in samples[:2]]


def test_iterable_dataset_shards_between_workers():
    dl = tud.DataLoader(Shards(11), batch_size=2, num_workers=2)
    got = [[int(v) for v in b.numpy()] for b in dl]
    assert got == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9]]


def test_unpicklable_collate_fn_is_named():
    with pytest.raises(ArgumentError, match="must pickle"):
        next(iter(tud.DataLoader(Records(4), num_workers=1, collate_fn=lambda b: b)))
