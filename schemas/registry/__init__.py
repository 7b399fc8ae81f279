"""Deprecated: the registry is the top-level package `registry`; only the old command is kept here."""
