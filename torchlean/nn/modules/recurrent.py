"""``RNN``, ``LSTM``, ``GRU`` and their cells, with PyTorch's arguments, parameter names, shapes,
outputs and initialization (every weight and bias ~ U(-1/sqrt(hidden), 1/sqrt(hidden)) from
torchlean's RNG), so a PyTorch state_dict loads and gives the same outputs. The computation is
``torchlean.ops.rnn`` (fused cell primitives, one tape node per layer and direction).
``torch.nn.modules.rnn`` re-exports these classes (see rnn.py).

Not supported (ArgumentError): ``proj_size`` > 0 and PackedSequence inputs.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from ...errors import ArgumentError, DTypeError, ShapeError
from ...ops import rnn as rnn_ops
from ...ops.shape import permute, squeeze, unsqueeze
from ...tensor import Tensor, zeros
from .. import init
from ..parameter import Parameter
from .linear import device_dtype
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_NONLINEARITY = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}


def _positive_int(op: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise DTypeError(f"{op}: {name} should be of type int, got: {type(v).__name__}")
    if v <= 0:
        raise ArgumentError(f"{op}: {name} must be greater than zero, got {v}")
    return int(v)


def _refuse_packed(op: str, x: Any) -> None:
    if type(x).__name__ == "PackedSequence":
        raise ArgumentError(f"{op}: PackedSequence input is not supported by torchlean; pass a padded tensor "
                            "(T, B, *) or (B, T, *) with batch_first=True")


def _tensor(op: str, name: str, x: Any) -> Tensor:
    _refuse_packed(op, x)
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: expected a Tensor for {name}, got {type(x).__module__}.{type(x).__name__}")
    return x


class RNNBase(Module):
    """The stacked recurrent layers shared by RNN, LSTM and GRU (PyTorch's RNNBase)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        op = f"nn.{self._name(mode)}"
        device = device_dtype(op, device, dtype)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout <= 1:
            raise ArgumentError(f"{op}: dropout should be a number in range [0, 1] representing the probability of "
                                f"an element being zeroed, got {dropout!r}")
        if proj_size != 0:
            raise ArgumentError(f"{op}: proj_size={proj_size} is not supported by torchlean (only proj_size=0)")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}")
        self.mode = mode
        self.input_size = _positive_int(op, "input_size", input_size)
        self.hidden_size = _positive_int(op, "hidden_size", hidden_size)
        self.num_layers = _positive_int(op, "num_layers", num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = 0
        gates = rnn_ops.GATES[mode] * self.hidden_size
        D = 2 if self.bidirectional else 1
        self._flat_weights_names: list[str] = []
        for layer in range(self.num_layers):
            for d in range(D):
                n_in = self.input_size if layer == 0 else self.hidden_size * D
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                shapes = [("weight_ih", (gates, n_in)), ("weight_hh", (gates, self.hidden_size))]
                if self.bias:
                    shapes += [("bias_ih", (gates,)), ("bias_hh", (gates,))]
                for name, shape in shapes:
                    setattr(self, name + sfx, Parameter(zeros(*shape, device=device)))
                    self._flat_weights_names.append(name + sfx)
        self.reset_parameters()

    @staticmethod
    def _name(mode: str) -> str:
        return "RNN" if mode.startswith("RNN") else mode

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """PyTorch packs cuDNN weights here; torchlean's layout needs nothing."""

    @property
    def all_weights(self) -> list[list[Parameter]]:
        per = 4 if self.bias else 2
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i:i + per] for i in range(0, len(ws), per)]

    def _weights(self) -> list[tuple[Any, Any, Any, Any]]:
        return [tuple(w) + (None, None) if len(w) == 2 else tuple(w) for w in self.all_weights]  # type: ignore

    def _check_hidden(self, op: str, name: str, h: Any, expected: tuple[int, ...], batched: bool) -> Tensor:
        h = _tensor(op, name, h)
        if not batched and h.ndim != 2:
            raise ShapeError(f"{op}: for unbatched 2-D input, {name} should also be 2-D but got {h.ndim}-D tensor")
        if batched and h.ndim != 3:
            raise ShapeError(f"{op}: for batched 3-D input, {name} should also be 3-D but got {h.ndim}-D tensor")
        if tuple(h.shape) != expected:
            raise ShapeError(f"{op}: expected {name} of size {expected}, got {tuple(h.shape)}")
        return h

    def forward(self, input: Any, hx: Any = None) -> Any:
        name = self._name(self.mode)
        op = f"nn.{name}"
        x = _tensor(op, "input", input)
        if x.ndim not in (2, 3):
            raise ShapeError(f"{op}: expected input to be 2-D (unbatched) or 3-D, got {x.ndim}-D tensor of shape "
                             f"{tuple(x.shape)}")
        batched = x.ndim == 3
        if not batched:
            x = unsqueeze(x, 1)
        elif self.batch_first:
            x = permute(x, (1, 0, 2))
        T, B, n_in = x.shape
        if n_in != self.input_size:
            raise ShapeError(f"{op}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {n_in}")
        if T == 0:
            raise ShapeError(f"{op}: expected sequence length to be larger than 0, got input of shape "
                             f"{tuple(input.shape)}")
        D = 2 if self.bidirectional else 1
        state = (self.num_layers * D, B, self.hidden_size) if batched else (self.num_layers * D, self.hidden_size)
        lstm = self.mode == "LSTM"
        if hx is None:
            h0 = zeros(*state, device=x.device)
            c0 = zeros(*state, device=x.device) if lstm else None
        elif lstm:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ArgumentError(f"{op}: hx must be a tuple (h_0, c_0) of tensors, got {type(hx).__name__}")
            h0 = self._check_hidden(op, "h_0", hx[0], state, batched)
            c0 = self._check_hidden(op, "c_0", hx[1], state, batched)
        else:
            if isinstance(hx, (tuple, list)):
                raise ArgumentError(f"{op}: hx must be a Tensor, got {type(hx).__name__}")
            h0, c0 = self._check_hidden(op, "hx", hx, state, batched), None
        if not batched:
            h0 = unsqueeze(h0, 1)
            c0 = unsqueeze(c0, 1) if c0 is not None else None
        out, h_n, c_n = rnn_ops.rnn(self.mode, x, h0, c0, self._weights(), self.num_layers, self.bidirectional,
                                    self.dropout, self.training)
        if not batched:
            out, h_n = squeeze(out, 1), squeeze(h_n, 1)
            c_n = squeeze(c_n, 1) if c_n is not None else None
        elif self.batch_first:
            out = permute(out, (1, 0, 2))
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ArgumentError("nn.RNN: proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity not in _NONLINEARITY:
            raise ArgumentError(f"nn.RNN: unknown nonlinearity '{nonlinearity}'; select from 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(_NONLINEARITY[nonlinearity], *args, **kwargs)


class LSTM(RNNBase):
    """LSTM with PyTorch's gate order (i, f, g, o); returns (output, (h_n, c_n))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """GRU with PyTorch's gate order (r, z, n) and n = tanh(W_in x + b_in + r (W_hn h + b_hn))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ArgumentError("nn.GRU: proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """One step of a recurrent layer (PyTorch's RNNCellBase): weight_ih, weight_hh, bias_ih, bias_hh."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        op = f"nn.{self._cell_name(mode)}"
        device = device_dtype(op, device, dtype)
        self.mode = mode
        self.input_size = _positive_int(op, "input_size", input_size)
        self.hidden_size = _positive_int(op, "hidden_size", hidden_size)
        self.bias = bool(bias)
        gates = rnn_ops.GATES[mode] * self.hidden_size
        self.weight_ih = Parameter(zeros(gates, self.input_size, device=device))
        self.weight_hh = Parameter(zeros(gates, self.hidden_size, device=device))
        if self.bias:
            self.bias_ih = Parameter(zeros(gates, device=device))
            self.bias_hh = Parameter(zeros(gates, device=device))
        else:
            self.bias_ih = None
            self.bias_hh = None
        self.reset_parameters()

    @staticmethod
    def _cell_name(mode: str) -> str:
        return {"LSTM": "LSTMCell", "GRU": "GRUCell"}.get(mode, "RNNCell")

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _state(self, op: str, name: str, h: Any, batched: bool, B: int) -> Tensor:
        h = _tensor(op, name, h)
        expected = (B, self.hidden_size) if batched else (self.hidden_size,)
        if tuple(h.shape) != expected:
            what = f"a batch of {B}" if batched else "an unbatched input"
            raise ShapeError(f"{op}: expected {name} of shape {expected} for {what}, got {tuple(h.shape)}")
        return h if batched else unsqueeze(h, 0)

    def forward(self, input: Any, hx: Any = None) -> Any:
        op = f"nn.{self._cell_name(self.mode)}"
        x = _tensor(op, "input", input)
        if x.ndim not in (1, 2):
            raise ShapeError(f"{op}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        batched = x.ndim == 2
        if not batched:
            x = unsqueeze(x, 0)
        B, n_in = x.shape
        if n_in != self.input_size:
            raise ShapeError(f"{op}: input has inconsistent input_size: got {n_in} expected {self.input_size}")
        lstm = self.mode == "LSTM"
        if hx is None:
            h0 = zeros(B, self.hidden_size, device=x.device)
            c0 = zeros(B, self.hidden_size, device=x.device) if lstm else None
        elif lstm:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ArgumentError(f"{op}: hx must be a tuple (h_0, c_0) of tensors, got {type(hx).__name__}")
            h0, c0 = self._state(op, "h_0", hx[0], batched, B), self._state(op, "c_0", hx[1], batched, B)
        else:
            h0, c0 = self._state(op, "hx", hx, batched, B), None
        _, h, c = rnn_ops.rnn_layer(self.mode, unsqueeze(x, 0), h0, c0, self.weight_ih, self.weight_hh,
                                    self.bias_ih, self.bias_hh)
        if not batched:
            h = squeeze(h, 0)
            c = squeeze(c, 0) if c is not None else None
        return (h, c) if lstm else h

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in _NONLINEARITY:
            raise ArgumentError(f"nn.RNNCell: unknown nonlinearity '{nonlinearity}'; select from 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(_NONLINEARITY[nonlinearity], input_size, hidden_size, bias, device, dtype)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)
