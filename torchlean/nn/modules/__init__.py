"""``torchlean.nn`` modules (PyTorch names, parameter names, shapes and default initialization)."""

from .activation import GELU, Dropout, ReLU, Sigmoid, Softmax, Tanh
from .attention import MultiheadAttention
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .container import ModuleDict, ModuleList, Sequential
from .linear import Identity, Linear
from .fno import FNO1d, SpectralConv1d
from .mamba import Mamba
from .module import IncompatibleKeys, Module
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm
from .pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d
from .sparse import Embedding

__all__ = ["Module", "IncompatibleKeys", "Sequential", "ModuleList", "ModuleDict", "Identity", "Linear", "ReLU",
           "GELU", "Tanh", "Sigmoid", "Softmax", "Dropout", "MultiheadAttention", "Conv1d", "Conv2d", "Conv3d",
           "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
           "AvgPool2d", "AvgPool3d", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Embedding", "Mamba",
           "SpectralConv1d", "FNO1d"]
