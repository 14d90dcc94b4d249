"""publish.rules.redact: URL userinfo however malformed, every long-enough piece of a secret, Go's %q for controls."""

from __future__ import annotations

import random
import re
import string
from pathlib import Path

import pytest

from publish.rules import redact
from tests.conftest import remember_secret, run_cli

SECRET = "Zq7/RedactTestSecretValue+9xKp2mWv4LnB"  # registered by the tests below
remember_secret(SECRET)


@pytest.fixture(autouse=True)
def registered() -> None:
    redact.register(SECRET)


# ------------------------------------------------------------------------------------------------ url


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("https://u:pw@h/x", "https://u:xxxxx@h/x"),
        ("https://TOKEN@host/x", "https://xxxxx@host/x"),  # a lone token is a secret too
        ("https://TOKEN@host", "https://xxxxx@host"),
        ("vault:https://u:pw@h/s?auth=approle", "vault:https://u:xxxxx@h/s?auth=approle"),
        ("vault:https:/u:pw@h/s?auth=approle", "vault:https:/u:xxxxx@h/s?auth=approle"),  # one slash
        ("vault:https:u:pw@h/s", "vault:https:u:xxxxx@h/s"),  # no slash
        ("vault:u:pw@h/s", "vault:u:xxxxx@h/s"),  # no scheme at all
        ("vault:https:///u:pw@h/s", "vault:https:///u:xxxxx@h/s"),  # three slashes
        ("https:\\\\u:pw@h\\s", "https:\\\\u:xxxxx@h\\s"),  # backslashes
        ("HTTPS://u:pw@h", "HTTPS://u:xxxxx@h"),
        ("http://u:p:w:x@h:80/", "http://u:xxxxx@h:80/"),  # extra colons
        ("http://u:p@w@h/", "http://u:xxxxx@h/"),  # @ in the password: the last @ counts
        ("http://u@x:p@w@h/", "http://u@x:xxxxx@h/"),  # the user name ends at the first colon
        ("http://u:p?w#x@h/s?a=b", "http://u:xxxxx@h/s?a=b"),  # ? and # inside the password
        ("https://u%3Apw@h", "https://xxxxx@h"),  # an escaped colon: all of it may be the password
        ("https://u:p%40w@h", "https://u:xxxxx@h"),
        ("https://:pw@h", "https://:xxxxx@h"),
        ("https://@h", "https://xxxxx@h"),
        ("s3://bucket/a@b/c", "s3://bucket/a@b/c"),  # @ in the path is no userinfo
        # A "/" or "\\" in the password ends the authority as RFC 3986 reads it; hidden all the same.
        ("http://u:Pa/ssWord@h:1/x", "http://u:xxxxx@h:1/x"),
        ("http://u:Pa\\ssWord@h:1/x", "http://u:xxxxx@h:1/x"),
        ("s3://u:Sec\\retPw@bucket/p", "s3://u:xxxxx@bucket/p"),
        ("vault:http://u:Pa/ss@h/team?auth=approle", "vault:http://u:xxxxx@h/team?auth=approle"),
        ("s3://bucket/run@v2/x", "s3://bucket/run@v2/x"),  # no ":" before the "@": a path
        ("https://h/s?x=a@b", "https://h/s?x=a@b"),
        ("/posix/a@b", "/posix/a@b"),  # not a URL
        ("plain", "plain"),
        (
            "vault:https://v/s?auth=kubernetes&proxy=http%3A%2F%2Fu%3Apw%40p%3A3128",
            "vault:https://v/s?auth=kubernetes&proxy=http%3A%2F%2Fu%3Axxxxx%40p%3A3128",
        ),
        (
            "vault:https://v/s?proxy=http://u:pw@p:3128&a=b",
            "vault:https://v/s?proxy=http://u:xxxxx@p:3128&a=b",
        ),
        ("vault:https://v/s?proxy=http:/u:pw@p:3128", "vault:https://v/s?proxy=http:/u:xxxxx@p:3128"),
        ("vault:https://v/s?proxy=http%3Au%3Apw%40p", "vault:https://v/s?proxy=http%3Au%3Axxxxx%40p"),
        # However malformed: whatever comes before the userinfo, spaces, tabs, several @, escapes.
        (" u:PW@h", " u:xxxxx@h"),
        ("\u00e9u:PW@h", "\u00e9u:xxxxx@h"),
        ("1u:PW@h", "1u:xxxxx@h"),
        ("-u:PW@h", "-u:xxxxx@h"),
        ("\tu:PW@h", "\tu:xxxxx@h"),
        ("  http://u:PW@h", "  http://u:xxxxx@h"),
        ("http://u:P\tW@h", "http://u:xxxxx@h"),
        ("http://a@b:PW@c@h", "http://a@b:xxxxx@h"),
        ("PW@h", "xxxxx@h"),
        ("http://u:PW%40h", "http://u:xxxxx%40h"),
        ("http://u:P%40W@h", "http://u:xxxxx@h"),
        ("http%3A%2F%2Fu%3APW%40h", "http%3A%2F%2Fxxxxx%40h"),
        ("http://u:P%2FW@h/x", "http://u:xxxxx@h/x"),
        ("vault:https://v/s?proxy=PW@p", "vault:https://v/s?proxy=xxxxx@p"),
    ],
)
def test_url(text: str, want: str) -> None:
    assert redact.url(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("proxy http://u:pw@p:3128 refused", "proxy http://u:xxxxx@p:3128 refused"),
        ("a https://TOKEN@h/x and s3://b/k@x", "a https://xxxxx@h/x and s3://b/k@x"),
        ("no url a@b", "no url a@b"),
    ],
)
def test_urls_in_free_text(text: str, want: str) -> None:
    assert redact.urls_in(text) == want


