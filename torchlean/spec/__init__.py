"""Float64 reference ("spec") of every primitive: clear NumPy, never fast.

Each function takes float64 arrays (flat, as the buffers are) and the same dims as the runtime
primitive of the same name, and returns float64 arrays. Scalars arrive already rounded to
float32, as the runtime rounds them at its boundary. See ``primitives`` and ``rng``.
"""

from .primitives import *  # noqa: F401,F403
from .primitives import __all__ as _prim_all
from .rng import *  # noqa: F401,F403
from .rng import __all__ as _rng_all

__all__ = list(_prim_all) + list(_rng_all)
