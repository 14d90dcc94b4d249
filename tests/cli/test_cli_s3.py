"""The command on s3:// roots, end to end against SeaweedFS (with authentication) and moto."""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import Result, Watch, run_cli
from tests.support import dcp_shapes
from tests.support.fault_proxy import FaultProxy, Respond
from tests.support.netfixtures import Proxy, TestCA, TLSFront
from tests.support.ports import dead_port
from tests.support.s3roots import Root, creds_dir
from tests.support.servers import S3Server, Weed

pytestmark = pytest.mark.s3


@pytest.fixture
def s3root(s3_server: S3Server, tmp_path: Path) -> Root:
    return Root(s3_server, tmp_path)


@pytest.fixture
def wroot(weed: Weed, tmp_path: Path) -> Root:
    return Root(weed, tmp_path)


def published_line(root: Root, epoch: int, step: int, path: str) -> str:
    return f"published {layout.name(epoch, step, path)} (epoch {epoch}, step {step}, {root.url}/{path})"


def test_resolve_publish_resolve(s3root: Root) -> None:
    r = s3root.run("resolve")
    assert (r.code, r.out, r.err) == (0, "", "")
    s3root.put("exec/A/checkpoint-10/model.bin")
    r = s3root.run("publish", "-epoch", "2", f"{s3root.url}/exec/A/checkpoint-10", "10")
    assert (r.code, r.err) == (0, "")
    assert r.out == published_line(s3root, 2, 10, "exec/A/checkpoint-10") + "\n"
    # The entry is an empty object under PREFIX/pub/, as an independent client sees it.
    name = layout.name(2, 10, "exec/A/checkpoint-10")
    assert s3root.entries() == [name]
    head = s3root.s3.head_object(Bucket=s3root.bucket, Key=f"{s3root.prefix}/pub/{name}")
    assert head["ContentLength"] == 0
    r = s3root.run("resolve")
    assert (r.code, r.out) == (0, f"{s3root.url}/exec/A/checkpoint-10\n")


def test_publish_again_reports_already_published(s3root: Root) -> None:
    s3root.put("exec/A/c/x")
    assert s3root.run("publish", f"{s3root.url}/exec/A/c", "1").code == 0
    r = s3root.run("publish", f"{s3root.url}/exec/A/c", "1")
    name = layout.name(0, 1, "exec/A/c")
    assert (r.code, r.out) == (0, "")
    assert r.err == f"publish: {name} already published (epoch 0, step 1, {s3root.url}/exec/A/c)\n"


@pytest.mark.parametrize("save", ["empty", "root", "other-bucket", "posix", "prefix-sibling"])
def test_publish_refuses_saves_that_are_not_under_the_root_or_empty(s3root: Root, save: str) -> None:
    s3root.put("exec/A/c-other/x")
    target = {
        "empty": f"{s3root.url}/exec/A/c",  # holds no object (only a sibling with a longer name does)
        "root": s3root.url,
        "other-bucket": f"s3://another-bucket/{s3root.prefix}/exec/A/c-other",
        "posix": "/tmp/exec/A/c-other",
        "prefix-sibling": f"{s3root.url}x/exec/A/c-other",
    }[save]
    r = s3root.run("publish", target, "1")
    assert r.code == 1, r.err
    assert s3root.entries() == []


def test_unparsable_key_in_pub_is_an_error(s3root: Root) -> None:
    s3root.put("pub/" + layout.name(0, 1, "a"), b"")
    s3root.put("pub/stray", b"")
    r = s3root.run("resolve")
    assert r.code == 1 and f"{s3root.url}/pub/stray" in r.err


def test_pub_folder_marker_is_ignored_but_nested_keys_are_errors(s3root: Root) -> None:
    s3root.put("pub/", b"")
    assert s3root.run("resolve").code == 0
    s3root.put("pub/sub/x", b"")
    r = s3root.run("resolve")
    assert r.code == 1 and "pub/sub/x" in r.err


