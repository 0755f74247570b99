"""Attention operators sharing one call shape: (queries, keys, values, masks) -> (out, weights)."""
