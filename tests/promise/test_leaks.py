"""Nothing a message shows leaks a credential, a URL password, or a line break.

The servers here are loopback stubs that misbehave the way a debugging proxy or a chatty store does: every
error echoes the request (headers and body), which no real server does.  The Vault source behind the S3 one
is a real OpenBao.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout
from tests.conftest import Result, remember_secret, run_cli
from tests.support.netfixtures import _Base, _Running
from tests.support.vault_server import Bao

AK = "AKIALEAKTESTKEYQWERTY"
SK = "leak-secret-key/abcdefghij+klmnopqrstu"
TOKEN = "FwoGZXIvYXdzLEAKTESTsessiontokenZXhhbXBsZQ/with+slash=="
remember_secret(AK, SK, TOKEN)


def fragments(secret: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7)]


def assert_no_piece(text: str, *secrets: str) -> None:
    for s in secrets:
        for piece in fragments(s):
            assert piece not in text, f"{piece!r} of a secret in {text!r}"


# ------------------------------------------------------------------------------------- S3 that echoes


class _EchoS3Handler(_Base):
    """Answers every request with 403 AccessDenied whose Message holds all the request's headers and body."""

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        echo = "; ".join(f"{k}: {v}" for k, v in self.headers.items()) + " body: " + body.decode("latin-1")
        echo = echo.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        data = f"<Error><Code>AccessDenied</Code><Message>{echo}</Message></Error>".encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amz-error-message", self.headers.get("Authorization", ""))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


class EchoS3(_Running):
    handler = _EchoS3Handler

    def __init__(self) -> None:
        super().__init__(None)


def secret_dir(base: Path, **fields: str) -> str:
    d = base / "s3creds"
    d.mkdir()
    for name, value in fields.items():
        (d / name).write_text(value + "\n")
    return f"secret:{d}"


@pytest.mark.parametrize("verb", ["resolve", "probe"])
def test_s3_error_that_echoes_the_request_shows_no_credential(tmp_path: Path, verb: str) -> None:
    with EchoS3() as s3:
        creds = secret_dir(
            tmp_path, access_key_id=AK, secret_access_key=SK, session_token=TOKEN, endpoint=s3.url
        )
        r = run_cli(verb, "-checkpoint", "s3://bkt/run", "-creds", creds, "-timeout", "20s")
    assert r.code == 1, r
    assert "AccessDenied" in r.err, r.err
    assert "[redacted]" in r.err, r.err  # the echo came back, and was scrubbed
    assert_no_piece(r.out + r.err, AK, SK, TOKEN)
    assert len(r.err.splitlines()) == 1, r.err


# ---------------------------------------------------------------------------------- Vault that echoes


