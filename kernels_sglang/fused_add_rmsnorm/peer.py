"""Residual add then RMS norm, in place, as a user writes it: the PyTorch peer of fused_add_rmsnorm (plain PyTorch; timed eager and under torch.compile).

The residual stream keeps the sum rounded to the storage dtype, but the norm reads the unrounded
fp32 sum, as SGLang's kernel does; adding in the storage dtype first (`x + residual`) and
normalising that would normalise the rounded sum instead.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x, residual, w = tensors["x"], tensors["residual"], tensors["w"]
    s = x.float() + residual.float()
    inv_rms = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + scalars["eps"])
    residual.copy_(s)
    x.copy_(s * inv_rms * w.float())
    return {}
