"""World models: the GeodesicCrossAttention (BAOAB) dynamics, the GRU baseline, attention
operators, memory and diagnostics."""
