"""Credential sources for S3 roots: ``secret:``, ``file:`` and ``vault:``, tried in order."""
