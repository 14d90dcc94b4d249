"""vault: sources: location parsing, the VAULT_* rules, and logins against a real OpenBao."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from publish.creds.fields import NotAnswering
from publish.creds.location import DEFAULT_JWT, Location, parse_location
from publish.creds.sources import parse_sources, resolve
from publish.creds.vault import VaultSource
from publish.rules.errors import CredentialsError
from publish.rules.redact import url as redact
from tests.support.netfixtures import Proxy
from tests.support.ports import free_port
from tests.support.vault_server import Bao

AK = "AKIAVAULTEXAMPLE0001"
SK = "vault-secret-access-key/EXAMPLE+0001"
TOKEN = "vault-session-token-EXAMPLE-0001"
GOOD = {"access_key_id": AK, "secret_access_key": SK}
K8S = "https://vault.example:8200/team/s3?mount=secret&auth=kubernetes&role=training"
APPROLE = "https://vault.example:8200/team/s3?auth=approle&approle=/home/u/.config/vault-approle"


def vault(location: str) -> VaultSource:
    (source,) = parse_sources("vault:" + location)
    assert isinstance(source, VaultSource)
    return source


def refused(source: VaultSource, env: dict[str, str] | None = None, secrets: tuple[str, ...] = ()) -> str:
    with pytest.raises(CredentialsError) as e:
        source.fetch(env or {}, 20.0)
    message = str(e.value)
    assert message.startswith(f"credentials: {source.text}: "), message
    for s in (AK, SK, TOKEN, *secrets):
        assert s not in message, message
    return message


def not_answering(source: VaultSource, env: dict[str, str] | None = None) -> str:
    with pytest.raises(NotAnswering) as e:
        source.fetch(env or {}, 20.0)
    return str(e.value)


# --------------------------------------------------------------------------------------- parsing


def test_parse_kubernetes_example() -> None:
    assert parse_location(K8S) == Location(
        base_url="https://vault.example:8200",
        path=("team", "s3"),
        auth="kubernetes",
        role="training",
        jwt=DEFAULT_JWT,
        authmount="kubernetes",
        mount="secret",
        kv=2,
    )


def test_parse_approle_example() -> None:
    loc = parse_location(APPROLE)
    assert (loc.auth, loc.approle, loc.authmount, loc.role, loc.mount, loc.kv) == (
        "approle",
        "/home/u/.config/vault-approle",
        "approle",
        "",
        "secret",
        2,
    )


def test_parse_every_key() -> None:
    loc = parse_location(
        "http://127.0.0.1:8200/a/b%20c/d?auth=kubernetes&role=r&jwt=/t/jwt&authmount=k8s/prod&mount=kv/team"
        "&kv=1&namespace=admin/team&ca=/etc/vault/ca.pem&proxy=http%3A%2F%2Fproxy.example%3A3128"
    )
    assert loc == Location(
        base_url="http://127.0.0.1:8200",
        path=("a", "b c", "d"),
        auth="kubernetes",
        role="r",
        jwt="/t/jwt",
        authmount="k8s/prod",
        mount="kv/team",
        kv=1,
        namespace="admin/team",
        ca="/etc/vault/ca.pem",
        proxy="http://proxy.example:3128",
    )


def test_parse_host_forms() -> None:
    assert parse_location("HTTPS://[::1]:8200/s?auth=kubernetes&role=r").base_url == "https://[::1]:8200"
    assert parse_location("https://vault/s?auth=kubernetes&role=r").base_url == "https://vault"
    # as Go's net/url reads them: an empty port is the scheme's; a fully qualified name keeps its dot
    assert parse_location("https://vault:/s?auth=kubernetes&role=r").base_url == "https://vault"
    assert parse_location("https://vault.example.:8200/s?auth=kubernetes&role=r").base_url == (
        "https://vault.example.:8200"
    )


@pytest.mark.parametrize(
    ("location", "words"),
    [
        ("https://v:8200/team/s3?auth=kubernetes&role=r&colour=blue", "unknown key 'colour'"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&Mount=kv", "unknown key 'Mount'"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&token=abc", "unknown key 'token'"),
        ("https://v:8200/team/s3?auth=approle&approle=/a&role=r", "the key role is not for auth=approle"),
        ("https://v:8200/team/s3?auth=approle&approle=/a&jwt=/t", "the key jwt is not for auth=approle"),
        (
            "https://v:8200/team/s3?auth=kubernetes&role=r&approle=/a",
            "the key approle is not for auth=kubernetes",
        ),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&role=s", "the key role is given twice"),
        ("https://v:8200/team/s3?auth=kubernetes&auth=kubernetes&role=r", "the key auth is given twice"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&mount=a&mount=a", "the key mount is given twice"),
        ("https://v:8200/team/s3?auth=kubernetes&role=", "the key role has no value"),
        ("https://v:8200/team/s3?auth=kubernetes&role", "the key role has no value"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&mount=", "the key mount has no value"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&&mount=kv", "an empty key"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&", "an empty key"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r%2", "a bad % escape"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r%zz", "a bad % escape"),
        ("https://v:8200/team/s3?auth=kubernetes&ro%le=r", "a bad % escape"),
        ("https://v:8200/te%zzam/s3?auth=kubernetes&role=r", "a bad % escape"),
        ("https://v:8200/team/s3?auth=kubernetes;role=r", "';'"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r;x", "';'"),
        ("https://user@v:8200/team/s3?auth=kubernetes&role=r", "userinfo"),
        ("https://user:hunter2pw@v:8200/team/s3?auth=kubernetes&role=r", "userinfo"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r#frag", "a fragment"),
        ("https://v:8200/team/s3#frag?auth=kubernetes&role=r", "a fragment"),
        ("https://v:8200?auth=kubernetes&role=r", "no secret path"),
        ("https://v:8200/?auth=kubernetes&role=r", "no secret path"),
        ("https://v:8200//s3?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team//s3?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team/s3/?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team/./s3?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team/../s3?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team/%2E%2E?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team%2Fs3?auth=kubernetes&role=r", "an empty, . or .. element"),
        ("https://v:8200/team/s3", "no query"),
        ("https://v:8200/team/s3?", "no query"),
        ("https://v:8200/team/s3?role=r", "no auth="),
        ("https://v:8200/team/s3?auth=token", "auth='token' is not kubernetes or approle"),
        ("https://v:8200/team/s3?auth=Kubernetes&role=r", "is not kubernetes or approle"),
        ("https://v:8200/team/s3?auth=kubernetes", "auth=kubernetes needs role="),
        ("https://v:8200/team/s3?auth=kubernetes&jwt=/t", "auth=kubernetes needs role="),
        ("https://v:8200/team/s3?auth=approle", "auth=approle needs approle="),
        ("https://v:8200/team/s3?auth=approle&approle=home/u/approle", "approle= must be an absolute path"),
        ("https://v:8200/team/s3?auth=approle&approle=~/approle", "approle= must be an absolute path"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&jwt=token", "jwt= must be an absolute path"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&ca=ca.pem", "ca= must be an absolute path"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&kv=3", "kv= must be 1 or 2"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&kv=v2", "kv= must be 1 or 2"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&mount=/secret", "mount= has an empty"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&authmount=k8s/", "authmount= has an empty"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&namespace=a//b", "namespace= has an empty"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&mount=..", "mount= has an empty"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r%0a", "control character"),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&proxy=ftp%3A%2F%2Fp", "proxy="),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&proxy=p.example%3A3128", "proxy="),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&proxy=http%3A%2F%2Fp%3A3128%2Fpath", "proxy="),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&proxy=http%3A%2F%2Fp%3A3128%3Fq", "proxy="),
        (
            "https://v:8200/team/s3?auth=kubernetes&role=r&proxy=http%3A%2F%2Fu%3Ahunter2pw%40p%3A3128",
            "proxy=",
        ),
        ("https://v:8200/team/s3?auth=kubernetes&role=r&proxy=http://u:hunter2pw@p:3128", "proxy="),
        ("ftp://v:8200/team/s3?auth=kubernetes&role=r", "http:// or https://"),
        ("v:8200/team/s3?auth=kubernetes&role=r", "http:// or https://"),
        ("https:/v/team/s3?auth=kubernetes&role=r", "http:// or https://"),
        ("https:///team/s3?auth=kubernetes&role=r", "has no host"),
        ("https://v:99999/team/s3?auth=kubernetes&role=r", "port"),
        ("https://v:0/team/s3?auth=kubernetes&role=r", "port"),
        ("https://[fe80::1%25eth0]:8200/team/s3?auth=kubernetes&role=r", "IPv6 zone"),
        ("https://a..b:8200/team/s3?auth=kubernetes&role=r", "malformed host"),
        ("https://v:http/team/s3?auth=kubernetes&role=r", "port"),
        ("https://[::1/team/s3?auth=kubernetes&role=r", "["),
        ("https://va ult/team/s3?auth=kubernetes&role=r", "host"),
        ("", "http:// or https://"),
    ],
)
def test_malformed_location_refused(location: str, words: str) -> None:
    with pytest.raises(CredentialsError) as e:
        parse_sources("vault:" + location)
    message = str(e.value)
    assert message.startswith("credentials: vault:"), message
    assert words in message, message
    assert "hunter2pw" not in message


def test_malformed_location_in_a_list_stops_before_any_source(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match="unknown key 'colour'"):
        resolve(f"secret:{tmp_path}/absent,vault:https://v/s?auth=kubernetes&role=r&colour=x", {}, None)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("vault:https://u:pw@v/s?auth=approle", "vault:https://u:xxxxx@v/s?auth=approle"),
        ("vault:https://u@v/s?auth=approle", "vault:https://xxxxx@v/s?auth=approle"),  # a lone token
        (
            "vault:https://v/s?auth=kubernetes&proxy=http%3A%2F%2Fu%3Apw%40p%3A3128",
            "vault:https://v/s?auth=kubernetes&proxy=http%3A%2F%2Fu%3Axxxxx%40p%3A3128",
        ),
        (
            "vault:https://v/s?proxy=http://u:pw@p:3128&a=b",
            "vault:https://v/s?proxy=http://u:xxxxx@p:3128&a=b",
        ),
        (K8S, K8S),
    ],
)
def test_redact(text: str, want: str) -> None:
    assert redact(text) == want


# ------------------------------------------------------------------------------------ VAULT_*

DEAD = "http://127.0.0.1:{port}/team/s3?auth=approle&approle={approle}"


@pytest.fixture
def dead_source(tmp_path: Path) -> VaultSource:
    """A source whose AppRole directory exists and whose server does not answer (nothing listens)."""
    approle = tmp_path / "approle"
    approle.mkdir()
    (approle / "role_id").write_text("role-id-123\n")
    (approle / "secret_id").write_text("secret-id-456\n")
    return vault(DEAD.format(port=free_port(), approle=approle))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VAULT_ADDR", "://vault"),
        ("VAULT_ADDR", "127.0.0.1:8200"),
        ("VAULT_ADDR", "http://vault:port"),
        ("VAULT_ADDR", "http://va ult"),
        ("VAULT_ADDR", "http://vault/%zz"),
        ("VAULT_ADDR", "http://vault\n"),
        ("VAULT_ADDR", "http://[::1"),
        ("VAULT_AGENT_ADDR", "http://agent:x"),
        ("VAULT_PROXY_ADDR", "://p"),
        ("VAULT_HTTP_PROXY", "http://p:3128/%"),
        ("VAULT_CACERT", "/nonexistent/ca.pem"),
        ("VAULT_CLIENT_CERT", "/nonexistent/cert.pem"),
        ("VAULT_CLIENT_KEY", "/nonexistent/key.pem"),
        ("VAULT_CAPATH", "/nonexistent/cadir"),
        ("VAULT_SKIP_VERIFY", "yes"),
        ("VAULT_SKIP_VERIFY", "on"),
        ("VAULT_SKIP_VERIFY", "2"),
        ("VAULT_SKIP_VERIFY", "tRUE"),
        ("VAULT_SRV_LOOKUP", "enabled"),
        ("VAULT_DISABLE_REDIRECTS", "no"),
        ("VAULT_MAX_RETRIES", "three"),
        ("VAULT_MAX_RETRIES", "1.5"),
        ("VAULT_CLIENT_TIMEOUT", "5x"),
        ("VAULT_CLIENT_TIMEOUT", "1.5"),
        ("VAULT_CLIENT_TIMEOUT", "s"),
        ("VAULT_CLIENT_TIMEOUT", "9999999999999999999h"),  # overflows Go's time.Duration
        ("VAULT_RATE_LIMIT", "fast"),
        ("VAULT_RATE_LIMIT", "10:x"),
        ("VAULT_RATE_LIMIT", "10:"),
    ],
)
def test_malformed_vault_variable_refused(dead_source: VaultSource, name: str, value: str) -> None:
    message = refused(dead_source, {name: value})
    assert name in message
    if name.endswith("ADDR"):
        assert value.strip() not in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VAULT_ADDR", "http://127.0.0.1:8200"),
        ("VAULT_ADDR", "vault.example:8200"),
        ("VAULT_ADDR", ""),
        ("VAULT_HTTP_PROXY", "http://proxy.example:3128"),
        ("VAULT_CACERT", __file__),
        ("VAULT_CAPATH", "/"),
        ("VAULT_SKIP_VERIFY", "true"),
        ("VAULT_SKIP_VERIFY", "F"),
        ("VAULT_SKIP_VERIFY", "1"),
        ("VAULT_SKIP_VERIFY", ""),
        ("VAULT_SRV_LOOKUP", "False"),
        ("VAULT_DISABLE_REDIRECTS", "TRUE"),
        ("VAULT_MAX_RETRIES", "-1"),
        ("VAULT_CLIENT_TIMEOUT", "60"),
        ("VAULT_CLIENT_TIMEOUT", "1m30s"),
        ("VAULT_CLIENT_TIMEOUT", "1.5h"),
        ("VAULT_CLIENT_TIMEOUT", "300ms"),
        ("VAULT_RATE_LIMIT", "10"),
        ("VAULT_RATE_LIMIT", "10.5:3"),
        ("VAULT_TOKEN", "s.anything"),
        ("VAULT_NAMESPACE", "x"),
        ("VAULT_WRAP_TTL", "nonsense"),
        ("VAULT_HEADERS", "nonsense"),
    ],
)
def test_wellformed_vault_variable_ignored(dead_source: VaultSource, name: str, value: str) -> None:
    assert "does not answer" in not_answering(dead_source, {name: value})


# ----------------------------------------------------------------------------- auth material


def test_kubernetes_token_file_absent_does_not_answer(tmp_path: Path) -> None:
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=kubernetes&role=r&jwt={tmp_path}/token")
    assert not_answering(s) == f"no service-account token {tmp_path}/token"


def test_kubernetes_default_token_path(tmp_path: Path) -> None:
    if os.path.exists(DEFAULT_JWT):
        pytest.skip("this machine has a service-account token")
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=kubernetes&role=r")
    assert not_answering(s) == f"no service-account token {DEFAULT_JWT}"


def test_approle_directory_absent_does_not_answer(tmp_path: Path) -> None:
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={tmp_path}/approle")
    assert not_answering(s) == f"no AppRole directory {tmp_path}/approle"


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"role_id": "abc"}, "secret_id: no such file"),
        ({"secret_id": "abc"}, "role_id: no such file"),
        ({"role_id": "abc", "secret_id": ""}, "secret_id is empty or holds whitespace"),
        ({"role_id": "a b", "secret_id": "abc"}, "role_id is empty or holds whitespace"),
        ({"role_id": "abc", "secret_id": "abc\n\n"}, "secret_id is empty or holds whitespace"),
    ],
)
def test_approle_directory_wrong_refused(tmp_path: Path, files: dict[str, str], words: str) -> None:
    d = tmp_path / "approle"
    d.mkdir()
    for name, value in files.items():
        (d / name).write_text(value)
    assert words in refused(vault(f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={d}"))


def refused_within(source: VaultSource, fifo: Path) -> str:
    """refused(source), on a thread that must end within 20 s; else ``fifo`` is opened for writing so it
    can end, and the test fails instead of hanging."""
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(refused(source)), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"reading {fifo} waited for a writer")
    assert out, "refused() failed on its thread"
    return out[0]


@pytest.mark.parametrize("name", ["role_id", "secret_id"])
def test_approle_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path, name: str) -> None:
    d = tmp_path / "approle"
    d.mkdir()
    for other in ("role_id", "secret_id"):
        if other != name:
            (d / other).write_text("abc")
    os.mkfifo(d / name)
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={d}")
    assert f"{d / name} is not a regular file" in refused_within(s, d / name)


def test_service_account_token_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "token")
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=kubernetes&role=r&jwt={tmp_path}/token")
    assert f"{tmp_path}/token is not a regular file" in refused_within(s, tmp_path / "token")


def test_approle_file_that_links_to_a_device_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "approle"
    d.mkdir()
    (d / "role_id").write_text("abc")
    (d / "secret_id").symlink_to("/dev/zero")
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={d}")
    assert f"{d}/secret_id is not a regular file" in refused(s)


def test_service_account_token_through_a_link_is_read(tmp_path: Path) -> None:
    """A projected token is a link (``token -> ..data/token``): followed, as before."""
    data = tmp_path / "..data"
    data.mkdir()
    (data / "token").write_text("x" * 2000)
    (tmp_path / "token").symlink_to("..data/token")
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=kubernetes&role=r&jwt={tmp_path}/token")
    assert "does not answer" in not_answering(s)  # read, then the login found no server


def test_approle_not_a_directory_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    s = vault(f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={tmp_path}/f")
    assert "is not a directory" in refused(s)


def test_missing_ca_file_refused(tmp_path: Path) -> None:
    s = vault(f"https://127.0.0.1:{free_port()}/s?auth=approle&approle={tmp_path}&ca={tmp_path}/ca.pem")
    assert f"ca={tmp_path}/ca.pem: no such file" in refused(s)


def test_stopped_server_does_not_answer_and_next_is_used(dead_source: VaultSource, tmp_path: Path) -> None:
    assert "connection refused" in not_answering(dead_source)
    d = tmp_path / "sec"
    d.mkdir()
    for k, v in GOOD.items():
        (d / k).write_text(v)
    creds, text = resolve(f"{dead_source.text},secret:{d}", {}, 10.0)
    assert (text, creds.access_key_id) == (f"secret:{d}", AK)


def test_unresolvable_name_does_not_answer(tmp_path: Path) -> None:
    (tmp_path / "role_id").write_text("a")
    (tmp_path / "secret_id").write_text("b")
    s = vault(f"http://no-such-host.invalid:8200/s?auth=approle&approle={tmp_path}")
    assert "does not answer" in not_answering(s)


def test_unreachable_proxy_does_not_answer(tmp_path: Path) -> None:
    (tmp_path / "role_id").write_text("a")
    (tmp_path / "secret_id").write_text("b")
    s = vault(
        f"http://127.0.0.1:{free_port()}/s?auth=approle&approle={tmp_path}"
        f"&proxy=http%3A%2F%2F127.0.0.1%3A{free_port()}"
    )
    assert "proxy http://127.0.0.1:" in not_answering(s)


def test_server_that_never_answers_is_refused_at_the_deadline(tmp_path: Path) -> None:
    """Connected but silent: not "cannot be reached", so the source is refused rather than passed over."""
    import socket
    import time

    (tmp_path / "role_id").write_text("a")
    (tmp_path / "secret_id").write_text("b")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)  # the kernel completes the handshake; nobody ever reads or answers
        port = listener.getsockname()[1]
        s = vault(f"http://127.0.0.1:{port}/s?auth=approle&approle={tmp_path}")
        start = time.monotonic()
        with pytest.raises(CredentialsError, match="no response within the time left"):
            s.fetch({}, 0.5)
        assert time.monotonic() - start < 5


# ------------------------------------------------------------------------------- real OpenBao


def approle_source(server: Bao, approle: Path, path: str = "team/s3", extra: str = "") -> VaultSource:
    return vault(f"{server.address}/{path}?auth=approle&approle={approle}{extra}")


@pytest.mark.vault
def test_approle_login_read_and_revoke(bao: Bao, tmp_path: Path, recording_proxy: Proxy) -> None:
    bao.write_kv(
        "team/s3", dict(GOOD, session_token=TOKEN, endpoint="http://127.0.0.1:9000", region="eu-west-1")
    )
    ids = bao.make_approle(tmp_path / "approle", read=["secret/data/team/s3"])
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".vault-token").write_text(bao.root_token)
    env = {
        "VAULT_TOKEN": bao.root_token,
        "HOME": str(tmp_path / "home"),
        "VAULT_ADDR": "http://127.0.0.1:1",
        "HTTP_PROXY": "http://127.0.0.1:1",
        "http_proxy": "http://127.0.0.1:1",
    }
    proxy = "&proxy=" + recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    creds = approle_source(bao, tmp_path / "approle", extra=proxy).fetch(env, 20.0)
    assert (creds.access_key_id, creds.secret_access_key, creds.session_token) == (AK, SK, TOKEN)
    assert (creds.endpoint, creds.region) == ("http://127.0.0.1:9000", "eu-west-1")
    assert recording_proxy.paths() == [
        ("POST", "/v1/auth/approle/login"),
        ("GET", "/v1/secret/data/team/s3"),
        ("POST", "/v1/auth/token/revoke-self"),
    ]
    login, read, revoke = recording_proxy.seen
    assert "x-vault-token" not in login.headers
    assert ids["secret_id"] in login.body.decode()
    token = read.headers["x-vault-token"]
    assert token != bao.root_token and revoke.headers["x-vault-token"] == token
    assert all(s.headers.get("x-vault-token") != bao.root_token for s in recording_proxy.seen)
    assert not bao.token_valid(token)


@pytest.mark.vault
def test_kubernetes_login(bao: Bao, tmp_path: Path) -> None:
    bao.make_kubernetes("trainer", read=["secret/data/team/k8s"])
    bao.write_kv("team/k8s", GOOD)
    jwt = tmp_path / "token"
    jwt.write_text(bao.service_account_token("trainer"))
    s = vault(f"{bao.address}/team/k8s?auth=kubernetes&role=trainer&jwt={jwt}")
    creds = s.fetch({}, 20.0)
    assert (creds.access_key_id, creds.secret_access_key, creds.region) == (AK, SK, "us-east-1")
    assert creds.endpoint == "https://s3.us-east-1.amazonaws.com"


@pytest.mark.vault
def test_kubernetes_login_denied(bao: Bao, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    bao.make_kubernetes("trainer", read=["secret/data/team/k8s"])
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwt_text = bao.service_account_token("trainer", key=other_key)
    jwt = tmp_path / "token"
    jwt.write_text(jwt_text)
    s = vault(f"{bao.address}/team/k8s?auth=kubernetes&role=trainer&jwt={jwt}")
    message = refused(s, secrets=(jwt_text, jwt_text.split(".")[2]))
    assert "login to auth/kubernetes denied (HTTP 4" in message
    wrong_role = vault(f"{bao.address}/team/k8s?auth=kubernetes&role=nobody&jwt={jwt}")
    jwt.write_text(bao.service_account_token("trainer"))
    assert "login to auth/kubernetes denied (HTTP 4" in refused(wrong_role)


@pytest.mark.vault
def test_approle_login_denied(bao: Bao, tmp_path: Path) -> None:
    ids = bao.make_approle(tmp_path / "approle")
    # A wrong secret_id that looks like one (a run of zeros would be scrubbed from every zero-padded entry name).
    (tmp_path / "approle" / "secret_id").write_text("5b1e2c3d-4f6a-4b7c-8d9e-0f1a2b3c4d5e\n")
    message = refused(approle_source(bao, tmp_path / "approle"), secrets=(ids["secret_id"], ids["role_id"]))
    assert "login to auth/approle denied (HTTP 400)" in message


@pytest.mark.vault
def test_kv1_mount_authmount_and_mount(bao: Bao, tmp_path: Path) -> None:
    bao.write_kv("team/s3", GOOD, mount="kv1", kv=1)
    bao.make_approle(tmp_path / "a", mount="approle-team", read=["kv1/team/s3"])
    creds = approle_source(bao, tmp_path / "a", extra="&authmount=approle-team&mount=kv1&kv=1").fetch({}, 20)
    assert creds.access_key_id == AK
    # The same secret read as kv 2 is not there.
    message = refused(approle_source(bao, tmp_path / "a", extra="&authmount=approle-team&mount=kv1"))
    assert "kv1/team/s3" in message


@pytest.mark.vault
def test_kv2_custom_mount_with_slash(bao: Bao, tmp_path: Path) -> None:
    bao.write_kv("s3", dict(GOOD, region="ap-south-1"), mount="team/kv")
    bao.make_approle(tmp_path / "a", read=["team/kv/data/s3"])
    creds = approle_source(bao, tmp_path / "a", path="s3", extra="&mount=team/kv").fetch({}, 20)
    assert creds.region == "ap-south-1"


@pytest.mark.vault
def test_namespace(bao: Bao, tmp_path: Path, recording_proxy: Proxy) -> None:
    bao.create_namespace("research")
    bao.write_kv("team/s3", dict(GOOD, region="eu-south-1"), namespace="research", mount="secret")
    bao.make_approle(tmp_path / "a", namespace="research")
    proxy = "&proxy=" + recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    creds = approle_source(bao, tmp_path / "a", extra="&namespace=research" + proxy).fetch({}, 20)
    assert creds.region == "eu-south-1"
    assert [s.headers.get("x-vault-namespace") for s in recording_proxy.seen] == ["research"] * 3
    # Without the namespace, the AppRole is not found at the root.
    assert "login to auth/approle denied" in refused(approle_source(bao, tmp_path / "a"))


@pytest.mark.vault
def test_missing_secret_refused(bao: Bao, tmp_path: Path) -> None:
    bao.make_approle(tmp_path / "a")
    message = refused(approle_source(bao, tmp_path / "a", path="team/none"))
    assert "no secret at secret/team/none (kv 2, HTTP 404)" in message


@pytest.mark.vault
def test_read_denied_refused(bao: Bao, tmp_path: Path) -> None:
    bao.write_kv("team/private", GOOD)
    bao.make_approle(tmp_path / "a", read=["secret/data/team/other"])
    message = refused(approle_source(bao, tmp_path / "a", path="team/private"))
    assert "reading secret/team/private denied (HTTP 403)" in message


@pytest.mark.vault
@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (dict(GOOD, colour="blue"), "unknown field 'colour'"),
        (dict(GOOD, region=7), "field region is not a string"),
        (dict(GOOD, session_token=None), "field session_token is not a string"),
        (dict(GOOD, secret_access_key=SK + " "), "secret_access_key holds whitespace"),
        (dict(GOOD, secret_access_key=SK + "\n"), "secret_access_key holds whitespace"),
        (dict(GOOD, access_key_id=""), "access_key_id is empty"),
        ({"access_key_id": AK}, "no secret_access_key"),
        (dict(GOOD, endpoint="http://s3.example/bucket"), "endpoint"),
        (dict(GOOD, region="EU"), "region"),
    ],
)
def test_bad_secret_refused(bao: Bao, tmp_path: Path, fields: dict[str, Any], words: str) -> None:
    bao.write_kv("team/bad", fields)
    bao.make_approle(tmp_path / "a", read=["secret/data/team/bad"])
    assert words in refused(approle_source(bao, tmp_path / "a", path="team/bad"))


@pytest.mark.vault
def test_sealed_does_not_answer_and_next_is_used(bao: Bao, tmp_path: Path) -> None:
    bao.write_kv("team/s3", GOOD)
    bao.make_approle(tmp_path / "a")
    s = approle_source(bao, tmp_path / "a")
    d = tmp_path / "sec"
    d.mkdir()
    (d / "access_key_id").write_text("FROMSECRET")
    (d / "secret_access_key").write_text("x")
    with bao.sealed():
        assert "sealed or a standby (HTTP 503)" in not_answering(s)
        creds, text = resolve(f"{s.text},secret:{d}", {}, 20.0)
        assert (text, creds.access_key_id) == (f"secret:{d}", "FROMSECRET")
    assert s.fetch({}, 20.0).access_key_id == AK


@pytest.mark.vault
def test_tls_with_ca(bao_tls: Bao, tmp_path: Path, recording_proxy: Proxy) -> None:
    bao_tls.write_kv("team/s3", GOOD)
    bao_tls.make_approle(tmp_path / "a")
    s = approle_source(bao_tls, tmp_path / "a", extra=f"&ca={bao_tls.ca}")
    assert s.fetch({}, 20.0).secret_access_key == SK
    # Through a proxy: a CONNECT tunnel, and the token still revoked at the end.
    proxy = "&proxy=" + recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    s = approle_source(bao_tls, tmp_path / "a", extra=f"&ca={bao_tls.ca}{proxy}")
    assert s.fetch({}, 20.0).access_key_id == AK
    assert [m for m, _ in recording_proxy.paths()] == ["CONNECT"]
    assert recording_proxy.seen[0].target == f"127.0.0.1:{bao_tls.port}"


@pytest.mark.vault
def test_tls_without_ca_or_with_wrong_ca_refused(bao_tls: Bao, tmp_path: Path) -> None:
    import trustme

    bao_tls.write_kv("team/s3", GOOD)
    bao_tls.make_approle(tmp_path / "a")
    # The system trust does not hold the test CA; SSL_CERT_FILE is read from env, not from os.environ.
    message = refused(
        approle_source(bao_tls, tmp_path / "a"), {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
    )
    assert "certificate" in message
    wrong = tmp_path / "wrong-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(wrong))
    message = refused(approle_source(bao_tls, tmp_path / "a", extra=f"&ca={wrong}"))
    assert "certificate" in message
    # Without ca=, the system trust is used, found from SSL_CERT_FILE in the environment given.
    assert approle_source(bao_tls, tmp_path / "a", path="team/s3").fetch({"SSL_CERT_FILE": bao_tls.ca}, 20)
    # ca= replaces the system trust: even SSL_CERT_FILE naming the right CA does not help a wrong ca=.
    refused(approle_source(bao_tls, tmp_path / "a", extra=f"&ca={wrong}"), {"SSL_CERT_FILE": bao_tls.ca})


@pytest.mark.vault
def test_proxy_refusing_the_tunnel_refused(bao_tls: Bao, tmp_path: Path, recording_proxy: Proxy) -> None:
    bao_tls.make_approle(tmp_path / "a")
    recording_proxy.refuse = 403
    proxy = "&proxy=" + recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    message = refused(approle_source(bao_tls, tmp_path / "a", extra=f"&ca={bao_tls.ca}{proxy}"))
    assert f"proxy {recording_proxy.url}" in message and "403" in message


# ------------------------------------------------------------------------------------ properties

_URLISH = st.text(alphabet="abv:/?&=%;#@[]. 0123456789AFaf+-_~\n\x00é", max_size=60)


@settings(max_examples=400, deadline=None)
@given(_URLISH)
def test_any_location_parses_or_is_refused(tail: str) -> None:
    """Whatever follows vault:, parsing gives a source or a CredentialsError naming it, nothing else."""
    try:
        parse_sources("vault:https://" + tail)
    except CredentialsError as e:
        # Quoted as Go's %q when the location holds a control character.
        assert str(e).startswith(("credentials: vault:https://", 'credentials: "vault:https://'))


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="abcdefXYZ0123456789-_.!~*'()$", min_size=1, max_size=12),
    _URLISH,
    st.booleans(),
)
def test_no_message_echoes_a_userinfo_password(password: str, tail: str, in_proxy: bool) -> None:
    secret = "pw" + password + "PW"
    if in_proxy:
        location = f"https://v/s?auth=kubernetes&role=r&proxy=http%3A%2F%2Fu%3A{secret}%40p%3A3128{tail}"
    else:
        location = f"https://u:{secret}@v/{tail}"
    with pytest.raises(CredentialsError) as e:
        parse_sources("vault:" + location)
    assert secret not in str(e.value)


# ------------------------------------------------------------------------------------------ the cli


def test_cli_empty_creds_is_a_credentials_error() -> None:
    from tests.conftest import run_cli

    r = run_cli("resolve", "-checkpoint", "s3://ckpts/run-7", "-creds", "")
    assert (r.code, r.out) == (1, "")
    assert r.err.startswith("publish: credentials: ")


@pytest.mark.vault
def test_cli_refused_vault_source_exits_1(bao_tls: Bao, tmp_path: Path, recording_proxy: Proxy) -> None:
    from tests.conftest import run_cli

    bao_tls.make_approle(tmp_path / "a")
    recording_proxy.refuse = 403
    proxy = recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    creds = f"vault:{bao_tls.address}/team/s3?auth=approle&approle={tmp_path}/a&ca={bao_tls.ca}&proxy={proxy}"
    r = run_cli("resolve", "-checkpoint", "s3://ckpts/run-7", "-creds", creds)
    assert r.code == 1 and r.out == ""
    assert r.err.startswith(f"publish: credentials: {creds}: proxy {recording_proxy.url} refused CONNECT")


@pytest.mark.vault
def test_cli_no_source_answered_exits_1(bao: Bao, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    bao.make_approle(tmp_path / "a")
    creds = f"vault:{bao.address}/team/s3?auth=approle&approle={tmp_path}/a,file:{tmp_path}/none"
    with bao.sealed():
        r = run_cli("resolve", "-checkpoint", "s3://ckpts/run-7", "-creds", creds)
    assert r.code == 1 and r.out == ""
    assert r.err == (
        f"publish: credentials: no source answered: vault:{bao.address}/team/s3?auth=approle&approle={tmp_path}/a: "
        f"http://127.0.0.1:{bao.port} is sealed or a standby (HTTP 503); file:{tmp_path}/none: no such directory\n"
    )


def test_an_error_answer_nested_too_deep_is_only_its_status() -> None:
    """json.loads raises RecursionError (not a ValueError) for deep nesting: the words are then the status
    alone, never an internal error."""
    from types import SimpleNamespace

    from publish.creds.vault import _denied

    deep = b'{"errors": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert _denied(SimpleNamespace(status=403, body=deep)) == "denied (HTTP 403)"
