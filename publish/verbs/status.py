"""status: what a root holds, read only: publications, unpublished saves under exec/, leftovers, tombstones.

It fails only where resolve or prune would (the root, a bad name in pub/ or tomb/, the store); a save that
is incomplete, or that a framework's check refuses, is reported, never a failure.
"""

from __future__ import annotations

from publish.frameworks import FRAMEWORKS, LISTED
from publish.ops import Say, command, scan_flags
from publish.ops.capacity import policy_text, size_note, space_line
from publish.ops.idle import MARK
from publish.ops.mirror_flags import MirrorFlags
from publish.ops.retention import NoSaves, Policy, Saves, Schedule, would_remove
from publish.ops.retention_flags import RetentionFlags
from publish.rules import layout
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure, FileError, StoreError, UsageError
from publish.rules.layout import EXEC, PUB, TOMB
from publish.rules.redact import shown
from publish.stores.base import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The attempts under exec/ looked into (the greatest names): one LIST each on S3, so thousands would take
#: minutes.  The others are counted, not listed.
ATTEMPT_LIMIT = 200

VERSION = 1


def _check(dl: Deadline, store: Store, framework: str, path: str, step: int) -> tuple[str, str]:
    """A framework's verdict on the save at ``path``: complete, incomplete or faulty (with the message).  An
    incomplete one carries the check's note when it said why watch never publishes it (a DeepSpeed archive
    the reader refuses, a DCP save with per-rank metadata only)."""
    notes: list[str] = []
    try:
        whole = FRAMEWORKS[framework].complete(dl, store, path, step, notes.append)
    except FileError as e:
        if not e.unexaminable:
            raise  # a disk I/O error is the store failing, as on S3
        return "faulty", str(e)
    except StoreError:
        raise  # the store failing (a refusal, the -timeout passed) is not the save's fault: fail as resolve does
    except (Failure, OSError) as e:
        return "faulty", str(e)
    if whole:
        return "complete", ""
    return "incomplete", notes[0] if notes else ""


#: When more than one framework's naming rule matches a save, the order their verdicts are taken in: the first
#: that finds it complete, else the first (the most specific rule: dcp's, any name ending in digits, last).
PREFERENCE = sorted(FRAMEWORKS, key=lambda name: name == "dcp")


def _verdict(
    dl: Deadline, store: Store, path: str, matches: list[tuple[str, int]]
) -> tuple[str, int, str, str]:
    """One verdict on the save at ``path``: framework, step, state and message, from the frameworks whose
    rule matches its name (``matches``, in PREFERENCE order), each asked in turn until one finds it whole."""
    first: tuple[str, int, str, str] | None = None
    for name, step in matches:
        state, message = _check(dl, store, name, path, step)
        if state == "complete":
            return name, step, state, message
        if first is None:
            first = name, step, state, message
    assert first is not None
    return first


