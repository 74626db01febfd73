"""The built-in tiers, registered in the entry-point group `harness.tiers` (pyproject.toml):
`unit` (registry op cases), `representative` (the selected models, every stage), `full` (the
population, deduplicated by architecture) and `upstream` (PyTorch's op_db samples). The run
engine finds them by name like any other tier (contracts.tiers.load_tier)."""
