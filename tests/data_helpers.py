"""Datasets for the DataLoader worker tests (tests/test_data.py). A module of its own, importing
neither torch nor pytest, so that each worker process imports it quickly."""

import os
import random
import time

import numpy as np

import torchlean
from torchlean.utils.data import Dataset, IterableDataset, get_worker_info


class Records(Dataset):
    """dict samples with an array, an int and a string."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": np.arange(3, dtype=np.float32) + i, "y": i, "name": f"s{i}"}


class FailsAt(Dataset):
    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return np.float32(i)


class Slow(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(2.0)
        return i


class Dies(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        os._exit(3)


class WhoAmI(Dataset):
    """Each sample says which worker made it, with its seed, draws from Python's and NumPy's global
    generators and the state of torchlean's (a torchlean draw would start a compute backend)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return {"worker": info.id, "num_workers": info.num_workers, "seed": info.seed,
                "draw": (random.random(), float(np.random.random()), torchlean.get_rng_state()),
                "init": os.environ.get("DATA_TEST_INIT", "")}


def mark_init(worker_id):
    os.environ["DATA_TEST_INIT"] = f"init{worker_id}"


class Shards(IterableDataset):
    """range(n), split between the workers by get_worker_info()."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))
