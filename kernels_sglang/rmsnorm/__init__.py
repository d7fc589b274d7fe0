"""rmsnorm (being written)."""
