"""fused_add_rmsnorm: residual <- x + residual, then x <- rmsnorm(the fp32 sum) * w, in place."""
