"""Kept for importers not yet moved to :mod:`publish.credentials`, the value type's home."""

from __future__ import annotations

from publish.credentials import Credentials as Credentials

__all__ = ["Credentials"]
