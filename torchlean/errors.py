"""One exception family for everything torchlean raises on purpose.

Each class also derives from the closest built-in exception, so code written for
PyTorch or NumPy that catches ``ValueError``/``IndexError``/``MemoryError`` keeps working.
A message always names the operation, what it expected and what it got.
"""


class TorchLeanError(Exception):
    """Root of every error torchlean raises deliberately."""


class ShapeError(TorchLeanError, ValueError):
    """Dims, sizes or shapes that do not fit the operation."""


class AxisError(ShapeError, IndexError):
    """An axis (dim) argument outside the tensor's rank."""


class ArgumentError(TorchLeanError, ValueError):
    """A non-shape argument with a bad value (an index outside uint32, a key outside uint64...)."""


class IndexOutOfRangeError(ArgumentError, IndexError):
    """An index outside a tensor's extent in front-end indexing (``x[10]`` on a length-3 tensor)."""


class DTypeError(TorchLeanError, TypeError):
    """An input of the wrong element type (e.g. an integer tensor where a float one is needed)."""


class DeviceError(TorchLeanError, RuntimeError):
    """An unknown or unavailable device, or inputs on different devices."""


class BufferReleasedError(TorchLeanError, RuntimeError):
    """A buffer was used after ``release()``."""


class ContractError(TorchLeanError, AssertionError):
    """A primitive's result fell outside its stated float32 error bound."""


class OutOfMemoryError(TorchLeanError, MemoryError):
    """An allocation failed even after the allocator's cache was flushed."""


class AutogradError(TorchLeanError, RuntimeError):
    """Misuse of the tape: backward twice through a retired graph, a non-scalar root, ..."""


class WorkerError(TorchLeanError, RuntimeError):
    """A DataLoader worker process died, or no batch came within the loader's timeout."""


class NotPicklableError(TorchLeanError, TypeError):
    """``pickle`` of an object whose unpickling would have to run code (a tensor: use torchlean.save)."""


class NotSupportedError(TorchLeanError, NotImplementedError):
    """A PyTorch function or option torchlean does not provide (yet); the message names the call."""


class NotSupportedAttributeError(NotSupportedError, AttributeError):
    """A PyTorch name torchlean does not provide (``torch.complex64``, ``torch.optim.SparseAdam``): the
    message says so, and ``hasattr`` is False as for any absent name."""


def missing_name(module: str, name: str, missing: dict[str, str]) -> AttributeError:
    """The error for ``module.name``: a NotSupportedAttributeError with the reason when ``name`` is a
    PyTorch name we know we lack (``missing``: name -> reason), else a plain AttributeError."""
    if name in missing:
        return NotSupportedAttributeError(f"{module}.{name} is not supported by torchlean: {missing[name]}")
    return AttributeError(f"module {module!r} has no attribute {name!r}")
