"""The answer is never altered (spec addendum, section 14): a credential value that overlaps the data (an entry
name, a location, the bucket, a JSON value) leaves every line the command prints exact; only text from outside
(a store's error words) is scrubbed of credential values, ignoring case.

The colliding values are the credentials of a SeaweedFS identity of their own.  They are not handed to the
session-end secret check (tests/support/no_secrets.py): printing them as data is right here.  What these tests check
instead is exact output, and no fragment in the store's echoed words.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from tests.conftest import Result, Watch, run_cli
from tests.support.fault_proxy import Action, FaultProxy, ProxyHandler
from tests.support.netfixtures import Seen
from tests.support.servers import Weed

STATE = b'{"global_step": %d}'


def _entry(epoch: int, step: int, path: str) -> str:
    name = base64.b32encode(path.encode()).decode().rstrip("=")
    return f"{epoch:020d}-{step:020d}-{name}"


def _creds(tmp: Path, fields: dict[str, str]) -> str:
    d = tmp / f"creds-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    for name, value in fields.items():
        (d / name).write_text(value + "\n")
        (d / name).chmod(0o600)
    return f"file:{d}"


class Collide:
    """An s3:// root whose credentials overlap its data: the secret key is ``secret``."""

    def __init__(self, weed: Weed, tmp: Path, secret: str, prefix: str, bucket: str = "") -> None:
        self.weed = weed
        self.bucket = bucket or weed.shared_bucket()
        self.secret = secret.replace("{bucket}", self.bucket)
        self.access = "COLLIDE" + uuid.uuid4().hex[:12].upper()
        weed.set_identity("collide", self.access, self.secret)
        self.prefix = prefix
        self.url = f"s3://{self.bucket}/{prefix}"
        fields = {
            "access_key_id": self.access,
            "secret_access_key": self.secret,
            "endpoint": weed.endpoint,
            "region": weed.region,
        }
        self.creds = _creds(tmp, fields)
        self.s3 = weed.client()

    def put(self, key: str, body: bytes = b"") -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=body)

    def run(self, verb: str, *args: str) -> Result:
        return run_cli(verb, "-checkpoint", self.url, "-creds", self.creds, *args)


