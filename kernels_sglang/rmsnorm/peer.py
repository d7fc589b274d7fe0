"""RMS normalisation as a user writes it: the PyTorch peer of rmsnorm (plain PyTorch; timed eager and under torch.compile).

The weight multiplies the fp32 normalised row before the one rounding to the storage dtype, as
SGLang's kernel does; the common `w * x_normed.to(dtype)` would round twice.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x, w = tensors["x"], tensors["w"]
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + scalars["eps"])
    return {"out": (x32 * inv_rms * w.float()).to(x.dtype)}
