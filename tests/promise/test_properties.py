"""Properties of entry names, of which entry is latest, of prune's plan, and of the verbs run in sequence."""

from __future__ import annotations

import base64
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from publish.cli import main
from publish.ops.retention import plan
from publish.rules import layout
from tests.support.reference_plan import latest
from tests.support.reference_plan import related as reference_related

LIMIT = 10**20
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

common = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.integers(min_value=0, max_value=LIMIT - 1)
# Any Unicode scalar value except NUL and "/" (surrogates cannot be written as UTF-8).
element_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0")
elements = st.text(element_chars, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
clean_paths = st.lists(elements, min_size=1, max_size=5).map("/".join)
save_paths = clean_paths.filter(lambda p: not layout.reserved(p))  # pub, tomb/x, exec: never a save


def b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").rstrip("=")


def entry_name(epoch: int, step: int, encoded: str) -> str:
    return f"{epoch:020d}-{step:020d}-{encoded}"


def rejected(text: str) -> bool:
    try:
        layout.parse(text)
    except ValueError:
        return True
    return False


# -- entry names ------------------------------------------------------------------------------------------


@common
@given(numbers, numbers, save_paths)
def test_name_round_trip(epoch: int, step: int, path: str) -> None:
    text = layout.name(epoch, step, path)
    assert text == entry_name(epoch, step, b32(path.encode("utf-8")))
    entry = layout.parse(text)
    assert (entry.epoch, entry.step, entry.path) == (epoch, step, path)
    assert entry.name == text


@common
@given(numbers, numbers, save_paths, st.integers(min_value=1, max_value=7))
def test_padding_is_rejected(epoch: int, step: int, path: str, pad: int) -> None:
    assert rejected(layout.name(epoch, step, path) + "=" * pad)


@common
@given(numbers, numbers, save_paths, st.data())
def test_lowercase_is_rejected(epoch: int, step: int, path: str, data: st.DataObject) -> None:
    text = layout.name(epoch, step, path)
    letters = [i for i in range(42, len(text)) if text[i].isalpha()]
    assume(letters)
    i = data.draw(st.sampled_from(letters))
    assert rejected(text[:i] + text[i].lower() + text[i + 1 :])
    assert rejected(text.lower())


@common
@given(numbers, numbers, clean_paths, st.data())
def test_unused_bits_set_are_rejected(epoch: int, step: int, path: str, data: st.DataObject) -> None:
    raw = path.encode("utf-8")
    encoded = b32(raw)
    unused = len(encoded) * 5 - len(raw) * 8
    assume(unused > 0)
    bit = data.draw(st.integers(min_value=0, max_value=unused - 1))
    last = ALPHABET.index(encoded[-1])
    assert last & ((1 << unused) - 1) == 0  # the canonical encoding leaves them clear
    tampered = encoded[:-1] + ALPHABET[last | (1 << bit)]
    assert base64.b32decode(tampered + "=" * (-len(tampered) % 8)) == raw  # same bytes, another spelling
    assert rejected(entry_name(epoch, step, tampered))


@common
@given(numbers, numbers, clean_paths, st.sampled_from([0, 1]), st.sampled_from([1, 19, 21, 40]))
def test_wrong_digit_counts_are_rejected(epoch: int, step: int, path: str, which: int, width: int) -> None:
    fields = [f"{epoch:020d}", f"{step:020d}"]
    value = epoch if which == 0 else step
    text = f"{value:0{width}d}"
    assume(len(text) != 20)
    fields[which] = text
    assert rejected(f"{fields[0]}-{fields[1]}-{b32(path.encode('utf-8'))}")


@common
@given(numbers, numbers, st.binary(min_size=1, max_size=40))
def test_non_utf8_payloads_are_rejected(epoch: int, step: int, raw: bytes) -> None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        assume(False)
    assert rejected(entry_name(epoch, step, b32(raw)))


unclean = st.one_of(
    clean_paths.map(lambda p: "/" + p),  # leading /
    clean_paths.map(lambda p: p + "/"),  # trailing / (an empty element)
    st.tuples(clean_paths, clean_paths).map("//".join),  # empty element inside
    st.tuples(st.sampled_from([".", ".."]), clean_paths, st.booleans()).map(
        lambda t: f"{t[0]}/{t[1]}" if t[2] else f"{t[1]}/{t[0]}"
    ),
    st.sampled_from([".", "..", "/"]),
    st.tuples(clean_paths, st.integers(min_value=0, max_value=20)).map(
        lambda t: t[0][: t[1]] + "\0" + t[0][t[1] :]
    ),
)


@common
@given(numbers, numbers, unclean)
def test_unclean_paths_are_rejected(epoch: int, step: int, path: str) -> None:
    assert rejected(entry_name(epoch, step, b32(path.encode("utf-8"))))


@common
@given(
    numbers,
    numbers,
    clean_paths,
    st.text(
        st.characters(blacklist_characters=ALPHABET, blacklist_categories=("Cs",)), min_size=1, max_size=3
    ),
    st.data(),
)
def test_extra_characters_are_rejected(
    epoch: int, step: int, path: str, extra: str, data: st.DataObject
) -> None:
    text = layout.name(epoch, step, path)
    at = data.draw(st.integers(min_value=0, max_value=len(text)))
    assert rejected(text[:at] + extra + text[at:])


def test_empty_payload_and_hand_picked_names_are_rejected() -> None:
    good = layout.name(1, 2, "exec/a/checkpoint-2")
    for text in (
        "",
        entry_name(1, 2, ""),
        good + "\n",
        " " + good,
        good.replace("-", "_", 1),
        good[:20] + good[21:],
        "+" + good[1:],
        "١" + good[1:],  # an Arabic-Indic digit is not a decimal digit here
        ".hidden",
    ):
        assert rejected(text), text


# -- latest -----------------------------------------------------------------------------------------------

small = st.integers(min_value=0, max_value=3)
tree_paths = st.lists(st.sampled_from(["a", "b", "ab", "c"]), min_size=1, max_size=3).map("/".join)
entries = st.builds(layout.Entry, small, small, tree_paths)


@common
@given(st.lists(entries, max_size=12), st.randoms(use_true_random=False))
def test_latest_is_the_max_by_epoch_step_name(items: list[layout.Entry], rnd: object) -> None:
    got = latest(items)
    if not items:
        assert got is None
        return
    want = max(items, key=lambda e: (e.epoch, e.step, e.name))
    assert got is not None and got.key() == want.key()
    # Zero padding makes the greatest name the latest as well.
    assert got.name == max(e.name for e in items)
    shuffled = list(items)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert latest(shuffled) == got


# -- prune's plan ------------------------------------------------------------------------------------------


def related(a: str, b: str) -> bool:
    """Independent of layout.Nest.related: element-wise prefix either way."""
    x, y = a.split("/"), b.split("/")
    n = min(len(x), len(y))
    return x[:n] == y[:n]


@common
@given(st.lists(entries, max_size=14, unique_by=lambda e: e.name), st.integers(min_value=1, max_value=6))
def test_plan_keeps_the_latest_and_every_folder_still_named(items: list[layout.Entry], keep: int) -> None:
    gone, folders = plan(items, keep)
    by_key = sorted(items, key=lambda e: (e.epoch, e.step, e.name))
    latest_n = by_key[len(by_key) - min(keep, len(by_key)) :]
    kept = [e for e in items if e not in gone]

    assert len(gone) == max(len(items) - keep, 0)
    assert set(gone) <= set(items) and len(set(gone)) == len(gone)
    assert not set(gone) & set(latest_n)
    assert sorted(kept, key=layout.Entry.key) == latest_n
    assert gone == sorted(gone, key=layout.Entry.key)  # oldest first

    assert len(set(folders)) == len(folders)
    for folder in folders:
        assert folder in {e.path for e in gone}
        for k in kept:
            assert not related(folder, k.path), (folder, k.path)
    # Every folder only gone entries named is removed.
    for e in gone:
        assert e.path in folders or any(related(e.path, k.path) for k in kept)


def test_related_is_by_element() -> None:
    assert layout.Nest(["exec/a/x"]).related("exec/a")
    assert layout.Nest(["exec/a"]).related("exec/a/x")
    assert layout.Nest(["exec/a"]).related("exec/a")
    assert not layout.Nest(["exec/ab"]).related("exec/a")
    assert not layout.Nest(["exec/a"]).related("exec/ab/x")


@common
@given(st.lists(tree_paths, max_size=6), st.lists(tree_paths, max_size=6))
def test_related_matches_the_element_wise_oracle(xs: list[str], ys: list[str]) -> None:
    for a in xs:
        for b in ys:
            assert layout.Nest([b]).related(a) == related(a, b) == reference_related(a, b)


# -- the verbs in sequence, through main() -----------------------------------------------------------------

publish_op = st.tuples(st.just("publish"), small, st.integers(min_value=0, max_value=5), tree_paths)
prune_op = st.tuples(st.just("prune"), st.integers(min_value=1, max_value=4))
ops = st.lists(st.one_of(publish_op, publish_op, prune_op), min_size=1, max_size=12)


def run(*argv: str, cwd: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), {}, out, err, cwd=cwd)
    return code, out.getvalue(), err.getvalue()


