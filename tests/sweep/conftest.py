"""The sweep tests' data and specifications live in tests/helpers/sweeps.py (imported, not a conftest)."""
