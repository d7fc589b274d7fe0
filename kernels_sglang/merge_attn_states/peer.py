"""Merging two partial attention states by their LSE as a user writes it: the PyTorch peer of merge_attn_states (plain PyTorch; timed eager and under torch.compile).

An infinite LSE (either sign) marks an empty state. The textbook `logaddexp` and `exp(sa - s)`
give NaN when both sides are empty (-inf - -inf) or one is +inf, so +inf is first made -inf and
the maximum is replaced by 0 where both are empty: the weights are then exactly 0, v = 0 and
s = -inf, as the reference says.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    exp, log = (torch.exp2, torch.log2) if variant == "base2" else (torch.exp, torch.log)
    va, vb = tensors["va"], tensors["vb"]
    sa = torch.where(torch.isinf(tensors["sa"]), float("-inf"), tensors["sa"])
    sb = torch.where(torch.isinf(tensors["sb"]), float("-inf"), tensors["sb"])
    m = torch.maximum(sa, sb)
    empty = torch.isneginf(m)
    m = torch.where(empty, 0.0, m)
    wa, wb = exp(sa - m), exp(sb - m)
    total = torch.where(empty, 1.0, wa + wb)
    v = (va.float() * (wa / total).unsqueeze(-1) + vb.float() * (wb / total).unsqueeze(-1)).to(va.dtype)
    s = torch.where(empty, float("-inf"), m + log(total))
    return {"v": v, "s": s}
