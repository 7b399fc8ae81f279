"""Hides the development-only package of this name from the processes a test starts (see
tests/support/runtime_view.py): importing it fails as it would on a user's install."""

raise ImportError("hypothesis is a development tool: the processes a test starts run without it")