def test_two_publications_of_the_same_save_at_once(wroot: Root) -> None:
    wroot.put("exec/A/checkpoint-5/w")
    start = threading.Barrier(2)
    results: list[Result] = []

    def one() -> None:
        start.wait()
        results.append(wroot.run("publish", f"{wroot.url}/exec/A/checkpoint-5", "5"))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.code for r in results] == [0, 0]
    assert sum(1 for r in results if r.out.startswith("published ")) == 1
    assert sum(1 for r in results if "already published" in r.err) == 1
    assert wroot.entries() == [layout.name(0, 5, "exec/A/checkpoint-5")]


def test_prune_removes_every_object_under_old_folders(s3root: Root) -> None:
    for step in (1, 2, 3):
        for f in ("model.bin", "optim/0.bin", "optim/1.bin"):
            s3root.put(f"exec/A/checkpoint-{step}/{f}")
        assert s3root.run("publish", f"{s3root.url}/exec/A/checkpoint-{step}", str(step)).code == 0
    s3root.put("exec/A/checkpoint-10/keep")  # a longer name sharing the prefix is another folder
    r = s3root.run("prune", "-keep", "1")
    assert r.code == 0, r.err
    assert r.lines == [
        f"removed {s3root.url}/exec/A/checkpoint-1",
        f"removed {s3root.url}/exec/A/checkpoint-2",
    ]
    assert s3root.keys("exec/") == [
        "exec/A/checkpoint-10/keep",
        "exec/A/checkpoint-3/model.bin",
        "exec/A/checkpoint-3/optim/0.bin",
        "exec/A/checkpoint-3/optim/1.bin",
    ]
    assert s3root.entries() == [layout.name(0, 3, "exec/A/checkpoint-3")]


def test_probe(wroot: Root) -> None:
    r = wroot.run("probe")
    assert (r.code, r.err) == (0, "")
    assert r.out == f"{wroot.url} ok, credentials from {wroot.creds}\n"
    assert wroot.keys() == []  # the probe object is gone


def test_probe_with_wrong_secret_fails_at_write(wroot: Root, tmp_path: Path) -> None:
    wroot.creds = creds_dir(tmp_path, wroot.server, secret_access_key="not-the-secret-0001")
    r = wroot.run("probe")
    assert r.code == 1
    assert r.err.startswith("publish: store: probe: write: ")
    assert "SignatureDoesNotMatch" in r.err


def test_probe_usage(wroot: Root) -> None:
    r = run_cli("probe", "-checkpoint", wroot.url)
    assert r.code == 2 and "-creds is required" in r.err
    r = run_cli("probe", "-checkpoint", "s3://Bad/x", "-creds", wroot.creds)
    assert r.code == 1 and "bucket" in r.err
    r = run_cli("probe", "-checkpoint", wroot.url, "-creds", wroot.creds, "-proxy", "ftp://p")
    assert r.code == 2 and "-proxy" in r.err


def test_resolve_probe(wroot: Root, tmp_path: Path) -> None:
    assert wroot.run("resolve", "-probe").code == 0
    wroot.creds = creds_dir(tmp_path, wroot.server, secret_access_key="not-the-secret-0001")
    r = wroot.run("resolve", "-probe")
    assert r.code == 1 and "store: probe: write:" in r.err


def test_empty_creds_list_and_no_source_answering(wroot: Root, tmp_path: Path) -> None:
    r = run_cli("resolve", "-checkpoint", wroot.url, "-creds", "")
    assert r.code == 1 and r.err.startswith("publish: credentials: ")
    r = run_cli("resolve", "-checkpoint", wroot.url, "-creds", f"file:{tmp_path}/none,secret:{tmp_path}/nope")
    assert r.code == 1
    assert r.err.startswith(f"publish: credentials: no source answered: file:{tmp_path}/none: ")
    assert f"; secret:{tmp_path}/nope: " in r.err