class _EchoVaultHandler(_Base):
    """Answers every request with HTTP 400 and two error entries that split the request body so that a
    credential straddles both entries and the 300-character cut of the message."""

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = (self.rfile.read(length) if length else b"").decode()
        owner: EchoVault = self.server.owner
        at = body.find(owner.split_in) + owner.split_at if owner.split_in in body else len(body) // 2
        first = body[:at]
        # "; " joins the entries; the message keeps 300 characters: 10 of the second entry's.
        first = "x" * max(0, 300 - 2 - 10 - len(first)) + first
        data = json.dumps(
            {"errors": [first, body[at:] + " " + self.headers.get("X-Vault-Token", "")]}
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = _any


class EchoVault(_Running):
    handler = _EchoVaultHandler

    def __init__(self, split_in: str, split_at: int = 12) -> None:
        self.split_in, self.split_at = split_in, split_at
        super().__init__(None)


ROLE_ID = "3f1c9e0a-7b2d-4c59-9e8f-roleidLEAKTEST"
SECRET_ID = "9d2b7c41-55aa-4e0f-b3c2-secretidLEAKTEST"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWFrdGVzdCJ9.c2lnbmF0dXJlTEFLVEVTVHNpZ25hdHVyZQ"
remember_secret(ROLE_ID, SECRET_ID, JWT)


def approle_dir(base: Path) -> Path:
    d = base / "approle"
    d.mkdir(mode=0o700)
    for name, value in (("role_id", ROLE_ID), ("secret_id", SECRET_ID)):
        (d / name).write_text(value + "\n")
        os.chmod(d / name, 0o600)
    return d


def run_vault(location: str) -> Result:
    return run_cli("resolve", "-checkpoint", "s3://bkt/run", "-creds", f"vault:{location}", "-timeout", "20s")


@pytest.mark.parametrize("split_in", [SECRET_ID, ROLE_ID])
def test_vault_errors_that_echo_the_login_show_no_piece_of_it(tmp_path: Path, split_in: str) -> None:
    d = approle_dir(tmp_path)
    with EchoVault(split_in) as v:
        r = run_vault(f"{v.url}/team/s3?auth=approle&approle={d}")
    assert r.code == 1, r
    assert "denied (HTTP 400)" in r.err, r.err
    assert_no_piece(r.out + r.err, ROLE_ID, SECRET_ID)


def test_vault_errors_that_echo_the_service_account_token(tmp_path: Path) -> None:
    jwt = tmp_path / "token"
    jwt.write_text(JWT)
    with EchoVault(JWT, split_at=30) as v:
        r = run_vault(f"{v.url}/team/s3?auth=kubernetes&role=r&jwt={jwt}")
    assert r.code == 1, r
    assert_no_piece(r.out + r.err, JWT)


@pytest.mark.vault
def test_real_openbao_credentials_echoed_by_the_store(bao: Bao, tmp_path: Path) -> None:
    """Credentials read from a real OpenBao (approle) and then echoed by the store: no piece shown."""
    bao.write_kv("leak/s3", {"access_key_id": AK, "secret_access_key": SK, "session_token": TOKEN})
    ids = bao.make_approle(tmp_path / "approle", read=["secret/data/leak/s3"])
    remember_secret(ids["role_id"], ids["secret_id"])
    with EchoS3() as s3:
        bao.write_kv(
            "leak/s3",
            {"access_key_id": AK, "secret_access_key": SK, "session_token": TOKEN, "endpoint": s3.url},
        )
        r = run_vault(f"{bao.address}/leak/s3?auth=approle&approle={tmp_path / 'approle'}")
    assert r.code == 1 and "AccessDenied" in r.err, r
    assert_no_piece(r.out + r.err, AK, SK, TOKEN, ids["role_id"], ids["secret_id"])


# --------------------------------------------------------------------------------- URL passwords


PASSWORD = "hunter2pwLEAK"


@pytest.mark.parametrize(
    "location",
    [
        f"https:/u:{PASSWORD}@h/team/s3?auth=approle&approle=/x",
        f"https:u:{PASSWORD}@h/team/s3?auth=approle&approle=/x",
        f"u:{PASSWORD}@h/team/s3?auth=approle&approle=/x",
        f"https://{PASSWORD}@h/team/s3?auth=approle&approle=/x",
        f"https://u:{PASSWORD}@h/team/s3?auth=approle&approle=/x",
        f"https://h/team/s3?auth=approle&approle=/x&proxy=http:/u:{PASSWORD}@p:3128",
        f"https://h/team/s3?auth=approle&approle=/x&proxy=http%3A%2F%2F{PASSWORD}%40p%3A3128",
    ],
)
def test_malformed_vault_location_never_shows_the_password(location: str) -> None:
    r = run_vault(location)
    assert r.code == 1, r
    assert r.err.startswith("publish: credentials: vault:"), r.err
    assert PASSWORD not in r.err


@pytest.mark.parametrize(
    "root",
    [f"https:/u:{PASSWORD}@h/x", f"ftp://{PASSWORD}@h/x", f"s3:/u:{PASSWORD}@bkt/x", f"https:u:{PASSWORD}@h"],
)
def test_malformed_root_never_shows_the_password(root: str, tmp_path: Path) -> None:
    r = run_cli("resolve", "-checkpoint", root, "-creds", "secret:/nope", cwd=tmp_path)
    assert r.code != 0, r
    assert PASSWORD not in r.err, r.err


@pytest.mark.parametrize(
    "proxy", [f"http:/u:{PASSWORD}@p:3128", f"http://{PASSWORD}@p:3128/x", f"u:{PASSWORD}@p"]
)
def test_malformed_proxy_never_shows_the_password(proxy: str) -> None:
    r = run_cli("resolve", "-checkpoint", "s3://bkt/x", "-creds", "secret:/nope", "-proxy", proxy)
    assert r.code == 2, r
    assert "for flag -proxy" in r.err
    assert PASSWORD not in r.err, r.err


# ------------------------------------------------------------------------------ control characters


def one_line(r: Result) -> str:
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    return lines[0]


def test_entry_named_with_a_newline_is_one_quoted_line(tmp_path: Path) -> None:
    (tmp_path / "pub").mkdir()
    (tmp_path / "pub" / "bad\npublish: forged line").write_text("")
    r = run_cli("resolve", "-checkpoint", str(tmp_path))
    assert r.code == 1, r
    line = one_line(r)
    assert f'"{tmp_path}/pub/bad\\npublish: forged line": not a publication entry' in line, line


def test_entry_with_an_escape_sequence(tmp_path: Path) -> None:
    (tmp_path / "pub").mkdir()
    (tmp_path / "pub" / "x\x1b[2K\rok").write_text("")
    r = run_cli("resolve", "-checkpoint", str(tmp_path))
    line = one_line(r)
    assert "\x1b" not in line and "\r" not in line
    assert '/pub/x\\x1b[2K\\rok"' in line, line


def test_plain_entry_names_are_shown_as_before(tmp_path: Path) -> None:
    (tmp_path / "pub").mkdir()
    (tmp_path / "pub" / "junk").write_text("")
    r = run_cli("resolve", "-checkpoint", str(tmp_path))
    assert one_line(r).startswith(f"publish: {tmp_path}/pub/junk: not a publication entry"), r.err


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        (["-attempt", "../\nb"], {}, 'attempt "../\\nb" is not one path element'),
        ([], {"DISPATCH_ATTEMPT": "a/\nb"}, 'attempt "a/\\nb" is not one path element'),
    ],
)
def test_attempt_with_a_newline(tmp_path: Path, args: list[str], env: dict[str, str], shown: str) -> None:
    (tmp_path / "pub").mkdir()
    r = run_cli("watch", "-checkpoint", str(tmp_path), "-framework", "hf", *args, env=env)
    assert r.code == 2, r
    assert shown in r.err.splitlines()[0], r.err
    assert "\nb" not in r.err