# Secrets chosen to overlap what the command prints: the zero padding of an entry, the save's path, the
# bucket, the entry's base32 part, the pub/ prefix, the same words in another case.
SECRETS = [
    "00000000",
    "checkpoint",
    "exec/A/ch",
    "{bucket}",
    "pub/0000",
    "MV4GKYZPIEXWG2DF",  # base32 of "exec/A/checkpoint-5", as the entry name holds it
    "mv4gkyzpiexwg2df",
    "CheckPoint-5",
    "s3://{bucket}/run-00000000",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_data_is_printed_exactly_while_the_secret_overlaps_it(
    weed: Weed, tmp_path: Path, secret: str
) -> None:
    root = Collide(weed, tmp_path, secret, f"run-00000000-{uuid.uuid4().hex[:6]}")
    for step in (5, 6):
        root.put(f"exec/A/checkpoint-{step}/trainer_state.json", STATE % step)
    loc = {s: f"{root.url}/exec/A/checkpoint-{s}" for s in (5, 6)}

    r = root.run("publish", loc[5], "5")
    want = f"published {_entry(0, 5, 'exec/A/checkpoint-5')} (epoch 0, step 5, {loc[5]})\n"
    assert (r.code, r.out, r.err) == (0, want, ""), r

    r = root.run("resolve")
    assert (r.code, r.out, r.err) == (0, loc[5] + "\n", ""), r

    r = root.run("status", "-json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["root"] == root.url
    pubs = doc["publications"]
    assert [(p["entry"], p["location"], p["path"]) for p in pubs] == [
        (_entry(0, 5, "exec/A/checkpoint-5"), loc[5], "exec/A/checkpoint-5")
    ]

    w = Watch(
        "-checkpoint",
        root.url,
        "-creds",
        root.creds,
        "-framework",
        "hf",
        "-interval",
        "1h",
        env={"DISPATCH_ATTEMPT": "A"},
    )
    try:
        line = w.next_line()
    finally:
        code, err = w.stop()
    assert line == f"published {_entry(0, 6, 'exec/A/checkpoint-6')} (epoch 0, step 6, {loc[6]})"
    assert code == 0, err

    r = root.run("prune", "-keep", "1")
    assert (r.code, r.out) == (0, f"removed {loc[5]}\n"), r


def test_resolve_of_a_zero_padded_root_is_the_location_that_exists(weed: Weed, tmp_path: Path) -> None:
    """The case reported: a secret key of eight zeros, and a root named run-00000000."""
    root = Collide(weed, tmp_path, "00000000", "run-00000000")
    root.put("exec/A/checkpoint-5/trainer_state.json", STATE % 5)
    assert root.run("publish", f"{root.url}/exec/A/checkpoint-5", "5").code == 0
    r = root.run("resolve")
    assert r.out == f"s3://{root.bucket}/run-00000000/exec/A/checkpoint-5\n", r
    assert root.s3.list_objects_v2(Bucket=root.bucket, Prefix=r.out.strip()[len(f"s3://{root.bucket}/") :])[
        "KeyCount"
    ]


# ------------------------------------------------------------------------ a store that echoes the request


class Echo(Action):
    """An S3 error whose Code and Message echo the request's credentials (and the secret key, as a store
    that knew it could), in upper or lower case."""

    def __init__(self, secret: str, case: str, status: int = 403, delete: bool = False) -> None:
        self.secret = secret
        self.case = case
        self.status = status
        self.delete = delete

    def words(self, req: Seen) -> str:
        said = " ".join(
            (req.headers.get("authorization", ""), req.headers.get("x-amz-security-token", ""), self.secret)
        )
        return said.upper() if self.case == "upper" else said.lower()

    def handle(self, proxy: FaultProxy, h: ProxyHandler, req: Seen) -> None:
        from xml.sax.saxutils import escape

        words = escape(self.words(req))
        if self.delete:
            body = (
                '<?xml version="1.0" encoding="UTF-8"?><DeleteResult>'
                f"<Error><Key>{escape(req.body.decode().split('<Key>')[1].split('</Key>')[0])}</Key>"
                f"<Code>AccessDenied</Code><Message>{words}</Message></Error></DeleteResult>"
            )
            status = 200
        else:
            body = f"<Error><Code>{words[:40]}</Code><Message>{words}</Message></Error>"
            status = self.status
        data = body.encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/xml")
        h.send_header("x-amz-error-message", self.words(req)[:200])
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if req.method != "HEAD":
            h.wfile.write(data)


KEY = "AKIAECHOTESTKEY00001"
SECRET = "EchoSecret/MixedCase+0001xyz"
TOKEN = "FwoGZXIvYXdzEchoSessionToken0001abcdefGHIJ"


def _no_fragment(text: str, *values: str) -> None:
    low = text.lower()
    for v in values:
        for i in range(len(v) - 7):
            assert v[i : i + 8].lower() not in low, (v[i : i + 8], text)


def _echo_root(fault_proxy: FaultProxy, weed: Weed, tmp: Path) -> tuple[str, str]:
    fields = {
        "access_key_id": KEY,
        "secret_access_key": SECRET,
        "session_token": TOKEN,
        "endpoint": fault_proxy.endpoint,
        "region": weed.region,
    }
    return f"s3://{weed.shared_bucket()}/echo-{uuid.uuid4().hex[:8]}", _creds(tmp, fields)


@pytest.mark.parametrize("case", ["upper", "lower"])
def test_a_store_echoing_the_credentials_in_another_case_shows_no_fragment(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path, case: str
) -> None:
    url, creds = _echo_root(fault_proxy, weed, tmp_path)
    fault_proxy.add(Echo(SECRET, case))
    r = run_cli("resolve", "-checkpoint", url, "-creds", creds)
    assert r.code == 1 and r.out == "", r
    assert r.err.startswith(f"publish: store: list {url}/pub/"), r.err
    _no_fragment(r.err, KEY, SECRET, TOKEN)
    assert "[redacted]" in r.err


def test_a_delete_error_echoing_the_credentials_shows_no_fragment(
    weed: Weed, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    fields = {
        "access_key_id": weed.access_key,
        "secret_access_key": weed.secret_key,
        "endpoint": fault_proxy.endpoint,
        "region": weed.region,
    }
    creds = _creds(tmp_path, fields)
    bucket, prefix = weed.shared_bucket(), f"echo-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket}/{prefix}"
    s3 = weed.client()
    for step in (1, 2):
        s3.put_object(
            Bucket=bucket, Key=f"{prefix}/exec/A/checkpoint-{step}/trainer_state.json", Body=STATE % step
        )
        r = run_cli(
            "publish", "-checkpoint", url, "-creds", creds, f"{url}/exec/A/checkpoint-{step}", str(step)
        )
        assert r.code == 0, r
    fault_proxy.add(Echo(weed.secret_key, "upper", delete=True), kind="DELETE_OBJECTS")
    r = run_cli("prune", "-checkpoint", url, "-creds", creds, "-keep", "1")
    assert r.code == 1, r
    assert "AccessDenied" in r.err, r.err
    _no_fragment(r.err, weed.access_key, weed.secret_key)