# ------------------------------------------------------------------------------------------------ scrub


def test_whole_secret() -> None:
    assert redact.scrub(f"the key {SECRET} was refused") == "the key [redacted] was refused"


@pytest.mark.parametrize("size", [8, 9, 13, 20, len(SECRET) - 1])
def test_every_fragment_of_eight_or_more(size: int) -> None:
    for start in range(len(SECRET) - size + 1):
        piece = SECRET[start : start + size]
        out = redact.scrub(f"<{piece}>")
        assert out == "<[redacted]>", (piece, out)


def test_a_piece_of_seven_stays() -> None:
    assert redact.scrub(f"<{SECRET[:7]}>") == f"<{SECRET[:7]}>"


def test_two_pieces_in_one_message_and_text_between_kept() -> None:
    msg = f"a {SECRET[:10]} b {SECRET[20:31]} c"
    assert redact.scrub(msg) == "a [redacted] b [redacted] c"


def test_adjacent_pieces_are_one_span() -> None:
    assert redact.scrub(SECRET[5:15] + SECRET[1:12]) == "[redacted]"


def test_short_secret_replaced_whole() -> None:
    redact.register("s3kr")
    assert redact.scrub("x s3kr y") == "x [redacted] y"


def test_random_messages_never_keep_a_piece() -> None:
    rng = random.Random(3)
    secrets = [
        "".join(rng.choice(string.ascii_letters + string.digits + "/+=") for _ in range(40)) for _ in range(5)
    ]
    redact.register(*secrets)
    remember_secret(*secrets)
    for _ in range(300):
        parts = []
        for _ in range(rng.randrange(1, 6)):
            s = rng.choice(secrets)
            a = rng.randrange(len(s) - 8)
            parts.append(s[a : rng.randrange(a + 8, len(s) + 1)])
            parts.append("".join(rng.choice(" ;:,<>") for _ in range(rng.randrange(0, 3))))
        out = redact.scrub("".join(parts))
        for s in secrets:
            for i in range(len(s) - 7):
                assert s[i : i + 8] not in out


def test_scrub_is_linear() -> None:
    """A long message with many near-misses takes one pass (no timing: counts the work via a big input)."""
    text = (SECRET[:7] + "#") * 100_000
    assert redact.scrub(text) == text


