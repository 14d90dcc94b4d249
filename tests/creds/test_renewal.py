"""watch outliving its credentials: keys held in OpenBao, rotated in SeaweedFS while watch runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import Watch, remember_secret, run_cli
from tests.support import dcp_shapes
from tests.support.fault_proxy import FaultProxy, Respond
from tests.support.netfixtures import Proxy
from tests.support.s3roots import client
from tests.support.servers import Weed
from tests.support.vault_server import Bao

pytestmark = [pytest.mark.s3, pytest.mark.vault]

REJECTED = "publish: the store rejected the credentials ({code}); resolving the sources again"


class Setup:
    """An identity of its own in SeaweedFS, its key in an OpenBao KV secret, an AppRole to read it."""

    def __init__(self, weed: Weed, bao: Bao, tmp: Path, endpoint: str | None = None) -> None:
        self.weed, self.bao = weed, bao
        self.identity = "rot-" + uuid.uuid4().hex[:8]
        self.endpoint = endpoint or weed.endpoint
        self.path = "team/" + self.identity
        approle = tmp / "approle"
        ids = bao.make_approle(approle)
        remember_secret(ids["secret_id"])
        self.creds = f"vault:{bao.address}/{self.path}?auth=approle&approle={approle}"
        self.key = self.new_key()
        self.write_vault(*self.key)
        weed.set_identity(self.identity, *self.key)
        self.bucket = weed.shared_bucket()
        self.prefix = "run-" + uuid.uuid4().hex[:10]
        self.url = f"s3://{self.bucket}/{self.prefix}"
        self.s3 = client(weed)

    @staticmethod
    def new_key() -> tuple[str, str]:
        key = ("AKROT" + uuid.uuid4().hex[:15].upper(), "rot-secret-" + uuid.uuid4().hex)
        remember_secret(*key)
        return key

    def write_vault(self, ak: str, sk: str, endpoint: str | None = None) -> None:
        fields = {"access_key_id": ak, "secret_access_key": sk, "endpoint": endpoint or self.endpoint}
        self.bao.write_kv(self.path, fields)

    def save(self, step: int) -> str:
        folder = f"exec/A/step-{step}"
        shard = {"__0_0.distcp": 16}
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{folder}/__0_0.distcp", Body=b"x" * 16)
        self.s3.put_object(
            Bucket=self.bucket, Key=f"{self.prefix}/{folder}/.metadata", Body=dcp_shapes.metadata_for(shard)
        )
        return folder

    def watch(self) -> Watch:
        return Watch(
            "-checkpoint",
            self.url,
            "-creds",
            self.creds,
            "-framework",
            "dcp",
            "-interval",
            "200ms",
            "-attempt",
            "A",
        )

    def line(self, step: int) -> str:
        folder = f"exec/A/step-{step}"
        return f"published {layout.name(0, step, folder)} (epoch 0, step {step}, {self.url}/{folder})"


def test_rotation_in_vault_and_store_is_followed(weed: Weed, bao: Bao, tmp_path: Path) -> None:
    s = Setup(weed, bao, tmp_path)
    s.save(1)
    w = s.watch()
    assert w.next_line() == s.line(1)
    new = s.new_key()
    s.write_vault(*new)  # the secret first, as an operator rotating keys does
    weed.set_identity(s.identity, *new)  # from here the old key is refused: InvalidAccessKeyId
    s.save(2)
    assert w.next_line() == s.line(2)
    s.save(3)
    assert w.next_line() == s.line(3)
    code, err = w.stop()
    assert code == 0
    assert err.splitlines() == [
        REJECTED.format(code="InvalidAccessKeyId"),
        f"publish: credentials from {s.creds}",
    ]


def test_rotation_only_in_the_store_fails_after_one_retry(weed: Weed, bao: Bao, tmp_path: Path) -> None:
    s = Setup(weed, bao, tmp_path)
    s.save(1)
    w = s.watch()
    assert w.next_line() == s.line(1)
    weed.set_identity(s.identity, *s.new_key())
    code, err = w.finish()
    assert code == 1
    lines = err.splitlines()
    assert lines[:2] == [REJECTED.format(code="InvalidAccessKeyId"), f"publish: credentials from {s.creds}"]
    assert len(lines) == 3 and lines[2].startswith("publish: store: ") and "InvalidAccessKeyId" in lines[2]


def test_source_naming_another_endpoint_fails(weed: Weed, bao: Bao, tmp_path: Path) -> None:
    s = Setup(weed, bao, tmp_path)
    s.save(1)
    w = s.watch()
    assert w.next_line() == s.line(1)
    new = s.new_key()
    s.write_vault(*new, endpoint="http://127.0.0.2:9")
    weed.set_identity(s.identity, *new)
    code, err = w.finish()
    assert code == 1
    assert REJECTED.format(code="InvalidAccessKeyId") in err
    assert "endpoint" in err.splitlines()[-1]


def test_expired_session_token_renews(weed: Weed, bao: Bao, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    s = Setup(weed, bao, tmp_path, endpoint=fault_proxy.endpoint)
    s.save(1)
    w = s.watch()
    assert w.next_line() == s.line(1)
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."), kind="LIST", times=1)
    s.save(2)
    assert w.next_line() == s.line(2)
    code, err = w.stop()
    assert code == 0
    assert err.splitlines() == [REJECTED.format(code="ExpiredToken"), f"publish: credentials from {s.creds}"]


def test_other_verbs_fail_on_the_first_refusal(
    weed: Weed, bao: Bao, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    s = Setup(weed, bao, tmp_path, endpoint=fault_proxy.endpoint)
    fault_proxy.add(Respond(400, "ExpiredToken", "The provided token has expired."), kind="LIST", times=1)
    r = run_cli("resolve", "-checkpoint", s.url, "-creds", s.creds)
    assert r.code == 1
    assert "resolving the sources again" not in r.err
    assert r.err.startswith("publish: store: ") and "ExpiredToken" in r.err


def test_a_mirror_upload_refused_by_rotated_keys_logs_in_once(
    weed: Weed, bao: Bao, tmp_path: Path, recording_proxy: Proxy, fault_proxy: FaultProxy
) -> None:
    """Issue #31, "Each of the 8 upload threads also re-reads the sources on its own (9 logins per rotation
    for a `vault:` source)": the secret is rotated in OpenBao, then the store refuses the old key while the
    eight threads of run -mirror's upload send with it.  One login serves them all: two AppRole logins in the
    whole run (the start, the rotation), one "resolving the sources again", and the save is mirrored whole
    (on the code before: a login and a warning for each thread refused)."""
    import threading

    from tests.support.fault_proxy import Action, ProxyHandler, RefuseKey
    from tests.support.netfixtures import Seen
    from tests.support.trainer_saves import hf_save

    s = Setup(weed, bao, tmp_path, endpoint=fault_proxy.endpoint)
    via = "&proxy=" + recording_proxy.url.replace(":", "%3A").replace("/", "%2F")
    creds = s.creds + via
    fast = tmp_path / "fast"
    folder = hf_save(fast / "exec" / "a", 1)
    for i in range(8):
        (folder / f"shard-{i}.bin").write_bytes(bytes([i]) * (1000 + i))
    new = s.new_key()
    weed.set_identity("next-" + s.identity, *new)  # the store accepts the new key from the start
    rotated = threading.Event()
    gate = RefuseKey(together=4)  # the first four refusals are answered together

    class Rotate(Action):
        """The first PUT of the upload: the secret is rotated, then the store refuses the old key."""

        def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
            rotated.set()  # the requests after this one are refused, each answered once the secret is written
            s.write_vault(*new)
            gate.handle(proxy, h, req)

    fault_proxy.add(
        Rotate(), match=lambda r: r.method == "PUT" and "x-amz-checksum-crc32" in r.headers, times=1
    )
    fault_proxy.add(gate, match=RefuseKey.signed_with(s.key[0], rotated.is_set))
    r = run_cli(
        "run", "-checkpoint", str(fast), "-mirror", s.url, "-creds", creds,
        "-framework", "hf", "-interval", "1h", "-attempt", "a", "--", "true",
    )  # fmt: skip
    assert r.code == 0, r.err
    logins = [p for p in recording_proxy.paths() if p == ("POST", "/v1/auth/approle/login")]
    assert len(logins) == 2
    assert r.err.count("resolving the sources again") == 1
    assert gate.refused >= 4
    keys = s.s3.list_objects_v2(Bucket=s.bucket, Prefix=f"{s.prefix}/pub/").get("KeyCount", 0)
    assert keys == 1
