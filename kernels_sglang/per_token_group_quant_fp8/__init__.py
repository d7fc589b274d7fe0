"""per_token_group_quant_fp8: per-token, per-128-element-group dynamic fp8 e4m3 quantisation with fp32 scales."""
