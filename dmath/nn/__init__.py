"""dmath.nn: DNN primitives on distributed tensors, forward and explicit backward.

Every op is an SPMD function on DArrays: ``op_forward(...) -> (y, ctx)`` and
``op_backward(dy, ctx) -> grads``; gradients come back in their inputs'
layouts (weight gradients optionally as partial sums for ``GradReducer``).
Convolutions run data, model (output channels), spatial (H/W with halos) or
mixed parallel, chosen by a cost model (``choose_conv_layout``) or by name.
Layer objects (``Conv2d``, ``Sequential``, ...) wrap the functional core.

Every functional op is a command (``@dmath.command``) and every saved context
a handle type, so the ops, the layers built on them, ``sgd_step``,
``LossScaler`` and ``GradReducer`` (one per rank, under one handle) run the
same in client-server mode (rank 0 drives) as in SPMD mode.
"""
from .activation import (bias_add_backward, bias_add_forward, dropout_backward, dropout_forward,
                         dropout_mask, gelu_backward, gelu_forward, relu_backward, relu_forward)
from ._common import edits
from .conv import ConvCtx, conv2d, conv2d_backward, conv2d_forward
from .gradsync import GradReducer
from .halo import Window, plan_halo
from .linear import (flatten_backward, flatten_forward, linear_backward, linear_forward,
                     product, product_layout)
from .loss import (mse_loss_backward, mse_loss_forward, reduce_loss_backward,
                   reduce_loss_forward, softmax_cross_entropy_backward,
                   softmax_cross_entropy_forward)
from .modules import (AvgPool2d, BatchNorm2d, Conv2d, CrossEntropyLoss, Dropout, Flatten, GELU,
                      Linear, MaxPool2d, Module, ReLU, Residual, Sequential)
from .norm import batch_norm_backward, batch_norm_forward
from .pool import (avg_pool2d, avg_pool2d_backward, avg_pool2d_forward, max_pool2d,
                   max_pool2d_backward, max_pool2d_forward)
from .precision import LossScaler, sgd_step
from .param import Param
from .strategy import NAMED, ConvLayout, Machine, choose_conv_layout, conv_cost, conv_layout

__all__ = [
    "AvgPool2d", "BatchNorm2d", "Conv2d", "ConvCtx", "ConvLayout", "CrossEntropyLoss",
    "Dropout", "Flatten", "GELU", "GradReducer", "Linear", "LossScaler", "Machine", "MaxPool2d",
    "Module", "NAMED", "Param", "ReLU", "Residual", "Sequential", "Window", "avg_pool2d",
    "avg_pool2d_backward", "avg_pool2d_forward", "batch_norm_backward", "batch_norm_forward",
    "bias_add_backward", "bias_add_forward", "choose_conv_layout", "conv2d", "conv2d_backward",
    "conv2d_forward", "conv_cost", "conv_layout", "dropout_backward", "dropout_forward",
    "dropout_mask", "edits", "flatten_backward", "flatten_forward", "gelu_backward", "gelu_forward",
    "linear_backward", "linear_forward", "product", "product_layout", "max_pool2d",
    "max_pool2d_backward", "max_pool2d_forward", "mse_loss_backward", "mse_loss_forward",
    "plan_halo", "reduce_loss_backward", "reduce_loss_forward", "relu_backward", "relu_forward",
    "sgd_step", "softmax_cross_entropy_backward", "softmax_cross_entropy_forward",
]
