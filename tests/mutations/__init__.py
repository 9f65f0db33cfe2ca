"""Behaviours broken on purpose to show that their tests notice (docs/mutations.md)."""