def listing(root: Path) -> set[str]:
    pub = root / "pub"
    return set(os.listdir(pub)) if pub.is_dir() else set()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_publish_and_prune_in_any_order_leave_resolve_right(sequence: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        root.mkdir()
        model: dict[str, layout.Entry] = {}
        for op in sequence:
            if op[0] == "publish":
                _, epoch, step, rel = op
                entry = layout.Entry(epoch, step, f"exec/{rel}")
                (root / entry.path).mkdir(parents=True, exist_ok=True)
                code, out, err = run(
                    "publish",
                    "-checkpoint",
                    str(root),
                    "-epoch",
                    str(epoch),
                    entry.path,
                    str(step),
                    cwd=str(root),
                )
                assert code == 0, err
                if entry.name in model:
                    assert out == "" and "already published" in err
                else:
                    assert out.startswith(f"published {entry.name} ")
                model[entry.name] = entry
            else:
                keep = op[1]
                before = list(model.values())
                code, out, err = run("prune", "-checkpoint", str(root), "-keep", str(keep), cwd=str(root))
                assert code == 0, err
                ordered = sorted(before, key=layout.Entry.key)
                remaining = ordered[max(len(ordered) - keep, 0) :]
                model = {e.name: e for e in remaining}
                for e in ordered[: max(len(ordered) - keep, 0)]:
                    # A folder only removed entries named is gone; one a remaining entry relates to stays.
                    if any(related(e.path, r.path) for r in remaining):
                        assert (root / e.path).is_dir()
                    else:
                        assert not (root / e.path).exists()
            assert listing(root) == set(model)
            for name in listing(root):
                assert (root / layout.parse(name).path).is_dir(), name
            code, out, err = run("resolve", "-checkpoint", str(root), cwd="/")
            assert code == 0, err
            best = latest(list(model.values()))
            assert out == ("" if best is None else f"{root}/{best.path}\n")
            if best is not None:
                assert os.path.isdir(out.strip())
