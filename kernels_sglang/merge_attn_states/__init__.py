"""merge_attn_states: merge two partial attention states (values and log-sum-exp) into one."""