def collect(
    dl: Deadline,
    store: Store,
    keep: int | Policy | None,
    only: str | None = None,
    marks: list[str] | None = None,
) -> dict[str, Any]:
    """The status document (README: "publish status -json"); ``only``: one framework's verdicts; ``marks``:
    given, the names of the idle marks in exec/ are added to it."""
    import time

    from publish.rules.timestamps import rfc3339

    store.check_root(dl)
    times = store.entry_times(dl)  # the same one LIST on S3 as the names alone
    now = time.time()
    entries = layout.parse_all(list(times), store.location(PUB))
    tombs = layout.parse_tombs(store.list_tombs(dl), store.location(TOMB))
    if not entries and not tombs:
        store.check_exists(dl)
    ordered = sorted(entries, key=layout.Entry.key, reverse=True)
    there = _holding(dl, store, [e.path for e in ordered])
    publications = [
        {
            "entry": e.name,
            "epoch": e.epoch,
            "step": e.step,
            "epoch_decimal": str(e.epoch),  # exact for parsers that read numbers as doubles (jq < 1.7)
            "step_decimal": str(e.step),
            "path": e.path,
            "location": store.location(e.path),
            "exists": held,
            "time": rfc3339(times[e.name]),  # when the entry was made: its file's mtime, its LastModified
            "age": round(max(now - times[e.name], 0.0), 3),  # seconds
        }
        for e, held in zip(ordered, there)
    ]
    from publish.ops import capacity

    sized = capacity.measure(dl, store, publications)  # each one's bytes: one manifest read each
    published = {e.path for e in entries}
    doomed = set(tombs)  # listed as tombstones, not as saves or leftovers
    named = layout.Nest(list(published))
    folders_in_exec, files_in_exec = store.children(dl, EXEC)  # one LIST on S3: the attempts and marks
    attempts = sorted(folders_in_exec)
    looked = attempts[-ATTEMPT_LIMIT:]
    saves: list[dict[str, Any]] = []
    unnamed: list[dict[str, str]] = []
    unreadable: list[dict[str, str]] = []
    for attempt in looked:
        where = f"{EXEC}/{attempt}"
        try:
            folders, files = store.children(dl, where)
        except FileError as e:
            if not e.unexaminable:
                raise
            unreadable.append({"path": where, "location": store.location(where), "message": str(e)})
            continue
        except StoreError:
            raise
        except (Failure, OSError) as e:  # one attempt's folder (a link the store refuses)
            unreadable.append({"path": where, "location": store.location(where), "message": str(e)})
            continue
        candidates = [(n, "folder") for n in folders] + [(n, "file") for n in files]
        for child, kind in sorted(candidates):
            path = f"{EXEC}/{attempt}/{child}"
            if path in published:
                continue  # a published save: neither a save to report nor a folder no entry names
            parts = path.split("/")
            if any("/".join(parts[:i]) in doomed for i in range(1, len(parts) + 1)):
                continue
            matches = []
            matched = False
            for name in PREFERENCE:
                fw = FRAMEWORKS[name]
                step = fw.step(child)
                if step is None or (fw.kind == "files") != (kind == "file"):
                    continue
                matched = True
                if only is None or name == only:
                    matches.append((name, step))
            if matches:
                framework, step, state, message = _verdict(dl, store, path, matches)
                saves.append(
                    {
                        "path": path,
                        "location": store.location(path),
                        "framework": framework,
                        "step": step,
                        "step_decimal": str(step),
                        "state": state,
                        "message": message,
                    }
                )
            if not matched and kind == "folder" and not named.related(path):
                unnamed.append({"path": path, "location": store.location(path)})
    doc: dict[str, Any] = {
        "version": VERSION,
        "root": store.root,
        "framework": only,
        "publications": publications,
        "attempts": {"total": len(attempts), "looked_into": len(looked)},
        "saves": saves,
        "unnamed": unnamed,
        "unreadable": unreadable,
        "tombstones": [{"path": f, "location": store.location(f)} for f in tombs],
        "prune": None,
        "idle": _idle(publications, files_in_exec),
    }
    if marks is not None:
        marks.extend(name for name in files_in_exec if name.startswith(MARK))
    doc.update(capacity.summary(store, publications))
    if keep is not None:
        if isinstance(keep, Policy) and keep.within is not None:
            keep.times, keep.now = times, now
        if isinstance(keep, Policy) and keep.protect is not None:
            keep.held = keep.protect(dl, entries)
        policy = keep if isinstance(keep, Policy) else Policy(keep)
        known = {str(p["path"]): bool(p["exists"]) for p in publications}  # asked once, as prune asks
        try:
            sched = Schedule(entries, tombs, keep, Saves(dl, store, known, sized))
        except NoSaves as e:  # what prune would do: nothing, and say why
            doc["prune"] = _plan(policy, None, [], [], str(e))
            return doc
        orphans = None
        if policy.orphans is not None:
            sched.find_orphans(dl, store, policy.orphans, now)
            orphans = {
                "age": policy.orphans.age,
                "attempt": policy.orphans.attempt or None,
                "folders": sched.orphans,
                "uploads": [
                    {"path": u.path, "location": store.location(u.path), "upload_id": u.upload_id}
                    for u in sched.uploads
                ],
                "left": [{"path": p, "location": store.location(p), "why": why} for p, why in sched.left],
            }
        doc["prune"] = _plan(
            policy, orphans, [e.name for e in sched.gone], would_remove(dl, store, sched), notes=sched.notes
        )
    return doc


