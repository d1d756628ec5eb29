"""``torch.utils.data`` for torchlean: datasets, samplers, ``default_collate`` and ``DataLoader``
(with worker processes). ``import torchlean as torch`` makes ``from torch.utils.data import
DataLoader, Dataset`` work unchanged."""

from . import distributed
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .distributed import DistributedSampler
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .worker import WorkerInfo, get_worker_info

__all__ = ["DataLoader", "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset",
           "random_split", "default_collate", "default_convert", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DistributedSampler", "WorkerInfo",
           "get_worker_info", "distributed"]
