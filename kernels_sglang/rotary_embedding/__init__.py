"""rotary_embedding (being written)."""
