"""torchlean: a float32 eager autograd runtime whose CPU and CUDA backends are checked against a
float64 spec, with deterministic reductions, counter-based random numbers and allocator telemetry.

Layers (each calls only the one below; docs/architecture.md): nn/optim/utils -> the front end
(operators and methods) -> ops -> tensor/autograd -> runtime (Buffer + primitives) -> kernels (cpu,
cuda); ``spec`` is the float64 reference and ``contract`` the error bounds. This module gathers the
public names, PyTorch's where PyTorch has them.
"""

from . import errors
from .autograd import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                       set_grad_enabled)
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
# math, reductions with dim, shape/index functions, products, factories and sorting
from .ops.math import (addcdiv, addcmul, ceil, clamp_max, clamp_min, cos, erf, erfc, exp2, expm1,  # noqa: E402
                       float_power, floor, frac, hypot, isfinite, isinf, isnan, isneginf, isposinf, lerp, log1p,
                       log2, log10, nan_to_num, pow, round, rsqrt, sign, sin, square, tan, trunc)
from .ops.reduce_dim import (all, amax, amin, aminmax, any, argmax, argmin, count_nonzero, cumprod,  # noqa: E402
                             cumsum, logsumexp, max, median, min, norm, prod, return_types, std, std_mean, var,
                             var_mean)
from .ops.select import (chunk, diag, diagonal, flip, fliplr, flipud, gather, hstack, index_put,  # noqa: E402
                         masked_select, movedim, narrow, repeat_interleave, roll, scatter, scatter_add, split,
                         stack, swapaxes, take, take_along_dim, tile, tril, triu, unbind, unflatten, vstack)
from .ops.einsum import (addbmm, addmm, addmv, baddbmm, dot, einsum, inner, kron, mm, mv, outer,  # noqa: E402
                         tensordot, vdot)
from .ops.creation import (argsort, bincount, bucketize, eye, linspace, logspace, meshgrid,  # noqa: E402
                           multinomial, rand_like, randint_like, randn_like, randperm, searchsorted, sort, topk,
                           unique)
clip, fix, sgn, ger, moveaxis, swapdims = clamp, trunc, sign, outer, movedim, swapaxes
from .ops.math import acos, acosh, asin, asinh, atan, atan2, atanh  # noqa: E402
arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh = acos, acosh, asin, asinh, atan, atan2, atanh
from . import fast_kernels  # noqa: E402
from .fast_kernels import (Options, fast_matmul, get_options, gpu_matmul_fp64, matmul, options,  # noqa: E402
                           set_options)
# the namespaces a script touches first (device, cuda, backends, amp) and save/load
from .runtime.device import device  # noqa: E402
from . import accelerator, amp, backends, cuda, serialization  # noqa: E402
from .nn import parallel as _nn_parallel  # noqa: E402,F401  (makes torchlean.nn.parallel an attribute)
from .amp import autocast, is_autocast_enabled  # noqa: E402
from .serialization import load, save  # noqa: E402
from .switches import (are_deterministic_algorithms_enabled, get_float32_matmul_precision,  # noqa: E402
                       get_num_interop_threads, get_num_threads, is_deterministic_algorithms_warn_only_enabled,
                       set_float32_matmul_precision, set_num_interop_threads, set_num_threads,
                       use_deterministic_algorithms)

__version__ = "0.1.0"
from . import dtypes  # noqa: E402
from ._dtype_api import *  # noqa: E402,F401,F403  (dtype names, promotion, dtype-keeping functions)


def is_cuda_available():
    from .runtime.device import cuda_unavailable_reason

    return cuda_unavailable_reason() is None

# the long tail (where, masked_fill, Size, autograd.grad/Function, ...) and its namespaces
from ._api_more import *  # noqa: E402,F401,F403
from . import distributions, fft, linalg, special  # noqa: E402,F401
from .memory_format import (channels_last, channels_last_3d, contiguous_format, memory_format,  # noqa: E402
                            preserve_format)
# complex64 (float32 pairs): the dtype, the complex functions, and the factories and functions that take
# complex arguments too, installed over the real ones (which they call for everything else)
from .dtypes import complex64  # noqa: E402
from . import complex_tensor  # noqa: E402
from .complex_tensor import (angle, as_tensor, complex, conj, conj_physical, empty, empty_like,  # noqa: E402
                             from_numpy, full, full_like, imag, is_complex, ones, ones_like, polar, rand, rand_like,
                             randn, randn_like, real, resolve_conj, tensor, view_as_complex, view_as_real, zeros,
                             zeros_like)
cfloat = complex64
globals().update(complex_tensor.PUBLIC_ROUTES)


def __getattr__(name: str):
    # torchlean.testing (a layer above this one: the test support) loads on first use, as torch.testing
    if name == "testing":
        import importlib

        return importlib.import_module("torchlean.testing")
    raise errors.missing_name("torchlean", name, _MISSING)


# PyTorch names we know we lack: asking for one says so (torchlean computes in float32)
_MISSING = {n: "torchlean's one complex dtype is complex64 (torchlean.cfloat: float32 pairs); use it instead"
            for n in ("complex128", "cdouble", "complex32", "chalf")}


# registers torchlean tensors with einops when einops is installed (einops finds backends by subclass)
from . import _einops_backend  # noqa: E402,F401
