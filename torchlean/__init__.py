"""torchlean: a float32 eager autograd runtime whose CPU and CUDA backends are checked against a
float64 spec, with deterministic reductions, counter-based random numbers and allocator telemetry.

Layers (each calls only the one below): tensor/autograd -> ops -> runtime (Buffer + primitives)
-> backends (cpu, cuda); ``spec`` is the float64 reference and ``contract`` the error bounds.
"""

from . import errors
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .errors import (ArgumentError, AutogradError, AxisError, BufferReleasedError, ContractError, DeviceError,
                     DTypeError, IndexOutOfRangeError, OutOfMemoryError, ShapeError, TorchLeanError)
from .runtime import (Buffer, allocator_stats, collect_allocator, deterministic, deterministic_reductions,
                      format_allocator_stats, set_deterministic_reductions)
from .runtime.rng import Generator, default_generator, get_rng_state, manual_seed, set_rng_state
from .tensor import (Tensor, arange, as_tensor, bernoulli, bool_, float32, full, int64, ones, ones_like, rand,
                     randn, tensor, zeros, zeros_like)
from . import _methods  # noqa: F401  (binds operators and methods onto Tensor)
from . import _dlpack, interop  # noqa: E402
from ._dlpack import from_dlpack  # noqa: E402
from .checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

Tensor.__dlpack__ = _dlpack.tensor_dlpack
Tensor.__dlpack_device__ = _dlpack.tensor_dlpack_device
from . import nn, ops, optim
from . import utils  # noqa: E402  (torch.utils.data)
from .ops import (abs, bmm, cat, clamp, exp, flatten, index_select, log, maximum, mean, minimum, permute,
                  reshape, sigmoid, softmax, log_softmax, sqrt, squeeze, sum, tanh, transpose, unsqueeze)
from . import fast_kernels  # noqa: E402
from .fast_kernels import (Options, fast_matmul, get_options, gpu_matmul_fp64, matmul, options,  # noqa: E402
                           set_options)

__version__ = "0.1.0"
float = float32  # noqa: A001  (torch.float is float32 too)
long = int64
bool = bool_  # noqa: A001


def is_cuda_available():
    from .runtime.device import cuda_unavailable_reason

    return cuda_unavailable_reason() is None
