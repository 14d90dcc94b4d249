"""Plain rules the tests check the command's faster ones against (test and bench code only): prune's plan as
it was before it was made O(n log n) (tests/verbs/test_prune_plan.py checks the plan against it, bench/resolve.py
times it), whether two folders are related (layout.Nest answers it for many at once), and which of some
entries is the latest (layout.latest_of answers it from the names)."""

from __future__ import annotations

from publish.rules import layout


def related(a: str, b: str) -> bool:
    """True when folder ``a`` is ``b``, lies inside it, or holds it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def latest(entries: list[layout.Entry]) -> layout.Entry | None:
    """The entry with the greatest (epoch, step); ties go to the greatest name."""
    return max(entries, key=layout.Entry.key, default=None)


def quadratic_plan(entries: list[layout.Entry], keep: int) -> tuple[list[layout.Entry], list[str]]:
    """(the entries to remove, the folders to remove) of keeping the newest ``keep``, in quadratic time."""
    ordered = layout.oldest_first(entries)
    cut = max(len(ordered) - max(keep, 1), 0)
    gone, kept = ordered[:cut], ordered[cut:]
    folders: list[str] = []
    for entry in gone:
        if entry.path in folders or any(related(entry.path, k.path) for k in kept):
            continue
        folders.append(entry.path)
    return gone, folders
