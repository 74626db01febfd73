"""The simulated `neuron` device. (placeholder: the backend helper replaces this file)"""


def _autoload() -> None:
    """Entry point of `torch.backends`: must never break `import torch` for the whole venv."""
    import warnings

    try:
        import backend  # noqa: F401
    except Exception as exc:  # pragma: no cover - defensive
        warnings.warn(f"neuron backend failed to load: {exc}")
