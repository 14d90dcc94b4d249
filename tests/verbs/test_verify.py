"""Manifests and resolve -verify, on POSIX and S3 roots (SeaweedFS and moto): every publication writes its
manifest before its entry, and resolve -verify (-verify=deep) passes over a save that does not match it,
naming the first bad file, and answers with the newest that does.  Runs against the binary too."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from publish.rules import layout, manifest
from tests.conftest import Result, Watch, run_cli
from tests.support.s3roots import Root
from tests.support.trainer_saves import hf_save


class Posix:
    """A POSIX root with the same helpers as an S3 one."""

    s3 = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = str(path)

    def run(self, verb: str, *args: str) -> Result:
        return run_cli(verb, "-checkpoint", self.url, *args)

    def put(self, rel: str, data: bytes) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def get(self, rel: str) -> bytes | None:
        p = self.path / rel
        return p.read_bytes() if p.is_file() else None

    def delete(self, rel: str) -> None:
        (self.path / rel).unlink()

    def where(self, rel: str) -> str:
        return f"{self.url}/{rel}"


class S3:
    s3 = True

    def __init__(self, root: Root) -> None:
        self.root = root
        self.url = root.url

    def run(self, verb: str, *args: str) -> Result:
        return self.root.run(verb, *args)

    def put(self, rel: str, data: bytes) -> None:
        self.root.put(rel, data)

    def get(self, rel: str) -> bytes | None:
        try:
            o = self.root.s3.get_object(Bucket=self.root.bucket, Key=f"{self.root.prefix}/{rel}")
        except self.root.s3.exceptions.NoSuchKey:
            return None
        return o["Body"].read()  # type: ignore[no-any-return]

    def delete(self, rel: str) -> None:
        self.root.s3.delete_object(Bucket=self.root.bucket, Key=f"{self.root.prefix}/{rel}")

    def where(self, rel: str) -> str:
        return f"{self.url}/{rel}"


#: The S3 tiers carry the s3 marker: the runs without servers (other Pythons) leave them out.
_SEAWEEDFS = pytest.param("seaweedfs", marks=pytest.mark.s3)


@pytest.fixture(params=["posix", _SEAWEEDFS, pytest.param("moto", marks=pytest.mark.s3)])
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "posix":
        (tmp_path / "ckpt").mkdir()
        return Posix(tmp_path / "ckpt")
    server = request.getfixturevalue("weed" if request.param == "seaweedfs" else "moto_s3")
    return S3(Root(server, tmp_path))


@pytest.fixture
def posix(tmp_path: Path) -> Posix:
    (tmp_path / "ckpt").mkdir()
    return Posix(tmp_path / "ckpt")


SHARDS = {
    ".metadata": b"meta" * 10,
    "__0_0.distcp": bytes(range(256)) * 40,
    "__1_0.distcp": b"\x07" * 12_345,
    "sub/extra.bin": b"",
}


def save(tier: Any, step: int, files: dict[str, bytes] | None = None) -> str:
    """Write a DCP-shaped save at exec/A/step-<step> and publish it; its entry's name."""
    path = f"exec/A/step-{step}"
    for rel, data in (files or SHARDS).items():
        tier.put(f"{path}/{rel}", data)
    r = tier.run("publish", tier.where(path), str(step))
    assert r.code == 0, r
    return layout.name(0, step, path)


def rows_of(files: dict[str, bytes], digests: bool) -> list[tuple[str, int, str | None]]:
    return sorted(
        (rel, len(d), hashlib.sha256(d).hexdigest() if digests else None) for rel, d in files.items()
    )


def with_digests(tier: Any, entry: str, files: dict[str, bytes]) -> None:
    """Write ``entry``'s manifest with the digests (as the mirror's upload writes it on S3)."""
    tier.put(f"man/{entry}", manifest.encode(entry, rows_of(files, digests=True)))


def resolve(tier: Any, *flags: str) -> Result:
    return tier.run("resolve", *flags)


def passing_over(tier: Any, entry: str, rel: str, why: str) -> str:
    return f"publish: resolve: passing over {tier.where('pub/' + entry)}: {tier.where(rel)}: {why}\n"


# -- what publish writes ------------------------------------------------------------------------------------


