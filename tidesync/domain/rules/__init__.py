"""Sync rules: what each rule syncs, for which ships, and how its values are transformed.

Pure model and checks; no I/O.
"""