def test_environment_proxies_and_aws_variables_are_ignored(wroot: Root) -> None:
    dead = f"http://127.0.0.1:{dead_port()}"
    noise = {k: dead for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")}
    noise |= {
        "NO_PROXY": "",
        "AWS_ACCESS_KEY_ID": "AKIAWRONG",
        "AWS_SECRET_ACCESS_KEY": "wrong",
        "AWS_REGION": "eu-west-9",
    }
    wroot.put("exec/A/c/x")
    assert wroot.run("publish", f"{wroot.url}/exec/A/c", "1", env=noise).code == 0
    assert wroot.run("resolve", env=noise).out == f"{wroot.url}/exec/A/c\n"


def test_explicit_proxy_is_used_and_a_dead_one_fails(wroot: Root) -> None:
    wroot.put("exec/A/c/x")
    with Proxy() as proxy:
        r = wroot.run("publish", "-proxy", proxy.url, f"{wroot.url}/exec/A/c", "1")
        assert r.code == 0, r.err
        assert any("/pub/" in f for f in proxy.forwards)  # absolute-form requests for an http endpoint
    r = wroot.run("resolve", "-proxy", f"http://127.0.0.1:{dead_port()}")
    assert r.code == 1 and r.out == "" and "store:" in r.err


@pytest.mark.parametrize(
    "proxy", ["socks5://p:1080", "http://u:pw@p:3128", "http://p:3128/path", "http://p?x=1", "p:3128"]
)
def test_malformed_proxy_is_a_usage_error(wroot: Root, proxy: str) -> None:
    r = wroot.run("resolve", "-proxy", proxy)
    assert r.code == 2 and "-proxy" in r.err and "pw" not in r.err


def proxied(weed: Weed, tmp_path: Path, fault_proxy: FaultProxy) -> Root:
    return Root(weed, tmp_path, endpoint=fault_proxy.endpoint)


def test_resolve_sends_one_list_per_thousand_entries_one_for_the_save_and_nothing_else(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    root = proxied(weed, tmp_path, fault_proxy)
    n = 2345
    names = [layout.name(0, i, f"exec/A/checkpoint-{i}") for i in range(n)]
    root.put_many([f"pub/{x}" for x in names])
    root.put(f"exec/A/checkpoint-{n - 1}/model.bin")
    fault_proxy.reset()
    r = root.run("resolve")
    assert (r.out, r.err) == (f"{root.url}/exec/A/checkpoint-{n - 1}\n", "")
    # The pages of pub/, then one LIST (max-keys=1) that finds the newest entry's save.
    assert fault_proxy.count("LIST") == math.ceil(n / 1000) + 1
    assert fault_proxy.count() == fault_proxy.count("LIST")
    assert fault_proxy.seen[-1].query["max-keys"] == "1"


def test_prune_deletes_with_one_request_per_thousand_keys(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    root = proxied(weed, tmp_path, fault_proxy)
    m = 1500
    root.put_many([f"exec/A/checkpoint-1/shard-{i:05d}" for i in range(m)])
    root.put("exec/A/checkpoint-2/w")
    for step in (1, 2):
        assert root.run("publish", f"{root.url}/exec/A/checkpoint-{step}", str(step)).code == 0
    fault_proxy.reset()
    r = root.run("prune", "-keep", "1")
    assert r.lines == [f"removed {root.url}/exec/A/checkpoint-1"]
    # One DeleteObjects for the entry, one for its manifest, then ceil(m/1000) for the folder's objects.
    assert fault_proxy.count("DELETE_OBJECTS") == 2 + math.ceil(m / 1000)
    assert root.keys("exec/") == ["exec/A/checkpoint-2/w"]


def test_store_errors_name_operation_and_code(weed: Weed, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    root = proxied(weed, tmp_path, fault_proxy)
    fault_proxy.add(Respond(403, "AccessDenied", "Access Denied."), kind="LIST")
    r = root.run("resolve")
    assert r.code == 1
    assert r.err.startswith("publish: store: ") and "AccessDenied" in r.err and "pub/" in r.err


def test_timeout_bounds_a_verb(weed: Weed, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    from tests.support.fault_proxy import Stall

    root = proxied(weed, tmp_path, fault_proxy)
    fault_proxy.add(Stall(30), kind="LIST")
    import time

    t0 = time.monotonic()
    r = root.run("resolve", "-timeout", "1s")
    assert r.code == 1 and "store:" in r.err
    assert time.monotonic() - t0 < 10


def hf_state(step: int) -> bytes:
    from tests.support.trainer_saves import real_state

    return real_state(step)


def test_watch_on_s3(wroot: Root, tmp_path: Path) -> None:
    saves = "exec/A"
    wroot.put(f"{saves}/checkpoint-20/model.bin")
    wroot.put(f"{saves}/checkpoint-20/trainer_state.json", hf_state(20))
    wroot.put(f"{saves}/checkpoint-30/model.bin")  # no trainer_state.json yet
    w = Watch(
        "-checkpoint",
        wroot.url,
        "-creds",
        wroot.creds,
        "-framework",
        "hf",
        "-interval",
        "200ms",
        env={"DISPATCH_ATTEMPT": "A"},
    )
    assert w.next_line() == published_line(wroot, 0, 20, f"{saves}/checkpoint-20")
    data = hf_state(30)
    wroot.put(f"{saves}/checkpoint-30/trainer_state.json", data[:100])
    assert w.quiet_for(0.8)
    wroot.put(f"{saves}/checkpoint-30/trainer_state.json", data)
    assert w.next_line() == published_line(wroot, 0, 30, f"{saves}/checkpoint-30")
    code, err = w.stop(signal.SIGTERM)
    assert (code, err) == (0, "")


def test_watch_dcp_saves_argument_and_one_list_per_idle_scan(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    root = proxied(weed, tmp_path, fault_proxy)
    root.put("runs/x/step-100/__0_0.distcp", b"x" * 64)
    root.put("runs/x/step-100/.metadata", dcp_shapes.metadata_for({"__0_0.distcp": 64}))
    root.put("runs/x/step-200/shard")  # not complete
    w = Watch(
        "-checkpoint",
        root.url,
        "-creds",
        root.creds,
        "-framework",
        "dcp",
        "-interval",
        "1h",
        f"{root.url}/runs/x",
    )
    assert w.next_line() == published_line(root, 0, 100, "runs/x/step-100")
    assert w.quiet_for(0.5)  # the first scan goes on to look at step-200 after publishing step-100
    fault_proxy.reset()
    code, err = w.stop()
    assert (code, err) == (0, "")
    # The last scan: one LIST of the saves, and one LIST of the files of the save still incomplete (no
    # .metadata there, so nothing is read); the published one is not looked at.
    assert fault_proxy.count("LIST") == 2
    assert fault_proxy.count() == 2


def test_watch_saves_outside_the_root(wroot: Root) -> None:
    r = wroot.run("watch", "-framework", "hf", f"s3://{wroot.bucket}/elsewhere")
    assert r.code == 1 and "not under the root" in r.err


def test_publish_path_too_long_for_an_s3_key_creates_nothing(s3root: Root) -> None:
    rel = "exec/A/" + "/".join(["d" * 100] * 6)  # base32 makes the entry's key well over 1,024 bytes
    s3root.put(f"{rel}/x")
    r = s3root.run("publish", f"{s3root.url}/{rel}", "1")
    assert r.code == 1 and "too long" in r.err
    assert s3root.entries() == []


@pytest.fixture
def https_root(weed: Weed, tmp_path: Path) -> Iterator[tuple[Root, TestCA, TLSFront]]:
    ca = TestCA(tmp_path)
    front = TLSFront(("127.0.0.1", int(weed.endpoint.rsplit(":", 1)[1])), ca.server_ctx())
    try:
        yield Root(weed, tmp_path, endpoint=front.endpoint), ca, front
    finally:
        front.close()


def test_https_endpoint_trusted_through_ssl_cert_file(https_root: tuple[Root, TestCA, TLSFront]) -> None:
    root, ca, front = https_root
    root.put("exec/A/c/x")
    r = root.run("publish", f"{root.url}/exec/A/c", "1", env={"SSL_CERT_FILE": ca.pem})
    assert r.code == 0, r.err
    assert root.run("resolve", env={"SSL_CERT_FILE": ca.pem}).out == f"{root.url}/exec/A/c\n"
    assert front.handshakes >= 2


def test_https_endpoint_named_with_a_trailing_dot_verifies_against_the_name(
    weed: Weed, tmp_path: Path, https_root: tuple[Root, TestCA, TLSFront]
) -> None:
    """``https://localhost.:PORT``, a fully qualified name as Go's net/url accepts it, is checked against the
    certificate's ``localhost``, as Go's TLS client checks it."""
    _, ca, front = https_root
    root = Root(weed, tmp_path, endpoint=f"https://localhost.:{front.port}")
    root.put("exec/A/c/x")
    r = root.run("publish", f"{root.url}/exec/A/c", "1", env={"SSL_CERT_FILE": ca.pem})
    assert r.code == 0, r.err
    assert root.run("resolve", env={"SSL_CERT_FILE": ca.pem}).out == f"{root.url}/exec/A/c\n"


def test_https_endpoint_with_the_wrong_ca_is_refused(
    https_root: tuple[Root, TestCA, TLSFront], tmp_path: Path
) -> None:
    root, _, _ = https_root
    other = TestCA(tmp_path)
    r = root.run("resolve", env={"SSL_CERT_FILE": other.pem})
    assert r.code == 1 and r.out == ""
    assert r.err.startswith("publish: store: ") and "certificate" in r.err.lower()


def test_https_endpoint_through_an_https_proxy(
    https_root: tuple[Root, TestCA, TLSFront], tmp_path: Path
) -> None:
    root, ca, front = https_root
    root.put("exec/A/c/x")
    # One CA file trusted for both the proxy's certificate and the store's.
    proxy_ca = TestCA(tmp_path)
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(Path(ca.pem).read_text() + Path(proxy_ca.pem).read_text())
    with Proxy(tls=proxy_ca) as proxy:
        r = root.run(
            "publish", "-proxy", proxy.url, f"{root.url}/exec/A/c", "1", env={"SSL_CERT_FILE": str(bundle)}
        )
        assert r.code == 0, r.err
        assert proxy.connects and all(c.endswith(front.endpoint.rsplit(":", 1)[1]) for c in proxy.connects)


def test_one_slowdown_on_the_manifest_put_is_waited_out(
    weed: Weed, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    """Issue #31, "One 503 SlowDown throws a finished upload away": the manifest's PUT goes through the same
    retry policy as every other request, so `publish` on an S3 root answered 503 SlowDown to it sends it
    again and publishes (on the code before: exit 1, no entry)."""
    root = proxied(weed, tmp_path, fault_proxy)
    root.put("exec/A/c/x", b"abc")
    slow = fault_proxy.add(
        Respond(503, "SlowDown", "Please reduce your request rate."),
        match=lambda r: r.kind == "PUT" and "/man/" in r.path,
        times=1,
    )
    r = root.run("publish", f"{root.url}/exec/A/c", "1")
    assert (r.code, r.err) == (0, "")
    assert r.out == published_line(root, 0, 1, "exec/A/c") + "\n"
    name = layout.name(0, 1, "exec/A/c")
    assert slow.used == 1
    assert root.entries() == [name]
    assert root.keys("man/") == [f"man/{name}"]
