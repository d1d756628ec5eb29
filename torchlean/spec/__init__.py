"""Float64 reference ("spec") of every primitive: clear NumPy, never fast.

Each function takes float64 arrays (flat, as the buffers are) and the same dims as the runtime
primitive of the same name, and returns float64 arrays. Scalars arrive already rounded to
float32, as the runtime rounds them at its boundary. One module per family: ``primitives`` (the
core), ``rng``, ``conv``, ``pool``, ``norm``, ``classify``,
``spectral``, ``scan``, ``attention``, ``optim``, ``fast``.
"""

from . import attention, classify, conv, fast, norm, optim, pool, primitives, rng, rnn, scan, spectral

# Built before the star imports: ``from .conv import *`` rebinds the name ``conv`` to the function.
__all__ = [n for m in (primitives, rng, conv, pool, norm, classify, spectral, scan, attention, optim, fast,
                                 rnn) for n in m.__all__]

from .attention import *  # noqa: E402,F401,F403
from .fast import *  # noqa: E402,F401,F403
from .classify import *  # noqa: E402,F401,F403
from .conv import *  # noqa: E402,F401,F403
from .norm import *  # noqa: E402,F401,F403
from .optim import *  # noqa: E402,F401,F403
from .pool import *  # noqa: E402,F401,F403
from .primitives import *  # noqa: E402,F401,F403
from .rng import *  # noqa: E402,F401,F403
from .rnn import *  # noqa: E402,F401,F403
from .scan import *  # noqa: E402,F401,F403
from .spectral import *  # noqa: E402,F401,F403

from . import fft  # noqa: E402  (the fft family: N-D complex and real transforms)
__all__ += fft.__all__
from .fft import *  # noqa: E402,F401,F403

from . import spectral_nd  # noqa: E402  (the 2-D/3-D spectral convolutions)
__all__ += spectral_nd.__all__
from .spectral_nd import *  # noqa: E402,F401,F403