# ------------------------------------------------------------------------------------------------ shown


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("plain", "plain"),
        ("caf\u00e9 \u4e2d", "caf\u00e9 \u4e2d"),
        ('with "quotes" and \\', 'with "quotes" and \\'),  # no control character: as it is
        ("a\nb", '"a\\nb"'),
        ("a\rb\tc", '"a\\rb\\tc"'),
        ("\x1b[31mred", '"\\x1b[31mred"'),
        ("\x7f", '"\\x7f"'),
        ("\x85", '"\\u0085"'),
        ("a\u2028b", '"a\\u2028b"'),
        ("exec/\u202etxt.pt", '"exec/\\u202etxt.pt"'),  # shown, it reads "exec/tp.txt"
        ("\u2066a\u2069\u200f\u061c", '"\\u2066a\\u2069\\u200f\\u061c"'),
        ("zero\u200bwidth\u00a0space", "zero\u200bwidth\u00a0space"),  # not a control: as it is
        ('q"\n', '"q\\"\\n"'),
        ("\a\b\f\v\x00", '"\\a\\b\\f\\v\\x00"'),
    ],
)
def test_shown(value: str, want: str) -> None:
    assert redact.shown(value) == want


def test_line_is_one_line_and_nothing_else_changes() -> None:
    """The last guard on a printed line escapes a raw control character and alters nothing else: data that
    overlaps a registered value, or looks like a URL with a password, is printed as it is (section 14)."""
    redact.register("00000000")
    data = "published 00000000000000000000-00000000000000000005-MV4G (s3://b/x:y@z/exec)"
    assert redact.line(data) == data
    out = redact.line("entry x\nforged publish: ok")
    assert out == "entry x\\nforged publish: ok"


# ------------------------------------------------------------------------------------------ foreign


def test_foreign_text_is_scrubbed_ignoring_case() -> None:
    said = f"denied: {SECRET.upper()} and {SECRET.lower()[3:20]} by proxy https://u:pw@p/"
    assert redact.foreign(said) == "denied: [redacted] and [redacted] by proxy https://u:xxxxx@p/"


def test_foreign_replaces_a_short_value_whole_ignoring_case() -> None:
    redact.register("s3kr")
    assert redact.foreign("x S3KR y s3Kr") == "x [redacted] y [redacted]"


def test_a_name_is_not_scrubbed_where_a_message_names_it() -> None:
    """PublishError keeps its message: the name of a thing is exact even when a value overlaps it."""
    from publish.rules.errors import CredentialsError, StoreError

    redact.register("checkpoint")
    e = StoreError("NoSuchBucket", op="list", thing="s3://b/run/exec/A/checkpoint-5")
    assert str(e) == "store: list s3://b/run/exec/A/checkpoint-5: NoSuchBucket"
    c = CredentialsError("no such directory", "file:/creds/checkpoint")
    assert (c.source, str(c)) == (
        "file:/creds/checkpoint",
        "credentials: file:/creds/checkpoint: no such directory",
    )


def test_an_s3_error_is_scrubbed_where_it_comes_in_and_a_code_acted_on_is_kept() -> None:
    from publish.s3 import s3xml

    redact.register("AKIAECHOKEY0001", "NoSuchKey-and-more")
    body = b"<Error><Code>NoSuchKey</Code><Message>key akiaechokey0001 refused</Message></Error>"
    assert s3xml.error_of(404, {}, body) == ("NoSuchKey", "key [redacted] refused")
    body = b"<Error><Code>AKIAECHOKEY0001</Code></Error>"
    assert s3xml.error_of(403, {}, body)[0] == "[redacted]"
    assert s3xml.error_of(403, {"x-amz-error-message": "AKIAECHOKEY0001"}, b"")[1] == "[redacted]"


# --------------------------------------------------------------------- a password cut by a separator

PASSWORDS = {
    "comma": "Hunter2Hunter2,rest",
    "proxy-comma": "ProxyPass99,zz",
    "proxy-amp": "ab&LongPassword123",
    "slash": "Pa/ssWord123",
    "backslash": "Pass\\ssWord123",
}
for _password in PASSWORDS.values():
    remember_secret(_password)


def _pieces(secret: str) -> list[str]:
    return [p for part in re.split(r"[,&/\\]", secret) if len(part) >= 4 for p in (part,)]


