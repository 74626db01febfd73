"""The model-coverage harness: shrink, synthesize inputs, check stages, run tiers."""

__version__ = "0.1.0"
