"""``torchlean.nn`` modules (PyTorch names, parameter names, shapes and default initialization)."""

from .activation import GELU, Dropout, ReLU, Sigmoid, Softmax, Tanh
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .linear import Identity, Linear
from .module import IncompatibleKeys, Module

__all__ = ["Module", "IncompatibleKeys", "Sequential", "ModuleList", "ModuleDict", "Identity", "Linear", "ReLU",
           "GELU", "Tanh", "Sigmoid", "Softmax", "Dropout", "MultiheadAttention"]