@pytest.mark.parametrize(
    ("case", "argv"),
    [
        ("comma", ["-creds", "vault:http://user:{pw}@127.0.0.1:1/team/s3?auth=approle&approle=/x"]),
        (
            "proxy-comma",
            [
                "-creds",
                "vault:http://127.0.0.1:1/team/s3?auth=approle&approle=/x&proxy=http://pu:{pw}@127.0.0.1:2",
            ],
        ),
        (
            "proxy-amp",
            ["-creds", "vault:http://127.0.0.1:1/team/s3?auth=approle&approle=/x&proxy=http://u:{pw}@p"],
        ),
        ("comma", ["-creds", "secret:/x,vault:http://u:{pw}@h/p?auth=approle&approle=/x"]),
        ("slash", ["-creds", "vault:http://user:{pw}@127.0.0.1:1/team/s3?auth=approle&approle=/x"]),
        ("backslash", ["-creds", "vault:http://user:{pw}@h/team?auth=approle&approle=/x"]),
        ("backslash", ["-creds", "secret:/x", "-proxy", "http://u:{pw}@p:1"]),
        ("slash", ["-creds", "secret:/x", "-proxy", "http://u:{pw}@p:1"]),
    ],
)
def test_no_piece_of_a_malformed_urls_password_is_shown(case: str, argv: list[str]) -> None:
    """The password of a URL that a "," of the -creds list, an "&" of a query, or a "/" or "\\" cuts short
    is never shown, whole or in pieces of 4 characters or more."""
    password = PASSWORDS[case]
    args = [a.replace("{pw}", password) for a in argv]
    r = run_cli("resolve", "-checkpoint", "s3://bucket/p", *args)
    assert r.code in (1, 2), r
    assert r.err.startswith("publish: "), r.err
    for piece in _pieces(password):
        assert piece not in r.out + r.err, (piece, r.err)


PROXY_PASSWORD = "PWproxy0123456"
remember_secret(PROXY_PASSWORD)


@pytest.mark.parametrize(
    "proxy",
    [
        "u:{pw}@h",
        " u:{pw}@h",
        "\u00e9u:{pw}@h",
        "1u:{pw}@h",
        "-u:{pw}@h",
        "\tu:{pw}@h",
        "u:{pw}@h\t",
        "http://u:{pw}@h@x",
        "http://a@b:{pw}@h",
        "http://u:{pw}%40h",
        "http%3A%2F%2Fu%3A{pw}%40h",
        "{pw}@h",
        " http://u:{pw}@h:3128",
        "http://u:{pw}/x@h",
    ],
)
def test_no_proxy_spelling_shows_its_password(proxy: str) -> None:
    value = proxy.replace("{pw}", PROXY_PASSWORD)
    r = run_cli("resolve", "-checkpoint", "s3://bucket/p", "-creds", "secret:/x", "-proxy", value)
    assert r.code == 2, r
    assert "for flag -proxy" in r.err, r.err
    assert PROXY_PASSWORD[:4] not in r.out + r.err, r.err


@pytest.mark.parametrize("flag", ["-timeout", "-keep"])
def test_a_url_given_to_another_flag_is_echoed_without_its_password(flag: str) -> None:
    r = run_cli("prune", "-checkpoint", "s3://bucket/p", flag, f" http://u:{PROXY_PASSWORD}@h")
    assert r.code == 2, r
    assert PROXY_PASSWORD[:4] not in r.out + r.err, r.err
    assert "xxxxx" in r.err, r.err


@pytest.mark.parametrize("checkpoint", ["s3://u:Sec\\retPw123@bucket/p", "s3://u:Sec/retPw123@bucket/p"])
def test_no_password_of_a_malformed_s3_root_is_shown(checkpoint: str) -> None:
    r = run_cli("resolve", "-checkpoint", checkpoint, "-creds", "secret:/x")
    assert r.code == 1, r
    assert "retPw123" not in r.err and "Sec" not in r.err.split(":", 2)[-1], r.err


# ------------------------------------------------------------------------- a proxy's answer to CONNECT


def test_a_proxys_reason_phrase_is_scrubbed_ignoring_case(tmp_path: Path) -> None:
    """The reason a proxy gives for refusing CONNECT is its own text: a credential echoed there, in any
    case, is scrubbed where it comes in."""
    from publish.http import net
    from tests.support.netfixtures import Proxy, Server, TestCA

    ca = TestCA(tmp_path)
    with Server(tls=ca) as server, Proxy(refuse=407, reason=f"denied {SECRET.upper()}") as proxy:
        c = net.Connector(server.url, proxy=proxy.url, cafile=ca.pem)
        with pytest.raises(net.ProxyRefused) as info:
            c.request("GET", "/echo", {}, timeout=5)
    assert (
        str(info.value)
        == f"proxy {proxy.url} refused CONNECT to 127.0.0.1:{server.port}: 407 denied [redacted]"
    )