def test_epoch_variable_with_a_newline(tmp_path: Path) -> None:
    (tmp_path / "exec" / "A" / "c").mkdir(parents=True)
    r = run_cli(
        "publish", "-checkpoint", str(tmp_path), "exec/A/c", "1", env={"DISPATCH_EPOCH": "1\nx"}, cwd=tmp_path
    )
    assert r.code == 2, r
    assert 'invalid value "1\\nx" for DISPATCH_EPOCH' in r.err.splitlines()[0], r.err


def test_creds_item_with_a_newline() -> None:
    r = run_cli("resolve", "-checkpoint", "s3://bkt/x", "-creds", "secret:rel\npublish: forged")
    assert r.code == 1, r
    assert (
        one_line(r)
        == 'publish: credentials: "secret:rel\\npublish: forged": the location must be an absolute path'
    )


def test_root_with_a_newline() -> None:
    r = run_cli("resolve", "-checkpoint", "s3://bkt/a\n/../x", "-creds", "secret:/nope")
    assert r.code == 1, r
    assert '"s3://bkt/a\\n/../x": the prefix has' in one_line(r), r.err


def test_s3_key_with_a_newline_in_pub() -> None:
    """S3 keys reach messages through S3Client.where (a pure function: no server needed)."""
    from publish.rules.credentials import Credentials
    from publish.s3.s3client import S3Client

    client: Any = S3Client(Credentials("AKIAWHERETEST000KEY", "x" * 40, endpoint="http://127.0.0.1:9"), "bkt")
    try:
        assert client.where("run/pub/a\nb") == '"s3://bkt/run/pub/a\\nb"'
        assert client.where("run/pub/ab") == "s3://bkt/run/pub/ab"
    finally:
        client.close()


def test_published_line_keeps_its_form(tmp_path: Path) -> None:
    (tmp_path / "exec" / "A" / "c").mkdir(parents=True)
    r = run_cli("publish", "-checkpoint", str(tmp_path), "exec/A/c", "7", cwd=tmp_path)
    assert r.code == 0, r
    name = layout.name(0, 7, "exec/A/c")
    assert r.out == f"published {name} (epoch 0, step 7, {tmp_path}/exec/A/c)\n"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["re\nsolve"], 'publish: unknown verb "re\\nsolve"'),
        (["version", "x\ny"], 'publish: unexpected argument "x\\ny"'),
        (["version", "plain"], "publish: unexpected argument 'plain'"),  # no control character: as before
    ],
)
def test_verb_and_argument_with_a_newline(args: list[str], shown: str) -> None:
    r = run_cli(*args)
    assert r.code == 2, r
    assert r.err.splitlines()[0] == shown, r.err
