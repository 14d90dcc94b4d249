"""trainer_state.json: written exactly as Trainer writes it; every prefix incomplete, never an error."""

from __future__ import annotations

import pytest

from publish.frameworks.parse import trainer_state
from tests.support.trainer_saves import real_state


def test_real_file_parses_with_nan() -> None:
    doc = trainer_state.parse(real_state())
    assert doc["global_step"] == 500
    assert doc["log_history"][0]["loss"] != doc["log_history"][0]["loss"]  # NaN


def test_every_prefix_is_incomplete_never_an_error() -> None:
    data = real_state()
    whole = data.rstrip()
    for cut in range(len(data)):
        prefix = data[:cut]
        if prefix.rstrip() == whole:
            # Only the trailing newline is missing: the document itself is whole.
            assert trainer_state.parse(prefix)["global_step"] == 500
            continue
        with pytest.raises(trainer_state.Incomplete):
            trainer_state.parse(prefix)


def test_prefix_cut_inside_a_multibyte_character_is_incomplete() -> None:
    data = '{"global_step": 1, "s": "\u00e9\u4e2d"}'.encode()
    for cut in range(len(data)):
        with pytest.raises(trainer_state.Incomplete):
            trainer_state.parse(data[:cut])


@pytest.mark.parametrize(
    "text",
    [
        b'{"global_step": 1} x',
        b'{"global_step": 1}{}',
        b'{"global_step" 1}',
        b"[1,]",
        b'{"a": tru e}',
        b'{"a": 01}',
        b'{"a": 1.}',
        b'{"a": "\x01"}',
        b'{"a": "\\x"}',
        b'{"a": nan}',
        b"{'a': 1}",
        b'{"a": 1,}',
        b"\xff\xfe",
    ],
)
def test_other_faults_are_errors(text: bytes) -> None:
    with pytest.raises(ValueError):
        trainer_state.parse(text)


@pytest.mark.parametrize(
    "text",
    [b"", b"  ", b"{", b'{"a', b'{"a": [1, 2', b'{"a": -', b'{"a": -Inf', b'{"a": 1e', b'{"a": "\\u00'],
)
def test_cut_off_documents_are_incomplete(text: bytes) -> None:
    with pytest.raises(trainer_state.Incomplete):
        trainer_state.parse(text)


def test_whitespace_after_the_document_is_fine() -> None:
    assert trainer_state.parse(b'{"global_step": 3}\n\n  \t') == {"global_step": 3}


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


def verdict(data: bytes) -> str:
    try:
        trainer_state.parse(data)
    except trainer_state.Incomplete:
        return "incomplete"
    except ValueError:
        return "fault"
    return "complete"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b"", "incomplete"),
        (b" \n\t", "incomplete"),
        (b'{"a": NaN, "b": Infinity, "c": -Infinity}', "complete"),
        (b'{"a": 1}  \n', "complete"),
        (b'{"a": "cut inside a str', "incomplete"),
        (b'{"a": "cut after an escape \\', "incomplete"),
        (b'{"a": "cut inside \\u00', "incomplete"),
        (b'{"a": "lone surrogate \\ud800', "incomplete"),
        (b'{"a": 12', "incomplete"),
        (b'{"a": 1.', "incomplete"),
        (b'{"a": 1.5e', "incomplete"),
        (b'{"a": 1.5E-', "incomplete"),
        (b'{"a": -', "incomplete"),
        (b'{"a": tru', "incomplete"),
        (b'{"a": Na', "incomplete"),
        (b'{"a": -Infinit', "incomplete"),
        (b'{"a": 1,', "incomplete"),
        (b'{"a": 1, ', "incomplete"),
        (b'{"a"', "incomplete"),
        (b'{"a" :', "incomplete"),
        (b"[1, [2, [", "incomplete"),
        (b'{"a": trux', "fault"),
        (b'{"a": 1.5.', "fault"),
        (b'{"a": 1e5e', "fault"),
        (b'{"a": 1e+5.', "fault"),
        (b'{"a": .5', "fault"),
        (b'{"a": 01', "fault"),
        (b'{"a": 1 e', "fault"),
        (b'{"a": "\\q', "fault"),
        (b'{"a": "\\u12x', "fault"),
        (b'{"a": "new\nline', "fault"),
        (b"{, ", "fault"),
        (b'{"a": 1} x', "fault"),
        (b'{"a": 1}\xc3', "fault"),  # a cut character after the document
        (b'{"a": 1, \xc3', "fault"),  # a character outside a string
        (b'{"a": "\\u00\xc3', "fault"),  # a character inside an escape
        (b'{"a": "caf\xc3', "incomplete"),  # cut inside a character of a string
    ],
    ids=short,
)
def test_table(text: bytes, want: str) -> None:
    assert verdict(text) == want


