"""Silence transformers' logging and warnings while configs and tiny models are built in bulk."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Iterator


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                yield
            finally:
                logging.disable(logging.NOTSET)
    finally:
        hf_logging.set_verbosity(level)
