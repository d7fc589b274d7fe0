"""fused_add_rmsnorm (being written)."""