def _plan(
    policy: Policy,
    orphans: dict[str, Any] | None,
    entries: list[str],
    lines: list[str],
    refused: str = "",
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The document's ``prune``; ``refused``: why prune would remove nothing (every save looks gone);
    ``notes``: what prune would say on stderr of -keep-bytes."""
    return {
        "keep": policy.keep,
        "keep_every": policy.every or None,
        "keep_within": policy.within,
        "keep_bytes": policy.bytes,
        "notes": notes or [],
        "orphans": orphans,
        "entries": entries,
        "lines": lines,
        "refused": refused or None,
    }


def _holding(dl: Deadline, store: Store, paths: list[str]) -> list[bool]:
    """Whether something is at each of ``paths``: at once where the store can (POSIX: each parent folder
    opened once), else one ``holds`` each."""
    at_once = getattr(store, "holds_all", None)
    if at_once is not None:
        return list(at_once(dl, paths))
    return [store.holds(dl, path) for path in paths]


def _idle(
    publications: list[dict[str, Any]], files: list[str], mirrored: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """run -requeue's count of idle requeues (publish.ops.idle): the marks among ``files`` (exec/'s) of
    the save a dispatch would resume from now (the newest publication whose save exists; none: no save),
    and all marks.  With ``mirrored`` (the mirror's publications; ``files`` then both tiers' marks), that
    save is resolve -mirror's answer: the mirror's when its newest is newer, else the root's."""
    from publish.ops.idle import mark_prefix

    marks = {name for name in files if name.startswith(MARK)}  # a mark on both tiers counts once
    newest = next((p for p in publications if p["exists"]), None)
    other = next((p for p in mirrored or [] if p["exists"]), None)
    if other is not None and (
        newest is None or (other["epoch"], other["step"]) > (newest["epoch"], newest["step"])
    ):
        newest = other
    resumed = None if newest is None else layout.parse(newest["entry"])
    prefix = mark_prefix(resumed)
    return {
        "save": None if newest is None else newest["path"],
        "location": None if newest is None else newest["location"],
        "requeues": sum(1 for name in marks if name.startswith(prefix)),
        "marks": len(marks),
    }


def status(
    dl: Deadline,
    store: Store,
    say: Say,
    keep: int | Policy | None,
    as_json: bool = False,
    only: str | None = None,
    mirror: Store | None = None,
    mirror_keep: int | None = None,
    max_age: float | None = None,
    max_lag: float | None = None,
) -> None:
    """Print the status document, as one JSON line or as text for a person.  With ``mirror`` (-mirror),
    the mirror's document too, under ``"mirror"``, and which publications it holds.  ``max_age`` and
    ``max_lag`` (-max-age, -max-mirror-lag): when what they bound is stale, a Failure naming it in one
    line instead (publish.ops.health)."""
    pair = None
    if mirror is not None:
        from publish.ops.tiers import Tiers

        pair = Tiers(store, mirror, say, 0.0, mirror_keep)
        if isinstance(keep, Policy):
            keep.protect = pair.protected  # prune -keep N keeps what is pending
    if pair is None:
        doc = collect(dl, store, keep, only)
    else:
        fast_marks: list[str] = []
        mirror_marks: list[str] = []
        try:
            doc = collect(dl, store, keep, only, fast_marks)
        except Failure as e:  # the root lost with its node: the mirror is shown, as resolve -mirror answers
            try:
                mirrored = collect(dl, pair.mirror, None, only, mirror_marks)
            except Failure as m:
                raise Failure(f"{_fact(e)}; the mirror failed too: {_fact(m)}") from None
            say.warn(f"{_fact(e)}: showing the mirror alone")
            doc = _failed(store, only, _fact(e))
        else:
            mirrored = collect(dl, pair.mirror, None, only, mirror_marks)
        fast = [layout.parse(p["entry"]) for p in doc["publications"]]
        pending = pair.pending_of(
            dl,
            fast,
            [p["entry"] for p in mirrored["publications"]],
            {p["path"]: p["exists"] for p in doc["publications"]},  # asked once, as prune asks
            {p["path"]: p["exists"] for p in mirrored["publications"]},
        )
        tiers(doc, mirrored, [e.name for e in pending])
        # run -requeue -mirror's count: resolve -mirror's answer, the union of both tiers' marks
        doc["idle"] = _idle(doc["publications"], fast_marks + mirror_marks, mirrored["publications"])
    if max_age is not None or max_lag is not None:
        from publish.ops.health import check

        check(doc, max_age, max_lag)
    if as_json:
        import json

        say.out(json.dumps(doc, ensure_ascii=True))
        return
    say.out_all(text(doc))


def _fact(e: Failure) -> str:
    """What failed, without a missing root's advice (publish init): the mirror is there."""
    from publish.rules.errors import MissingRoot

    return e.fact if isinstance(e, MissingRoot) else str(e)


