"""The -creds list, the field rules, and the secret: and file: sources."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from publish.creds.directory import MAX_FILE, DirectorySource
from publish.creds.fields import NotAnswering
from publish.creds.sources import parse_sources, resolve
from publish.rules.errors import CredentialsError, Failure

AK = "AKIAEXAMPLEKEY0001"
SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
VA = "vault:http://127.0.0.1:1/p?auth=approle&approle=/x"
GOOD = {"access_key_id": AK, "secret_access_key": SK}


def write_dir(path: Path, fields: dict[str, str], dir_mode: int = 0o700, file_mode: int = 0o600) -> Path:
    """A file:-style directory holding one file per field (values written as given)."""
    path.mkdir(parents=True, exist_ok=True)
    for name, value in fields.items():
        (path / name).write_text(value)
        os.chmod(path / name, file_mode)
    os.chmod(path, dir_mode)
    return path


def write_kubelet(path: Path, fields: dict[str, str], stamp: str = "..2024_01_01_00_00_00.123456789") -> Path:
    """The layout the kubelet gives a Secret volume: a timestamped folder, ..data linking to it, and one
    link per field into ..data."""
    path.mkdir(parents=True, exist_ok=True)
    (path / stamp).mkdir()
    for name, value in fields.items():
        (path / stamp / name).write_text(value)
        os.chmod(path / stamp / name, 0o644)
    os.symlink(stamp, path / "..data")
    for name in fields:
        os.symlink(f"..data/{name}", path / name)
    os.chmod(path, 0o755)
    return path


def fetch(kind: str, path: Path) -> object:
    return DirectorySource(kind, str(path)).fetch({}, None)


def refused(kind: str, path: Path) -> str:
    with pytest.raises(CredentialsError) as e:
        fetch(kind, path)
    message = str(e.value)
    assert message.startswith(f"credentials: {kind}:{path}: "), message
    for secret in (AK, SK, TOKEN):
        assert secret not in message
    return message


# ------------------------------------------------------------------------------------- the list


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("", "the -creds list is empty"),
        ("secret:/a,,file:/b", "an empty item"),
        (",secret:/a", "an empty item"),
        ("secret:/a,", "an empty item"),
        ("gs:/a", "unknown source kind 'gs'"),
        ("secret", "secret: not a kind:location source"),
        ("/var/run/secrets/x", "not a kind:location source"),
        ("Secret:/a", "unknown source kind 'Secret'"),
        (" secret:/a", "unknown source kind ' secret'"),
        ("secret:relative/dir", "secret:relative/dir: the location must be an absolute path"),
        ("file:~/x", "must be an absolute path"),
        ("file:", "must be an absolute path"),
        ("secret:/a,secret:/a", "secret:/a: the same source is listed twice"),
        ("file:/a/b,file:/a//b/", "the same source is listed twice"),
        ("file:/a,file:/a/./", "the same source is listed twice"),
        (f"{VA},{VA}", "the same source is listed twice"),
        ("secret:/a\0b", "NUL"),
    ],
)
def test_list_refused(spec: str, words: str) -> None:
    with pytest.raises(CredentialsError) as e:
        parse_sources(spec)
    assert str(e.value).startswith("credentials: ")
    assert words in str(e.value)
    # A credentials error is a run-time failure (exit 1), never a usage error.
    assert isinstance(e.value, Failure) and e.value.exit_code == 1


def test_list_parses_in_order() -> None:
    sources = parse_sources(
        "secret:/a,file:/a,secret:/b,vault:https://v.example:8200/t/s3?auth=kubernetes&role=r"
    )
    assert [s.text for s in sources] == [
        "secret:/a",
        "file:/a",
        "secret:/b",
        "vault:https://v.example:8200/t/s3?auth=kubernetes&role=r",
    ]


def test_empty_list_is_checked_before_any_source(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="empty"):
        resolve("", {}, None)


# ---------------------------------------------------------------------------------- resolution


def test_first_source_that_answers_wins(tmp_path: Path) -> None:
    write_dir(tmp_path / "b", {**GOOD, "region": "eu-west-1"})
    write_dir(tmp_path / "c", {"access_key_id": "OTHER", "secret_access_key": "OTHER"})
    spec = f"secret:{tmp_path}/a,file:{tmp_path}/b,file:{tmp_path}/c"
    creds, text = resolve(spec, {}, 5.0)
    assert text == f"file:{tmp_path}/b"
    assert (creds.access_key_id, creds.secret_access_key, creds.region) == (AK, SK, "eu-west-1")


def test_no_source_answered_names_each(tmp_path: Path) -> None:
    spec = f"secret:{tmp_path}/a,file:{tmp_path}/b,file:{tmp_path}/nofile/c"
    (tmp_path / "nofile").write_text("")
    with pytest.raises(CredentialsError) as e:
        resolve(spec, {}, None)
    assert str(e.value) == (
        f"credentials: no source answered: secret:{tmp_path}/a: no such directory; "
        f"file:{tmp_path}/b: no such directory; file:{tmp_path}/nofile/c: no such directory"
    )


def test_refused_source_stops_the_run(tmp_path: Path) -> None:
    write_dir(tmp_path / "a", {**GOOD, "colour": "blue"})
    write_dir(tmp_path / "b", GOOD)
    with pytest.raises(CredentialsError) as e:
        resolve(f"file:{tmp_path}/a,file:{tmp_path}/b", {}, None)
    assert str(e.value).startswith(f"credentials: file:{tmp_path}/a: unknown file 'colour'")


def test_refusal_carries_the_source_and_the_fault_as_fields(tmp_path: Path) -> None:
    write_dir(tmp_path / "a", {**GOOD, "region": "EU"})
    with pytest.raises(CredentialsError) as e:
        resolve(f"file:{tmp_path}/a", {}, None)
    assert (e.value.source, e.value.why) == (
        f"file:{tmp_path}/a",
        "region 'EU' is malformed; want lower-case letters, digits and -",
    )
    assert str(e.value) == f"credentials: {e.value.source}: {e.value.why}"
    with pytest.raises(CredentialsError) as e:
        parse_sources("")
    assert (e.value.source, e.value.why, str(e.value)) == (
        "",
        "the -creds list is empty",
        "credentials: the -creds list is empty",
    )


def test_file_source_leaves_vault_and_json_unimported(tmp_path: Path) -> None:
    """A file: source resolves without loading the Vault client or json (start-up of an S3 verb)."""
    import subprocess
    import sys

    d = write_dir(tmp_path / "d", GOOD)
    code = (
        "import sys\n"
        "from publish.creds.sources import resolve\n"
        f"resolve('file:{d}', {{}}, None)\n"
        "print(sorted(m for m in ('json', 'publish.creds.vault', 'dataclasses') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == "[]\n"


def test_credentials_are_a_frozen_hashable_value(tmp_path: Path) -> None:
    import copy
    import pickle

    creds = fetch("file", write_dir(tmp_path / "d", GOOD))
    with pytest.raises(AttributeError):
        creds.region = "eu-west-1"  # type: ignore[attr-defined]
    assert hash(creds) == hash(copy.copy(creds)) and creds == pickle.loads(pickle.dumps(creds))
    assert creds != type(creds)(AK, SK + "x")  # type: ignore[call-arg]
    assert repr(creds) == "Credentials(endpoint='https://s3.us-east-1.amazonaws.com', region='us-east-1')"


def test_dangling_source_path_does_not_answer(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone", tmp_path / "link")
    with pytest.raises(NotAnswering, match="no such directory"):
        fetch("secret", tmp_path / "link")


# ------------------------------------------------------------------------------------- fields


def test_all_fields(tmp_path: Path) -> None:
    d = write_dir(
        tmp_path / "d",
        {
            "access_key_id": AK + "\n",
            "secret_access_key": SK,
            "session_token": TOKEN + "\n",
            "endpoint": "http://127.0.0.1:9000\n",
            "region": "eu-central-1",
        },
    )
    creds = fetch("file", d)
    assert creds == type(creds)(AK, SK, TOKEN, "http://127.0.0.1:9000", "eu-central-1")  # type: ignore[call-arg]
    for secret in (AK, SK, TOKEN):
        assert secret not in repr(creds) and secret not in str(creds)


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [(None, "https://s3.us-east-1.amazonaws.com"), ("eu-west-3", "https://s3.eu-west-3.amazonaws.com")],
)
def test_default_endpoint_and_region(tmp_path: Path, region: str | None, endpoint: str) -> None:
    fields = dict(GOOD, **({"region": region} if region else {}))
    creds = fetch("secret", write_dir(tmp_path / "d", fields))
    assert creds.endpoint == endpoint  # type: ignore[attr-defined]
    assert creds.region == (region or "us-east-1")  # type: ignore[attr-defined]
    assert creds.session_token == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("endpoint", "want"),
    [
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("https://s3.example.com", "https://s3.example.com"),
        ("HTTPS://S3.Example.com:8443", "https://s3.example.com:8443"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_endpoint_accepted(tmp_path: Path, endpoint: str, want: str) -> None:
    creds = fetch("secret", write_dir(tmp_path / "d", dict(GOOD, endpoint=endpoint)))
    assert creds.endpoint == want  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "endpoint",
    [
        "s3.example.com",
        "ftp://s3.example.com",
        "http://",
        "http://s3.example.com/bucket",
        "http://s3.example.com?x=1",
        "http://s3.example.com#frag",
        "http://user:hunter2pw@s3.example.com",
        "http://s3.example.com:0",
        "http://s3.example.com:65536",
        "http://s3.example.com:port",
        "http://s3_bad host",
    ],
)
def test_endpoint_refused(tmp_path: Path, endpoint: str) -> None:
    message = refused("secret", write_dir(tmp_path / "d", dict(GOOD, endpoint=endpoint)))
    assert f"secret:{tmp_path / 'd'}: endpoint" in message
    assert "hunter2pw" not in message


@pytest.mark.parametrize("region", ["EU-WEST-1", "eu_west_1", "eu.west", "é"])
def test_region_refused(tmp_path: Path, region: str) -> None:
    assert "region" in refused("file", write_dir(tmp_path / "d", dict(GOOD, region=region)))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"secret_access_key": SK}, "no access_key_id"),
        ({"access_key_id": AK}, "no secret_access_key"),
        ({}, "no access_key_id"),
        (dict(GOOD, access_key_id=""), "access_key_id is empty"),
        (dict(GOOD, access_key_id="\n"), "access_key_id is empty"),
        (dict(GOOD, secret_access_key=SK + "\n\n"), "secret_access_key holds whitespace"),
        (dict(GOOD, secret_access_key=SK + " "), "secret_access_key holds whitespace"),
        (dict(GOOD, secret_access_key=" " + SK), "secret_access_key holds whitespace"),
        (dict(GOOD, secret_access_key=SK[:5] + "\t" + SK[5:]), "secret_access_key holds whitespace"),
        (dict(GOOD, secret_access_key=SK + "\r\n"), "secret_access_key holds whitespace"),
        (dict(GOOD, session_token=TOKEN + "\u00a0"), "session_token holds whitespace"),
        (dict(GOOD, session_token=TOKEN + "\x01"), "session_token holds a control character"),
        (dict(GOOD, session_token=""), "session_token is empty"),
        (dict(GOOD, region=""), "region is empty"),
        (dict(GOOD, endpoint=""), "endpoint is empty"),
    ],
)
def test_bad_values_refused(tmp_path: Path, fields: dict[str, str], words: str) -> None:
    message = refused("file", write_dir(tmp_path / "d", fields))
    assert words in message


@pytest.mark.parametrize("name", ["colour", ".hidden", "ACCESS_KEY_ID", "access_key_id.bak", "...ignored"])
def test_unknown_file_refused(tmp_path: Path, name: str) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    if name.startswith(".."):
        # Names starting with .. are the kubelet's and are ignored.
        (d / name).write_text("x")
        assert fetch("secret", d).access_key_id == AK  # type: ignore[attr-defined]
        return
    (d / name).write_text("x")
    os.chmod(d / name, 0o600)
    assert f"unknown file {name!r}" in refused("secret", d)
    assert f"unknown file {name!r}" in refused("file", d)


def test_not_utf8_refused(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    (d / "region").write_bytes(b"\xff\xfe")
    assert "region is not UTF-8" in refused("secret", d)


def test_large_file_refused(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", dict(GOOD, session_token="x" * (MAX_FILE + 1)))
    assert "session_token is larger than" in refused("file", d)
    d2 = write_dir(tmp_path / "d2", dict(GOOD, session_token="x" * MAX_FILE))
    assert fetch("file", d2).session_token == "x" * MAX_FILE  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------- secret:


def test_secret_kubelet_layout(tmp_path: Path) -> None:
    d = write_kubelet(tmp_path / "vol", dict(GOOD, session_token=TOKEN, region="eu-north-1"))
    creds = fetch("secret", d)
    assert (creds.access_key_id, creds.session_token, creds.region) == (AK, TOKEN, "eu-north-1")  # type: ignore[attr-defined]


def test_secret_modes_and_owner_not_checked(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", GOOD, dir_mode=0o755, file_mode=0o644)
    os.chown(d, 12345, 12345)
    os.chown(d / "access_key_id", 12345, 12345)
    assert fetch("secret", d).access_key_id == AK  # type: ignore[attr-defined]


def test_secret_directory_may_be_a_link(tmp_path: Path) -> None:
    write_kubelet(tmp_path / "vol", GOOD)
    os.symlink(tmp_path / "vol", tmp_path / "link")
    assert fetch("secret", tmp_path / "link").secret_access_key == SK  # type: ignore[attr-defined]


def test_secret_link_to_another_field_inside(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", {"access_key_id": AK})
    os.symlink("access_key_id", d / "secret_access_key")
    assert fetch("secret", d).secret_access_key == AK  # type: ignore[attr-defined]


@pytest.mark.parametrize("relative", [True, False])
def test_secret_link_escaping_refused(tmp_path: Path, relative: bool) -> None:
    (tmp_path / "outside").write_text(SK)
    d = write_dir(tmp_path / "d", {"access_key_id": AK})
    os.symlink("../outside" if relative else str(tmp_path / "outside"), d / "secret_access_key")
    assert "secret_access_key links to outside the directory" in refused("secret", d)


def test_secret_data_link_escaping_refused(tmp_path: Path) -> None:
    """A ..data that points outside is not followed either."""
    write_dir(tmp_path / "elsewhere", GOOD)
    d = tmp_path / "vol"
    d.mkdir()
    os.symlink(tmp_path / "elsewhere", d / "..data")
    os.symlink("..data/access_key_id", d / "access_key_id")
    assert "access_key_id links to outside the directory" in refused("secret", d)


def test_secret_link_to_the_directory_itself_refused(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    os.symlink(".", d / "session_token")
    assert "session_token links to outside the directory" in refused("secret", d)


def test_secret_dangling_link_refused(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    os.symlink("..data/session_token", d / "session_token")
    assert "session_token: no such file" in refused("secret", d)


@pytest.mark.parametrize("kind", ["secret", "file"])
def test_not_a_directory_refused(tmp_path: Path, kind: str) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a directory" in refused(kind, tmp_path / "f")


@pytest.mark.parametrize("kind", ["secret", "file"])
def test_field_that_is_a_directory_refused(tmp_path: Path, kind: str) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    (d / "session_token").mkdir(mode=0o700)
    assert "session_token is not a regular file" in refused(kind, d)


@pytest.mark.parametrize("kind", ["secret", "file"])
def test_absent_path_does_not_answer(tmp_path: Path, kind: str) -> None:
    with pytest.raises(NotAnswering, match="no such directory"):
        fetch(kind, tmp_path / "absent")


# --------------------------------------------------------------------------------------- file:


def test_file_private_directory(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", dict(GOOD, session_token=TOKEN))
    assert fetch("file", d).session_token == TOKEN  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", [0o750, 0o710, 0o701, 0o770, 0o755, 0o707])
def test_file_directory_mode_refused(tmp_path: Path, mode: int) -> None:
    d = write_dir(tmp_path / "d", GOOD, dir_mode=mode)
    assert f"the directory grants permissions to group or others (mode {mode:04o})" in refused("file", d)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o644])
def test_file_field_mode_refused(tmp_path: Path, mode: int) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    os.chmod(d / "secret_access_key", mode)
    assert f"secret_access_key grants permissions to group or others (mode {mode:04o})" in refused("file", d)


def test_file_directory_not_owned_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    d = write_dir(tmp_path / "d", GOOD)
    os.chown(d, 12345, -1)
    assert "the directory is owned by uid 12345, not by the running user (uid 0)" in refused("file", d)


def test_file_field_not_owned_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    d = write_dir(tmp_path / "d", GOOD)
    os.chown(d / "access_key_id", 12345, -1)
    assert "access_key_id is owned by uid 12345" in refused("file", d)


def test_file_directory_link_refused(tmp_path: Path) -> None:
    write_dir(tmp_path / "d", GOOD)
    os.symlink(tmp_path / "d", tmp_path / "link")
    assert "is a symbolic link" in refused("file", tmp_path / "link")


def test_file_field_link_refused(tmp_path: Path) -> None:
    """Even a link to a private file inside the directory: a file: source holds plain files only."""
    d = write_dir(tmp_path / "d", {"access_key_id": AK, "region": "eu-west-1"})
    (d / "..keep").mkdir(mode=0o700)
    (d / "..keep" / "sk").write_text(SK)
    os.chmod(d / "..keep" / "sk", 0o600)
    os.symlink("..keep/sk", d / "secret_access_key")
    assert "secret_access_key is a symbolic link" in refused("file", d)


def test_file_ignores_dotdot_names(tmp_path: Path) -> None:
    d = write_dir(tmp_path / "d", GOOD)
    (d / "..data").mkdir(mode=0o755)
    assert fetch("file", d).access_key_id == AK  # type: ignore[attr-defined]


def test_file_kubelet_layout_refused(tmp_path: Path) -> None:
    """The kubelet's links make a Secret volume a secret: source, never a file: one."""
    d = write_kubelet(tmp_path / "vol", GOOD)
    os.chmod(d, 0o700)
    assert "is a symbolic link" in refused("file", d)
