"""PyTorch's ``torch.nn.modules.rnn``: its classes, from ``torchlean.nn`` (see _reexport.py)."""

from ._reexport import path_module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
__getattr__, __dir__ = path_module(__name__, tuple(__all__))
