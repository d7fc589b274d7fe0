"""Per-token-group fp8 quantisation as a user writes it: the PyTorch peer of per_token_group_quant_fp8 (plain PyTorch; timed eager and under torch.compile).

Scales are row-major [T, H / 128], the only layout the spec covers. The clamp is SGLang's: x / s
in fp32 can pass 448 only by a rounding error, which the cast's round-to-nearest takes back to 448
anyway, so the cast never meets a value out of range.
"""

import torch

GROUP = 128
FP8_MAX = 448.0


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    x = tensors["x"]
    groups = x.float().view(x.shape[0], -1, GROUP)
    scales = groups.abs().amax(dim=-1, keepdim=True).clamp(min=scalars["eps"]) / FP8_MAX
    q = (groups / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return {"q": q.view(x.shape), "scales": scales.squeeze(-1)}
