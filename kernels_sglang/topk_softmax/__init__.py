"""topk_softmax: MoE router softmax over the experts, then the top-k experts per token (optional renormalization)."""
