"""Rotary position embedding of q and k in place, as a user writes it: the PyTorch peer of rotary_embedding (plain PyTorch; timed eager and under torch.compile).

Only the first rotary_dim dims of each head are rotated and written back; the rest (partial
rotary, R < D) are left as they are.
"""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int, rotary_dim: int,
            interleaved: bool) -> None:
    rot = x.view(x.shape[0], -1, head_dim)[..., :rotary_dim]
    r = rot.float()
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        rot.copy_(torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2))
    else:
        x1, x2 = r.chunk(2, dim=-1)
        rot.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))


def forward(tensors: dict[str, torch.Tensor], scalars: dict[str, int | float], variant: str) -> dict[str, torch.Tensor]:
    cos, sin = tensors["cos_sin_cache"][tensors["positions"]].unsqueeze(1).chunk(2, dim=-1)
    for name in ("q", "k"):
        _rotate(tensors[name], cos, sin, scalars["head_dim"], scalars["rotary_dim"], variant == "interleaved")
    return {}
