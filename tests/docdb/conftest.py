"""The DocumentDB adapters' tests use the store tests' fixtures: both adapters, a prefix a
test."""

from tests.store.conftest import db, prefix

__all__ = ["db", "prefix"]
