"""RMS normalisation as SGLang's own PyTorch path writes it: the peer of rmsnorm (plain PyTorch;
timed eager and under torch.compile).

This is `RMSNorm.forward_native(x)` of sglang/srt/layers/layernorm.py: the weight multiplies the
fp32 normalised row before the one rounding to the storage dtype, as SGLang's kernel does.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x, weight = tensors["x"], tensors["w"]
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + scalars["eps"])
    return {"out": (x * weight).to(orig_dtype)}
