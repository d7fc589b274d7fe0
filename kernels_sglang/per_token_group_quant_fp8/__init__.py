"""per_token_group_quant_fp8 (being written)."""
