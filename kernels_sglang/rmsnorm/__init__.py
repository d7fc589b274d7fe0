"""rmsnorm: out = x / sqrt(mean(x^2) + eps) * w per row, fp32 accumulation."""