def test_publish_writes_the_manifest_of_every_file_then_the_empty_entry(tier: Any) -> None:
    entry = save(tier, 1)
    data = tier.get(f"man/{entry}")
    assert data is not None
    assert manifest.decode(entry, data) == rows_of(SHARDS, digests=not tier.s3)
    assert json.loads(data)["format"] == "publish.manifest.v1"
    assert tier.get(f"pub/{entry}") == b""


def test_publish_of_an_entry_already_there_leaves_its_manifest_alone(tier: Any) -> None:
    entry = save(tier, 1)
    tier.put(f"man/{entry}", b"the manifest already there")
    tier.put("exec/A/step-1/__0_0.distcp", b"changed since")
    r = tier.run("publish", tier.where("exec/A/step-1"), "1")
    assert r.code == 0 and "already published" in r.err, r
    assert tier.get(f"man/{entry}") == b"the manifest already there"


def test_a_save_that_is_one_file_has_the_one_row_of_the_empty_path(tier: Any) -> None:
    tier.put("exec/A/epoch=0-step=5.ckpt", b"lightning" * 100)
    r = tier.run("publish", tier.where("exec/A/epoch=0-step=5.ckpt"), "5")
    assert r.code == 0, r
    entry = layout.name(0, 5, "exec/A/epoch=0-step=5.ckpt")
    digest = None if tier.s3 else hashlib.sha256(b"lightning" * 100).hexdigest()
    assert manifest.decode(entry, tier.get(f"man/{entry}")) == [("", 900, digest)]
    tier.put("exec/A/epoch=0-step=5.ckpt", b"lightning" * 99)
    r = resolve(tier, "-verify")
    assert r.code == 1, r
    assert passing_over(tier, entry, "exec/A/epoch=0-step=5.ckpt", "size 891, manifest says 900") in r.err


# -- resolve -verify -----------------------------------------------------------------------------------------


def test_a_flipped_byte_is_passed_over_by_verify_deep_but_not_by_verify(tier: Any) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    if tier.s3:
        with_digests(tier, newest, SHARDS)
    flipped = bytearray(SHARDS["__0_0.distcp"])
    flipped[5000] ^= 0x01
    tier.put("exec/A/step-2/__0_0.distcp", bytes(flipped))
    r = resolve(tier, "-verify")
    assert (r.code, r.out, r.err) == (0, tier.where("exec/A/step-2") + "\n", ""), r
    r = resolve(tier, "-verify=deep")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    got = hashlib.sha256(bytes(flipped)).hexdigest()
    want = hashlib.sha256(SHARDS["__0_0.distcp"]).hexdigest()
    assert r.err == passing_over(
        tier, newest, "exec/A/step-2/__0_0.distcp", f"sha256 {got}, manifest says {want}"
    )


def test_a_truncated_distcp_is_passed_over_by_verify(tier: Any) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    tier.put("exec/A/step-2/__1_0.distcp", b"\x07" * 12_000)
    r = resolve(tier)
    assert (r.code, r.out, r.err) == (0, tier.where("exec/A/step-2") + "\n", ""), r  # without -verify
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    assert r.err == passing_over(
        tier, newest, "exec/A/step-2/__1_0.distcp", "size 12000, manifest says 12345"
    )


def test_a_missing_file_is_passed_over_naming_it(tier: Any) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    tier.delete("exec/A/step-2/sub/extra.bin")
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    assert r.err == passing_over(tier, newest, "exec/A/step-2/sub/extra.bin", "missing")


def test_the_first_bad_file_is_named_and_a_file_the_manifest_does_not_list_is_fine(tier: Any) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    tier.put("exec/A/step-2/added-later", b"not in the manifest")
    tier.put("exec/A/step-2/__1_0.distcp", b"")
    tier.put("exec/A/step-2/__0_0.distcp", b"")
    r = resolve(tier, "-verify")
    assert r.err == passing_over(tier, newest, "exec/A/step-2/__0_0.distcp", "size 0, manifest says 10240"), r


