"""The ``mr2`` command line."""
