"""``torchlean.nn`` modules (PyTorch names, parameter names, shapes and default initialization)."""

from .activation import __all__ as _activation_all
from .activation import *  # noqa: F401,F403
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .distance import CosineSimilarity, PairwiseDistance
from .flatten import Flatten, Unflatten
from .fno import FNO1d, SpectralConv1d, SpectralConv1dChannelsLast, SpectralConv2d, SpectralConv3d
from .fno_nd import FNO2d, FNO3d
from .fold import Fold, Unfold
from .linear import Identity, Linear
from .loss import __all__ as _loss_all
from .loss import *  # noqa: F401,F403
from .mamba import Mamba
from .more import Bilinear, ChannelShuffle, CTCLoss, EmbeddingBag, LocalResponseNorm
from .module import IncompatibleKeys, Module, RemovableHandle
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d, InstanceNorm2d,
                            InstanceNorm3d, LayerNorm, RMSNorm)
from .padding import __all__ as _padding_all
from .padding import *  # noqa: F401,F403
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import __all__ as _pooling_all
from .pooling import *  # noqa: F401,F403
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding
from .upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)

__all__ = ["Module", "IncompatibleKeys", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "Identity", "Linear", "Flatten", "Unflatten", "MultiheadAttention", "Conv1d", "Conv2d",
           "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LayerNorm", "BatchNorm1d",
           "BatchNorm2d", "BatchNorm3d", "GroupNorm", "RMSNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "Embedding", "Mamba", "SpectralConv1d", "SpectralConv1dChannelsLast", "SpectralConv2d", "SpectralConv3d", "FNO1d", "FNO2d", "FNO3d", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
           "PixelShuffle", "PixelUnshuffle", "Fold", "Unfold", "CosineSimilarity", "PairwiseDistance",
           "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer",
           "Bilinear", "LocalResponseNorm", "ChannelShuffle", "EmbeddingBag", "CTCLoss",
           *_activation_all, *_loss_all, *_padding_all, *_pooling_all]

# PyTorch's module paths for classes kept in other files (torch.nn.modules.rnn ...): see _reexport.py
from . import batchnorm, dropout, instancenorm, rnn, utils  # noqa: E402,F401
