"""topk_softmax (being written)."""
