"""Helpers shared by the test suite and bench scripts (they need the dev extras)."""