def test_a_manifest_planted_for_another_entry_fails_that_entry_naming_the_manifest(tier: Any) -> None:
    older = save(tier, 1)
    newest = save(tier, 2)
    tier.put(f"man/{newest}", tier.get(f"man/{older}"))
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    assert r.err == (
        f"publish: resolve: passing over {tier.where('pub/' + newest)}: {tier.where('man/' + newest)}: "
        f"damaged manifest: it is the manifest of '{older}', not of {newest}\n"
    )


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"{not json", "not JSON"),
        (
            b'{"entry":"x","entry":"y","files":[],"format":"publish.manifest.v1"}',
            "the key 'entry' appears twice",
        ),
        (
            b'{"entry":"E","files":[["../../etc/passwd",1,null]],"format":"publish.manifest.v1"}',
            "not a clean",
        ),
        (
            b'{"entry":"E","files":[["a",NaN,null]],"format":"publish.manifest.v1"}',
            "NaN is not a number",
        ),
        (
            b'{"entry":"E","files":[["a",1.5,null]],"format":"publish.manifest.v1"}',
            "not a whole number",
        ),
    ],
)
def test_a_damaged_manifest_fails_that_entry_naming_it(tier: Any, data: bytes, why: str) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    tier.put(f"man/{newest}", data.replace(b'"E"', json.dumps(newest).encode()))
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    head = f"publish: resolve: passing over {tier.where('pub/' + newest)}: {tier.where('man/' + newest)}: damaged manifest: "
    assert r.err.startswith(head) and why in r.err and r.err.count("\n") == 1, r


