"""Maintenance over a repository's history: garbage collection, expiry, diffs and logs."""
