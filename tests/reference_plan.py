"""prune's plan as it was before it was made O(n log n): the reference tests/test_prune_plan.py checks the
plan against and bench/resolve.py times it against.  Test and bench code only."""

from __future__ import annotations

from publish import layout


def quadratic_plan(entries: list[layout.Entry], keep: int) -> tuple[list[layout.Entry], list[str]]:
    """(the entries to remove, the folders to remove) of keeping the newest ``keep``, in quadratic time."""
    ordered = layout.oldest_first(entries)
    cut = max(len(ordered) - max(keep, 1), 0)
    gone, kept = ordered[:cut], ordered[cut:]
    folders: list[str] = []
    for entry in gone:
        if entry.path in folders or any(layout.related(entry.path, k.path) for k in kept):
            continue
        folders.append(entry.path)
    return gone, folders
