"""Residual add then RMS norm as SGLang's own PyTorch path writes it: the peer of fused_add_rmsnorm
(plain PyTorch; timed eager and under torch.compile).

This is `RMSNorm.forward_native(x, residual)` of sglang/srt/layers/layernorm.py, the path SGLang
runs where its CUDA kernel does not: out of place, returning the normalised rows and the new
residual (the fp32 sum rounded to the storage dtype), with the norm taken of the unrounded fp32
sum, as the kernel does. Writing the results back into the inputs with `copy_` is how a user
would mimic the kernel's in-place contract, but Inductor compiles that form 1.2x-2.0x slower
(H200, 2026-11-24), so it would be a weaker peer than the one SGLang's users get.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x, residual, weight = tensors["x"], tensors["residual"], tensors["w"]
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    x = x + residual.to(torch.float32)
    residual = x.to(orig_dtype)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + scalars["eps"])
    x = (x * weight).to(orig_dtype)
    return {"x": x, "residual": residual}
