"""The gated MLP activation as a user writes it: the PyTorch peer of silu_and_mul (plain PyTorch; timed eager and under torch.compile)."""

import torch
import torch.nn.functional as F

_ACTIVATIONS = {
    "default": F.silu,
    "gelu": lambda a: F.gelu(a, approximate="none"),
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
}


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x = tensors["x"]
    gate, up = x.float().split(scalars["d"], dim=-1)
    return {"out": (_ACTIVATIONS[variant](gate) * up).to(x.dtype)}
