"""rotary_embedding: NeoX / GPT-J rotary position embedding of q and k in place, from a cos/sin cache."""
