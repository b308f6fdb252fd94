"""End-to-end fixtures: the throwaway PostgreSQL cluster of the integration tests."""

from tests.integration.conftest import postgres  # noqa: F401  (re-exported fixture)