@pytest.fixture(params=["posix", _SEAWEEDFS])
def big_tier(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A POSIX root or one on SeaweedFS (a 64 MiB object in moto's memory is slow, and S3 is covered)."""
    if request.param == "posix":
        (tmp_path / "ckpt").mkdir()
        return Posix(tmp_path / "ckpt")
    return S3(Root(request.getfixturevalue("weed"), tmp_path))


def test_a_manifest_over_64_mib_fails_that_entry(big_tier: Any) -> None:
    tier = big_tier
    save(tier, 1)
    newest = save(tier, 2)
    tier.put(f"man/{newest}", b" " * (manifest.MANIFEST_LIMIT + 1))
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
    assert r.err.startswith(f"publish: resolve: passing over {tier.where('pub/' + newest)}: "), r
    assert f"man/{newest}" in r.err and str(manifest.MANIFEST_LIMIT) in r.err, r


def test_an_entry_without_a_manifest_passes_with_a_note_under_verify_only(tier: Any) -> None:
    save(tier, 1)
    newest = save(tier, 2)
    tier.delete(f"man/{newest}")
    r = resolve(tier, "-verify=deep")
    assert (r.code, r.out) == (0, tier.where("exec/A/step-2") + "\n"), r
    assert r.err == (
        f"publish: resolve: {tier.where('pub/' + newest)} has no manifest ({tier.where('man/' + newest)}): "
        "not verified\n"
    )
    r = resolve(tier)
    assert (r.code, r.out, r.err) == (0, tier.where("exec/A/step-2") + "\n", ""), r


def test_when_no_save_passes_resolve_fails(tier: Any) -> None:
    only = save(tier, 1)
    tier.put("exec/A/step-1/.metadata", b"short")
    r = resolve(tier, "-verify")
    assert (r.code, r.out) == (1, ""), r
    assert r.err == passing_over(tier, only, "exec/A/step-1/.metadata", "size 5, manifest says 40") + (
        f"publish: {tier.where('pub')}: none of its 1 entries names a save that exists and matches its manifest\n"
    )


@pytest.mark.parametrize("flags", [["-verify=false"], ["--verify=0"], ["-verify=deep", "-verify=false"]])
def test_verify_false_is_no_verify(tier: Any, flags: list[str]) -> None:
    save(tier, 1)
    save(tier, 2)
    tier.put("exec/A/step-2/.metadata", b"short")
    r = resolve(tier, *flags)
    assert (r.code, r.out, r.err) == (0, tier.where("exec/A/step-2") + "\n", ""), r


@pytest.mark.parametrize(
    "flags", [["-verify=true"], ["--verify"], ["-verify=1"], ["-verify=deep", "-verify"]]
)
def test_verify_true_checks_the_sizes(tier: Any, flags: list[str]) -> None:
    save(tier, 1)
    save(tier, 2)
    tier.put("exec/A/step-2/.metadata", b"short")
    r = resolve(tier, *flags)
    assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r


# -- the usage errors ----------------------------------------------------------------------------------------


def test_verify_then_deep_as_an_argument_is_a_usage_error(posix: Posix) -> None:
    r = posix.run("resolve", "-verify", "deep")
    assert r.code == 2, r
    assert r.err.startswith("publish: unexpected argument 'deep'\nusage: publish resolve "), r


@pytest.mark.parametrize("value", ["maybe", "Deep", "DEEP", "", "sizes"])
def test_a_verify_value_other_than_a_boolean_or_deep_is_a_usage_error(posix: Posix, value: str) -> None:
    r = posix.run("resolve", f"-verify={value}")
    assert r.code == 2, r
    assert r.err.startswith(
        f'publish: invalid boolean value "{value}" for -verify: must be true, false or deep\nusage: '
    ), r


def test_the_usage_shows_verify_as_a_flag_without_a_value(posix: Posix) -> None:
    r = posix.run("resolve", "-h")
    assert r.code == 0, r
    text = r.out + r.err
    assert "[-verify[=deep]]" in text and "\n  -verify\n" in text, text


# -- POSIX: links, and what is never read --------------------------------------------------------------------


def test_a_file_replaced_by_a_link_is_passed_over_never_followed(posix: Posix, tmp_path: Path) -> None:
    save(posix, 1)
    newest = save(posix, 2)
    outside = tmp_path / "outside.distcp"
    outside.write_bytes(SHARDS["__0_0.distcp"])  # the same bytes: only a link-follower would pass it
    target = posix.path / "exec/A/step-2/__0_0.distcp"
    target.unlink()
    target.symlink_to(outside)
    r = resolve(posix, "-verify=deep")
    assert (r.code, r.out) == (0, posix.where("exec/A/step-1") + "\n"), r
    assert r.err == passing_over(
        posix, newest, "exec/A/step-2/__0_0.distcp", "a symbolic link, not a regular file"
    )


def test_a_folder_replaced_by_a_link_is_passed_over(posix: Posix, tmp_path: Path) -> None:
    save(posix, 1)
    newest = save(posix, 2)
    (posix.path / "exec/A/step-2/sub").rename(tmp_path / "sub")
    (posix.path / "exec/A/step-2/sub").symlink_to(tmp_path / "sub")
    r = resolve(posix, "-verify")
    assert (r.code, r.out) == (0, posix.where("exec/A/step-1") + "\n"), r
    assert r.err.startswith(f"publish: resolve: passing over {posix.where('pub/' + newest)}: "), r
    assert "exec/A/step-2/sub/extra.bin: a folder on its path is not a directory" in r.err, r


def test_a_link_or_a_fifo_inside_a_save_is_no_file_of_it(posix: Posix, tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"never read")
    folder = posix.path / "exec/A/step-3"
    folder.mkdir(parents=True)
    (folder / "w.bin").write_bytes(b"w")
    (folder / "link").symlink_to(tmp_path / "secret")
    (folder / "dirlink").symlink_to(tmp_path)
    os.mkfifo(folder / "fifo")  # opening it to read would wait for a writer for ever
    r = posix.run("publish", "-timeout", "20s", str(folder), "3")
    assert r.code == 0, r
    entry = layout.name(0, 3, "exec/A/step-3")
    data = (posix.path / "man" / entry).read_bytes()
    assert manifest.decode(entry, data) == [("w.bin", 1, hashlib.sha256(b"w").hexdigest())]
    r = resolve(posix, "-verify=deep")
    assert (r.code, r.out, r.err) == (0, str(folder) + "\n", ""), r


def test_the_fast_path_reads_no_manifest(posix: Posix, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    from publish.stores.posix import PosixStore

    save(posix, 1)

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("resolve without -verify read a manifest")

    for name in ("read_manifest", "list_manifests", "manifest_times", "check_rows", "save_rows"):
        monkeypatch.setattr(PosixStore, name, refuse)
    r = resolve(posix)
    assert (r.code, r.out, r.err) == (0, posix.where("exec/A/step-1") + "\n", ""), r


def test_a_man_that_is_a_link_fails_publish_and_verify_names_it(posix: Posix, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (posix.path / "man").symlink_to(elsewhere)
    for rel, data in SHARDS.items():
        posix.put(f"exec/A/step-1/{rel}", data)
    r = posix.run("publish", posix.where("exec/A/step-1"), "1")
    assert (r.code, r.err) == (1, f"publish: {posix.where('man')} is a symbolic link\n"), r
    assert os.listdir(elsewhere) == [] and not (posix.path / "pub").exists()


# -- watch and prune -----------------------------------------------------------------------------------------


def test_a_watch_scan_writes_the_manifest_before_the_entry(
    posix: Posix, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    from publish.frameworks import FRAMEWORKS
    from publish.ops import Say
    from publish.ops.scan import Watcher
    from publish.rules.deadline import Deadline
    from publish.stores.posix import PosixStore

    folder = hf_save(posix.path / "exec/A", 7)
    store = PosixStore(posix.url)
    order: list[str] = []
    real_manifest, real_entry = PosixStore.write_manifest, PosixStore.create_entry
    monkeypatch.setattr(
        PosixStore, "write_manifest", lambda s, *a: (order.append("manifest"), real_manifest(s, *a))[1]
    )
    monkeypatch.setattr(
        PosixStore, "create_entry", lambda s, *a: (order.append("entry"), real_entry(s, *a))[1]
    )
    Watcher(store, Say(lambda s: None, lambda s: None), FRAMEWORKS["hf"], "exec/A", 0).scan(Deadline(30))
    assert order == ["manifest", "entry"]
    entry = layout.name(0, 7, "exec/A/checkpoint-7")
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert manifest.decode(entry, (posix.path / "man" / entry).read_bytes()) == rows_of(files, digests=True)


def test_a_watch_scan_on_s3_writes_the_manifest_before_the_entry(
    weed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    from publish.frameworks import FRAMEWORKS
    from publish.ops import Say
    from publish.ops.scan import Watcher
    from publish.rules.deadline import Deadline
    from publish.stores.s3 import S3Store

    tier = S3(Root(weed, tmp_path))
    local = hf_save(tmp_path / "local", 7)
    files = {p.name: p.read_bytes() for p in local.iterdir()}
    for name, data in files.items():
        tier.put(f"exec/A/checkpoint-7/{name}", data)
    store = S3Store(tier.root.bucket, tier.root.prefix, weed.credentials(), proxy=None, env={})
    order: list[str] = []
    real_manifest, real_entry = S3Store.write_manifest, S3Store.create_entry
    monkeypatch.setattr(
        S3Store, "write_manifest", lambda s, *a: (order.append("manifest"), real_manifest(s, *a))[1]
    )
    monkeypatch.setattr(S3Store, "create_entry", lambda s, *a: (order.append("entry"), real_entry(s, *a))[1])
    Watcher(store, Say(lambda s: None, lambda s: None), FRAMEWORKS["hf"], "exec/A", 0).scan(Deadline(30))
    assert order == ["manifest", "entry"]
    entry = layout.name(0, 7, "exec/A/checkpoint-7")
    assert manifest.decode(entry, tier.get(f"man/{entry}")) == rows_of(files, digests=False)


def test_prune_removes_the_manifests_of_the_entries_it_removes_and_dry_run_none(tier: Any) -> None:
    entries = [save(tier, s) for s in (1, 2, 3)]
    r = tier.run("prune", "-keep", "1", "-dry-run")
    assert r.code == 0, r
    assert all(tier.get(f"man/{e}") is not None for e in entries)
    r = tier.run("prune", "-keep", "1")
    assert r.code == 0, r
    assert [tier.get(f"man/{e}") is not None for e in entries] == [False, False, True]


def test_prune_removes_a_manifest_whose_entry_and_save_are_gone(tier: Any) -> None:
    kept = save(tier, 2)
    gone = layout.name(0, 1, "exec/A/step-1")
    tier.put(f"man/{gone}", manifest.encode(gone, []))  # as a prune cut after its entry and folder left it
    young = layout.name(0, 3, "exec/A/step-3")
    tier.put("exec/A/step-3/w", b"w")
    tier.put(f"man/{young}", manifest.encode(young, []))  # as a publication between manifest and entry
    r = tier.run("prune", "-keep", "1")
    assert r.code == 0, r
    assert tier.get(f"man/{gone}") is None
    assert tier.get(f"man/{young}") is not None and tier.get(f"man/{kept}") is not None


# -- S3: a deep check reads in bounded ranged GETs, retried as every GET is ----------------------------------


def test_s3_deep_check_reads_each_object_in_ranged_gets_of_8_mib(weed: Any, tmp_path: Path) -> None:
    from tests.support.fault_proxy import FaultProxy, Respond

    proxy = FaultProxy(weed.endpoint)
    try:
        tier = S3(Root(weed, tmp_path, endpoint=proxy.endpoint))
        big = os.urandom(20 << 20)
        files = {"__0_0.distcp": big, ".metadata": b"m"}
        save(tier, 1, files)
        newest = save(tier, 2, files)
        with_digests(tier, newest, files)
        proxy.reset()
        proxy.add(Respond(503, "SlowDown"), kind="GET", times=1)  # the manifest's GET, sent again
        r = resolve(tier, "-verify=deep")
        assert (r.code, r.out, r.err) == (0, tier.where("exec/A/step-2") + "\n", ""), r
        ranges = sorted(
            s.headers.get("range", "") for s in proxy.seen if s.kind == "GET" and "range" in s.headers
        )
        assert ranges == sorted(
            ["bytes=0-0", "bytes=0-8388607", "bytes=8388608-16777215", "bytes=16777216-20971519"]
        ), ranges
        flipped = bytearray(big)
        flipped[-1] ^= 0x80
        tier.put("exec/A/step-2/__0_0.distcp", bytes(flipped))
        r = resolve(tier, "-verify=deep")
        assert (r.code, r.out) == (0, tier.where("exec/A/step-1") + "\n"), r
        assert r.err.startswith(passing_over(tier, newest, "exec/A/step-2/__0_0.distcp", "sha256 ")[:-1]), r
    finally:
        proxy.stop()


def test_a_save_that_is_a_link_to_one_file_is_read_through_it_as_the_frameworks_do(posix: Posix) -> None:
    posix.put("exec/A/real/epoch=0-step=5.ckpt", b"weights")
    (posix.path / "exec/A/last.ckpt").symlink_to("real/epoch=0-step=5.ckpt")
    r = posix.run("publish", posix.where("exec/A/last.ckpt"), "5")
    assert r.code == 0, r
    entry = layout.name(0, 5, "exec/A/last.ckpt")
    rows = [("", 7, hashlib.sha256(b"weights").hexdigest())]
    assert manifest.decode(entry, (posix.path / "man" / entry).read_bytes()) == rows
    r = resolve(posix, "-verify=deep")
    assert (r.code, r.out, r.err) == (0, posix.where("exec/A/last.ckpt") + "\n", ""), r


def test_prune_removes_the_manifest_of_an_entry_it_removes_whose_folder_stays(tier: Any) -> None:
    tier.put("exec/A/step-1/inner/w", b"w")
    tier.put("exec/A/step-1/v", b"v")
    r = tier.run("publish", tier.where("exec/A/step-1/inner"), "1")
    assert r.code == 0, r
    r = tier.run("publish", tier.where("exec/A/step-1"), "2")
    assert r.code == 0, r
    inner, outer = layout.name(0, 1, "exec/A/step-1/inner"), layout.name(0, 2, "exec/A/step-1")
    r = tier.run("prune", "-keep", "1")
    assert (r.code, r.out) == (0, ""), r  # the folder stays: the kept entry holds it
    assert tier.get("exec/A/step-1/inner/w") == b"w"
    assert tier.get(f"man/{inner}") is None and tier.get(f"man/{outer}") is not None


def test_prune_removes_a_manifest_without_an_entry_once_an_hour_old_though_its_save_is_there(
    posix: Posix, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PUBLISH_BIN", raising=False)
    import time

    from publish.ops import Say
    from publish.ops.retention import UNBOUND_AGE, prune
    from publish.rules.deadline import UNBOUNDED
    from publish.stores.posix import PosixStore

    kept = save(posix, 2)
    left = layout.name(0, 1, "exec/A/step-1")
    posix.put("exec/A/step-1/w", b"w")
    posix.put(f"man/{left}", manifest.encode(left, []))  # its entry removed by hand
    quiet = Say(lambda s: None, lambda s: None)
    prune(UNBOUNDED, PosixStore(posix.url), quiet, 1)
    assert posix.get(f"man/{left}") is not None  # young, and its save is there: it may be being published
    later = time.time() + UNBOUND_AGE + 60
    monkeypatch.setattr(time, "time", lambda: later)
    prune(UNBOUNDED, PosixStore(posix.url), quiet, 1)
    assert posix.get(f"man/{left}") is None and posix.get(f"man/{kept}") is not None


#: A sparse file: 64 GiB of zeros that take no disk, and some 30 s or more of hashing on this machine.
HUGE = 64 << 30


def huge_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(HUGE)


def unhashed_note(where: str, count: int, total: int) -> str:
    return (
        f"publish: {where}: {count} of {total} files not hashed within half of what was left of -timeout: "
        "the manifest holds their sizes only (resolve -verify=deep checks their sizes)\n"
    )


def test_a_save_too_large_to_hash_in_time_is_published_with_sizes_for_what_was_not_hashed(
    posix: Posix,
) -> None:
    """Hashing takes at most half of what is left of -timeout: a file not hashed by then is recorded with its
    size and no digest, said on stderr, and the save is published all the same (a multi-terabyte save, or
    the last scan after a job's stop signal, is never held back by its hashing); -verify=deep then checks
    that file's size and the others' digests."""
    posix.put("exec/A/step-1/small", b"s" * 1000)
    huge_file(posix.path / "exec/A/step-1/big")
    where = posix.where("exec/A/step-1")
    r = posix.run("publish", "-timeout", "4s", where, "1")
    entry = layout.name(0, 1, "exec/A/step-1")
    assert (r.code, r.out) == (0, f"published {entry} (epoch 0, step 1, {where})\n"), r
    assert r.err == unhashed_note(where, 1, 2), r
    data = posix.get(f"man/{entry}")
    assert data is not None
    assert manifest.decode(entry, data) == [
        ("big", HUGE, None),
        ("small", 1000, hashlib.sha256(b"s" * 1000).hexdigest()),
    ]
    r = resolve(posix, "-verify=deep")
    assert (r.code, r.out, r.err) == (0, where + "\n", ""), r
    posix.put("exec/A/step-1/small", b"t" * 1000)  # a digest recorded is checked
    r = resolve(posix, "-verify=deep")
    assert (r.code, r.out) == (1, ""), r
    assert (
        f"passing over {posix.where('pub/' + entry)}: {posix.where('exec/A/step-1/small')}: sha256 " in r.err
    ), r
    posix.put("exec/A/step-1/small", b"s" * 1000)
    os.truncate(posix.path / "exec/A/step-1/big", HUGE - 1)  # a size recorded is checked
    r = resolve(posix, "-verify")
    assert (r.code, r.out) == (1, ""), r
    assert (
        passing_over(posix, entry, "exec/A/step-1/big", f"size {HUGE - 1}, manifest says {HUGE}") in r.err
    ), r


def test_a_watch_scan_publishes_a_save_too_large_to_hash_in_time(posix: Posix) -> None:
    """The same in a watch's scan: published, the unhashed file said."""
    folder = hf_save(posix.path / "exec/A", 7)
    huge_file(folder / "model-00001.safetensors")
    w = Watch(
        "-checkpoint", posix.url, "-framework", "hf", "-attempt", "A", "-timeout", "4s", "-interval", "1h"
    )
    entry = layout.name(0, 7, "exec/A/checkpoint-7")
    assert w.next_line(timeout=60) == f"published {entry} (epoch 0, step 7, {folder})"
    code, err = w.stop(timeout=60)
    assert code == 0, err
    assert err == unhashed_note(str(folder), 1, len(list(folder.iterdir()))), err


def test_verify_deep_is_bounded_by_the_timeout(posix: Posix) -> None:
    """A deep check cut short by -timeout says nothing of the save: resolve fails, naming -timeout, and no
    other save is chosen."""
    posix.put("exec/A/step-1/big", b"\0" * (64 << 20))
    r = posix.run("publish", posix.where("exec/A/step-1"), "1")
    assert (r.code, r.err) == (0, ""), r
    r = resolve(posix, "-verify=deep", "-timeout", "1ms")
    assert (r.code, r.out) == (1, ""), r
    assert r.err.startswith(f"publish: {posix.where('exec/A/step-1')}"), r  # its sizes, or reading big
    assert r.err.endswith(" did not finish within -timeout\n") and r.err.count("\n") == 1, r


def test_prune_leaves_a_name_in_man_that_is_no_entry_name_and_says_so(posix: Posix) -> None:
    save(posix, 1)
    posix.put("man/not-a-manifest", b"x")
    r = posix.run("prune", "-keep", "1")
    assert r.code == 0, r
    assert r.err.startswith(
        f"publish: prune: left {posix.where('man/not-a-manifest')} in place: not a manifest"
    ), r
    assert posix.get("man/not-a-manifest") == b"x"
