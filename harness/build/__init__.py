"""Building a model: a spec's config shrunk to a tiny one (`shrink`), a model with random weights
(`models`), ready for a deterministic training step (`train_mode`), and inputs it accepts (`inputs`)."""