def _failed(store: Store, only: str | None, why: str) -> dict[str, Any]:
    """The root's document when the root failed (``why``, also in ``failed``) and the mirror is shown: it
    holds nothing that could be read."""
    return {
        "version": VERSION,
        "root": store.root,
        "framework": only,
        "failed": why,
        "publications": [],
        "attempts": {"total": 0, "looked_into": 0},
        "saves": [],
        "unnamed": [],
        "unreadable": [],
        "tombstones": [],
        "prune": None,
        "idle": _idle([], []),
        "bytes": None,
        "space": None,
    }


def tiers(doc: dict[str, Any], mirrored: dict[str, Any], pending: list[str]) -> None:
    """Add the mirror's document to the root's: each publication's ``"mirrored"``, the ``"pending"`` entry
    names (newest first), and ``"tiers"``: each (epoch, step, entry) of either, newest first, with its
    state on each (``exists``, ``missing``: published but the save is gone, ``none``; on the mirror also
    ``pending``)."""
    on_mirror = {p["entry"]: p for p in mirrored["publications"]}
    on_fast = {p["entry"]: p for p in doc["publications"]}
    for p in doc["publications"]:
        p["mirrored"] = p["entry"] in on_mirror
    doc["mirror"] = mirrored
    doc["pending"] = pending
    rows = []
    for name in sorted(
        set(on_mirror) | set(on_fast), key=lambda n: _order(on_fast, on_mirror, n), reverse=True
    ):
        p = on_fast.get(name) or on_mirror[name]
        rows.append(
            {
                "entry": name,
                "epoch_decimal": p["epoch_decimal"],
                "step_decimal": p["step_decimal"],
                "root": _state(on_fast.get(name)),
                "mirror": _state(on_mirror.get(name))
                if name in on_mirror
                else ("pending" if name in pending else "none"),
            }
        )
    doc["tiers"] = rows


def _order(fast: dict[str, Any], mirror: dict[str, Any], name: str) -> tuple[int, int, str]:
    p = fast.get(name) or mirror[name]
    return (p["epoch"], p["step"], name)


def _state(pub: dict[str, Any] | None) -> str:
    """``exists``, ``missing`` (published, its save gone) or ``none`` (not published there)."""
    if pub is None:
        return "none"
    return "exists" if pub["exists"] else "missing"


def text(doc: dict[str, Any]) -> list[str]:
    """The status document as lines for a person."""
    lines: list[str] = []

    def section(head: str, items: list[str]) -> None:
        lines.append(head)
        lines.extend(items or ["  (none)"])

    failed = doc.get("failed")
    if failed is not None:  # -mirror, the root lost: nothing of it to show but why
        lines.append(f"the root {shown(doc['root'])} could not be read: {failed}")
    else:
        pubs = doc["publications"]
        section(
            f"publications in {shown(doc['root'] + '/' + PUB)}: {len(pubs)}, newest first",
            [
                f"  epoch {p['epoch']} step {p['step']} {shown(p['location'])} "
                f"({'exists' if p['exists'] else 'MISSING'}){size_note(p)}"
                for p in pubs
            ],
        )
        lines.append(space_line(doc))
        att = doc["attempts"]
        head = f"saves not published under {shown(doc['root'] + '/' + EXEC + '/')} ({att['total']} attempts"
        if att["looked_into"] < att["total"]:
            head += f", the last {att['looked_into']} by name looked into"
        if doc.get("framework"):
            head += f"; {doc['framework']} only"
        saves = []
        for state in ("complete", "incomplete", "faulty"):
            for s in doc["saves"]:
                if s["state"] == state:
                    why = f": {s['message']}" if s["message"] else ""
                    saves.append(
                        f"  {state:<10} {shown(s['location'])} ({s['framework']}, step {s['step']}){why}"
                    )
        section(head + ")", saves)
        section(
            f"folders under {EXEC}/<attempt>/ that no entry names and no framework's naming rule matches:",
            [f"  {shown(u['location'])}" for u in doc["unnamed"]],
        )
        if doc["unreadable"]:
            lines.append(f"attempts under {EXEC}/ that could not be read:")
            for u in doc["unreadable"]:  # a store's message names the folder already, as a rule
                named_by = u["message"].startswith(u["location"])
                lines.append(f"  {u['message']}" if named_by else f"  {shown(u['location'])}: {u['message']}")
        section(
            f"tombstones in {shown(doc['root'] + '/' + TOMB)} (an interrupted prune; the next prune finishes them):",
            [f"  {shown(t['location'])}" for t in doc["tombstones"]],
        )
    if "mirror" in doc:
        section(
            f"both tiers, newest first (root {shown(doc['root'])}, mirror {shown(doc['mirror']['root'])}):",
            [
                f"  epoch {t['epoch_decimal']} step {t['step_decimal']}  root: {t['root']:<7} mirror: {t['mirror']}"
                for t in doc["tiers"]
            ],
        )
    idle = doc["idle"]
    if idle["marks"]:
        since = shown(idle["location"]) if idle["location"] is not None else "no save"
        lines.append(
            f"run -requeue: {idle['requeues']} idle requeues in a row from {since} "
            f"({idle['marks']} marks {EXEC}/.idle-* in all{' on both tiers' if 'mirror' in doc else ''}; "
            "removing them starts the count again)"
        )
    plan = doc["prune"]
    if plan is not None:
        policy = f"-keep {plan['keep']}"
        if plan["keep_every"]:
            policy += f" -keep-every {plan['keep_every']}"
        if plan["keep_within"] is not None:
            from publish.rules.go.gocompat import format_duration

            policy += f" -keep-within {format_duration(plan['keep_within'])}"
        policy += policy_text(plan)
        orphans = plan.get("orphans")
        if orphans is not None:
            from publish.rules.go.gocompat import format_duration

            policy += f" -orphans -orphans-age {format_duration(orphans['age'])}"
            if orphans["attempt"] is not None:
                policy += f" -attempt {shown(orphans['attempt'])}"
        if plan["refused"] is not None:
            lines.append(f"prune {policy} would remove nothing and fail: {plan['refused']}")
        else:
            section(
                f"prune {policy} would remove entries: {len(plan['entries'])}, and:",
                [f"  {line}" for line in plan["lines"]],
            )
            lines.extend(f"  ({note})" for note in plan.get("notes", ()))
    if "mirror" in doc:
        lines.append(f"the mirror {shown(doc['mirror']['root'])}:")
        lines.extend("  " + line for line in text(doc["mirror"]))
    return lines


