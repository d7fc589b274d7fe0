"""The gated MLP activation as SGLang's own PyTorch path writes it: the peer of silu_and_mul (plain
PyTorch; timed eager and under torch.compile).

This is `SiluAndMul.forward_native` and `GeluAndMul.forward_native` of
sglang/srt/layers/activation.py: the activation of the first half times the second half, in the
storage dtype (Inductor computes in fp32 inside its fused kernel either way).
"""

import torch
import torch.nn.functional as F

_ACTIVATIONS = {
    "default": F.silu,
    "gelu": lambda a: F.gelu(a, approximate="none"),
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
}


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x = tensors["x"]
    d = x.shape[-1] // 2
    return {"out": _ACTIVATIONS[variant](x[..., :d]) * x[..., d:]}
