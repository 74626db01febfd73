"""Recording the shape registry from models: which models and how each is fed (`workloads`), and
the `record` tier the run engine runs to rebuild the registry (`regenerate`)."""
