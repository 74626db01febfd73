"""Shared test fixtures: where ../shared/data is, and skips with a reason when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests patch listing code in-process with unchanged inputs, which a content-keyed listing cache
# cannot see: every tier lists afresh in tests (tests/harness/engine/test_listing_cache.py turns it on).
os.environ["HARNESS_LISTING_CACHE"] = "off"

from contracts.settings import current

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = current().shared_data  # $HARNESS_SHARED_DATA, else ../shared/data


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip: CI has it, a fresh clone elsewhere may not."""
    if not (SHARED_DATA / "hub").is_dir():
        pytest.skip(f"needs the shared data set at {SHARED_DATA} (not present here)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def hub_models_path(shared_data: Path) -> Path:
    return shared_data / "hub" / "hub_models.jsonl.gz"


@pytest.fixture(scope="session")
def full_configs_path(shared_data: Path) -> Path:
    return shared_data / "hub" / "full_configs.jsonl"


@pytest.fixture(scope="session")
def oplog_path(shared_data: Path) -> Path:
    return shared_data / "oplogs" / "GPT2ForSequenceClassification_training.txt"
