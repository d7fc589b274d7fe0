"""MoE routing as a user writes it: the PyTorch peer of topk_softmax (plain PyTorch; timed eager and under torch.compile).

The experts are chosen by a stable descending sort of the logits, not `torch.topk`: topk does
not promise which of equal values comes first, and the reference sends ties to the lower index.
Sorting the logits rather than the fp32 probabilities keeps distinct logits distinct where exp
would round them to one float.
"""

import torch


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    logits = tensors["gating"].float()
    probs = torch.softmax(logits, dim=-1)
    indices = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :scalars["k"]]
    weights = probs.gather(-1, indices)
    if variant == "renormalize":
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return {"weights": weights, "indices": indices.to(torch.int32)}
