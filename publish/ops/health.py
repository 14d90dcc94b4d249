"""``status -max-age D`` and ``-max-mirror-lag D``: a health check for cron or a Slurm prolog/epilog, without a
scrape.  Stale: exit 1 with one line naming what is stale; else status's usual output, exit 0.

- ``-max-age``: the newest publication whose save exists, on either tier, was made longer than D ago (its
  entry's time: the file's mtime on POSIX, its LastModified on S3), or there is none.
- ``-max-mirror-lag``: the newest save published on the fast root and not yet on the mirror (pending, its
  save there) was published there longer than D ago.
"""

from __future__ import annotations

from publish.rules.errors import Failure
from publish.rules.layout import PUB
from publish.rules.redact import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Stale(Failure):
    """What a health check bounds is stale (exit 1)."""


def _took(seconds: float) -> str:
    from publish.rules.go.gocompat import format_duration

    return format_duration(float(int(max(seconds, 0.0))))  # whole seconds: 3h0m12s


def newest(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The publication made last whose save exists, of the root and (with -mirror) of the mirror; None."""
    pubs = [p for p in doc["publications"] if p["exists"]]
    if "mirror" in doc:
        pubs += [p for p in doc["mirror"]["publications"] if p["exists"]]
    return min(pubs, key=lambda p: p["age"], default=None)


def stale(doc: dict[str, Any], max_age: float | None, max_lag: float | None) -> list[str]:
    """What is stale, each said in a few words (none: healthy)."""
    from publish.rules.go.gocompat import format_duration

    found = []
    if max_age is not None:
        p = newest(doc)
        tiers = " or on the mirror" if "mirror" in doc else ""
        if p is None:
            found.append(
                f"no publication whose save exists in {shown(doc['root'] + '/' + PUB)}{tiers}, "
                f"-max-age {format_duration(max_age)}"
            )
        elif p["age"] > max_age:
            found.append(
                f"the newest publication, {shown(p['location'])}, was made {_took(p['age'])} ago, over "
                f"-max-age {format_duration(max_age)}"
            )
    if max_lag is not None:
        on_fast = {p["entry"]: p for p in doc["publications"]}
        waiting = [on_fast[n] for n in doc.get("pending", ()) if n in on_fast and on_fast[n]["exists"]]
        if waiting and waiting[0]["age"] > max_lag:
            p = waiting[0]
            found.append(
                f"the newest save not yet mirrored, {shown(p['location'])}, was published {_took(p['age'])} "
                f"ago, over -max-mirror-lag {format_duration(max_lag)}"
            )
    return found


def check(doc: dict[str, Any], max_age: float | None, max_lag: float | None) -> None:
    """Raise :class:`Stale` naming, in one line, everything stale."""
    found = stale(doc, max_age, max_lag)
    if found:
        raise Stale("status: stale: " + "; ".join(found))
