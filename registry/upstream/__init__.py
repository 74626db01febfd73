"""The upstream tier: PyTorch's own op_db OpInfo samples, every CPU dtype, against the backend."""
