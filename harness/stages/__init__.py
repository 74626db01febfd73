"""The stages of one model check: load, forward, backward, compile, numerics, each against its
reference (`check` drives them; `step` is the training step they share; `compare` judges tensors)."""
