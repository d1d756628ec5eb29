"""Layer 2: differentiable ops, each a forward from primitives plus a VJP recorded on the tape."""

from .elementwise import (abs, add, clamp, div, exp, leaky_relu, log, maximum, minimum, mul, neg, pow, reciprocal, relu,
                          safe_log, sigmoid, softplus, sqrt, sub, tanh)
from .index import gather_rows, gather_vec, getitem, index_select, scatter_add, scatter_add_rows
from .linalg import bmm, linear, matmul
from .mha import multi_head_attention  # the seed's multi-head self-attention
from .nn import dropout, log_softmax, mse_loss, softmax
from . import attention, classify, conv, fast, norm, pool, rnn, scan, spectral  # noqa: F401
from . import fft  # noqa: F401  (ops.fft.fftn_c2c ...: torchlean/fft.py's ops; not star-exported)
from .attention import *  # noqa: F401,F403
from .classify import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .fast import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .scan import *  # noqa: F401,F403
from .spectral import *  # noqa: F401,F403
from .spectral_nd import *  # noqa: F401,F403
from .reduce import mean, sum
from .shape import (broadcast_to, cat, clone, concat1d, expand, flatten, permute, permute_bca, permute_cab,
                    reshape, slice0, slice1d, squeeze, swap_adjacent, swap_last2, t, to_device, transpose,
                    unsqueeze)

# more math, reductions with dim, shape/index functions, einsum, factories and sorting
from . import creation, einsum as einsum_ops, math as math_ops, reduce_dim, results, select  # noqa: F401
from .math import *  # noqa: F401,F403
from .select import *  # noqa: F401,F403
from .reduce_dim import *  # noqa: F401,F403
from .einsum import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403

__all__ = [n for n in dir() if not n.startswith("_")]
