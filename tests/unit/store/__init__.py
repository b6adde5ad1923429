"""Tests of remediate.store, one module per module of the package."""