DEEP = 100_000


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b"[" * DEEP, "incomplete"),
        (b'{"a": ' * DEEP + b"1" + b"}" * (DEEP - 1), "incomplete"),
        (b"[" * DEEP + b"]" * DEEP, "fault"),  # whole, but more deeply nested than json reads
        (b"[" * DEEP + b"]" * DEEP + b"]", "fault"),
        (b"[" * DEEP + b"x", "fault"),
    ],
    ids=short,
)
def test_deep_nesting_is_never_an_internal_error(text: bytes, want: str) -> None:
    assert verdict(text) == want


def test_deep_whole_document_names_why() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        trainer_state.parse(b"[" * DEEP + b"]" * DEEP)


BIG = b"9" * 5000


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b'{"global_step": ' + BIG, "incomplete"),
        (b'{"global_step": -' + BIG, "incomplete"),
        (b'{"a": ' + BIG + b', "b": [1, 2', "incomplete"),  # a long integer before the cut
        (b'{"a": ' + BIG + b", ", "incomplete"),
        (b'{"a": ' + BIG + b"}", "fault"),
        (b'{"a": ' + BIG + b".5}", "complete"),  # a float: no digit limit
        (b'{"a": ' + BIG + b"} x", "fault"),
    ],
    ids=short,
)
def test_long_integers(text: bytes, want: str) -> None:
    assert verdict(text) == want


def test_whole_document_with_a_long_integer_says_so() -> None:
    with pytest.raises(ValueError, match="more than 4300 digits"):
        trainer_state.parse(b'{"global_step": ' + BIG + b"}")


def _cases() -> list[bytes]:
    docs = [
        real_state(),
        b'[1.5E-7, 0, -0, 0.25, "\\ud800\\udc00", "\\\\", true, false, null, NaN, -Infinity]',
        '{"\u00e9": "\u4e2d", "k": [{}, []]}'.encode(),
        b"-12.5e3",
    ]
    out: list[bytes] = []
    import random

    rng = random.Random(7)
    alphabet = b'{}[]:,"\\ue.-+0123456789tnNIafx \n\x01'
    for d in docs:
        out += [d[:k] for k in range(len(d) + 1)]
        for _ in range(1500):
            x = bytearray(d[: rng.randrange(len(d) + 1)])
            if x:
                x[rng.randrange(len(x))] = rng.choice(alphabet)
            if rng.random() < 0.3:
                x.insert(rng.randrange(len(x) + 1), rng.choice(alphabet))
            out.append(bytes(x))
    return out


def test_fast_path_agrees_with_the_tokenizer() -> None:
    """parse decides from json's error position; the iterative tokenizer decides token by token."""
    import codecs

    for data in _cases():
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            text = decoder.decode(data, final=False)
        except UnicodeDecodeError:
            continue
        scanned = trainer_state.scan(text, bool(decoder.getstate()[0]))
        want = {"complete": "complete", "prefix": "incomplete"}.get(scanned, "fault")
        assert verdict(data) == want, data
