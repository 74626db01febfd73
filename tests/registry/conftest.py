"""Registry test fixtures (the helpers live in registry_fixtures.py so tests can import them)."""

from tests.registry.registry_fixtures import bert_outcome, bert_registry  # noqa: F401
