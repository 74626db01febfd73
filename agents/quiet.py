"""Silence transformers while configs and tiny models are built in bulk: the one implementation.

Building thousands of configs (the catalog, the crawler's triage) and shrunk models (every model
tier, the probes) makes transformers log a warning or raise a Python warning for most of them;
none is a finding (a real failure is an exception). Used by agents (catalog, triage) and by the
harness (build, stages, blame); it lives here, the lower layer, so both can import it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator

#: logger levels, warning filters and logging.disable are process-global: one thread at a time (the
#: crawler triages from worker threads; config building is CPU-bound under the GIL anyway)
_LOCK = threading.RLock()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logger at ERROR, Python warnings ignored and log records below ERROR dropped
    (other libraries' too: torch warns while tiny models are built) until the block ends; nested
    uses restore what the outer one set."""
    with _LOCK:
        logger = logging.getLogger("transformers")
        level, disabled = logger.level, logging.root.manager.disable
        logger.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logging.disable(max(disabled, logging.WARNING))
                try:
                    yield
                finally:
                    logging.disable(disabled)
        finally:
            logger.setLevel(level)