class Status(command.Command):
    name = "status"
    synopsis = (
        f"publish status {command.ROOT_FLAGS} [-framework F] "
        "[-keep N [-keep-every K] [-keep-within D] [-keep-bytes SIZE] [-orphans [-orphans-age 1h] [-attempt A]]] "
        "[-mirror URL [-mirror-keep M] [-max-mirror-lag D]] [-max-age D] [-json]"
    )
    summary = "show what a root holds: publications, unpublished saves, leftovers, pending prunes"

    def __init__(self) -> None:
        super().__init__()
        self.keep = self.fs.integer(
            "keep", 0, "also show what prune -keep `N` would remove", minimum=1, int64=True
        )
        self.json = self.fs.boolean("json", False, "print one JSON document (version 1) instead of text")
        self.max_age = self.fs.duration(
            "max-age",
            0.0,
            "exit 1, naming it in one line, when the newest publication (of either tier) was made longer than "
            "the duration `D` ago",
        )
        self.max_lag = self.fs.duration(
            "max-mirror-lag",
            0.0,
            "with -mirror: exit 1, naming it in one line, when the newest save not yet mirrored was published "
            "longer than the duration `D` ago",
        )
        self.framework = scan_flags.framework_flag(self.fs, f"only this framework's verdicts: {LISTED}")
        self.retention = RetentionFlags(self.fs, attempt=True)
        self.mirror = MirrorFlags(self.fs, keep=True)

    def run(self, call: command.Call) -> int:
        command.expect_args(call, [])
        if not self.keep.is_set:
            self.retention.without_keep("shows")
        orphans = self.retention.given_orphans(call.env)
        root = self.root(call)
        store = self.open(call, root).store
        given = self.mirrored
        mirror = self.open_mirror(call, given.root).store if given is not None else None
        if mirror is None and self.max_lag.is_set:
            raise UsageError("-max-mirror-lag applies to -mirror: give -mirror")
        policy = None
        if self.keep.is_set:
            policy = self.retention.policy(self.keep.value, orphans)
        status(
            self.deadline(call),
            store,
            call.say,
            policy,
            as_json=self.json.value,
            only=self.framework.value,
            mirror=mirror,
            mirror_keep=None if given is None else given.keep,
            max_age=self.max_age.value if self.max_age.is_set else None,
            max_lag=self.max_lag.value if self.max_lag.is_set else None,
        )
        return 0


COMMAND = Status
