"""One checkpoint root, POSIX or S3, as the stateful model test (tests/promise/test_model.py) drives it: the command
run with a deadline (a hang is a failure), what a trainer, an operator or a neighbour does to the root, and
what the root holds, read back without the command.

The model itself knows nothing of the code under test: entry and tombstone names are computed here from
the layout the spec gives (RFC 4648 base32 of the path, 20-digit epoch and step)."""

from __future__ import annotations

import base64
import io
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tests.conftest import Result, Watch
from tests.support.crash import tree
from tests.support.secret_log import record_output, remember_secret

#: Seconds any one command may take before the step counts as hung.
LIMIT = 60.0

MODEL_FILE = "model.safetensors"
STATE_FILE = "trainer_state.json"


def b32(path: str) -> str:
    return base64.b32encode(path.encode("utf-8")).decode("ascii").rstrip("=")


def unb32(text: str) -> str | None:
    try:
        return base64.b32decode(text + "=" * (-len(text) % 8)).decode("utf-8")
    except Exception:
        return None


def entry_name(epoch: int, step: int, path: str) -> str:
    return f"{epoch:020d}-{step:020d}-{b32(path)}"


class Hung(AssertionError):
    pass


def fresh_registry() -> Any:
    """The credential registry as it is now, and a function that puts it back: each in-process run starts
    from it, as each run of the real command starts with none of the credentials an earlier run read."""
    from publish.rules import redact

    saved = (set(redact._secrets), set(redact._windows), set(redact._short))

    def restore() -> None:
        for live, kept in zip((redact._secrets, redact._windows, redact._short), saved):
            live.clear()
            live.update(kept)

    return restore


def call(argv: list[str], secrets: tuple[str, ...], restore: Any, last_scan: bool = False) -> Result:
    """Run the command in-process in a thread of its own, failing when it does not end within LIMIT.

    ``last_scan``: a watch is told to stop before it starts, so it makes only the scan it makes on its way
    out (the one a job's SIGTERM asks for)."""
    from publish.cli import main

    restore()
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    if last_scan:
        stop.set()

    def run() -> None:
        try:
            codes.append(main(argv, {}, out, err, cwd="/", stop=stop))
        except BaseException as e:  # reported in the test's thread
            failures.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(LIMIT)
    if worker.is_alive():
        raise Hung(f"publish {' '.join(argv)} did not end within {LIMIT} s")
    if failures:
        raise failures[0]
    result = Result(codes[0], out.getvalue(), err.getvalue())
    record_output(argv[0], result.out, result.err)
    check_no_secret(result, secrets)
    return result


def check_no_secret(result: Result, secrets: tuple[str, ...]) -> None:
    for s in secrets:
        assert s not in result.out and s not in result.err, "a secret value was printed"


def watch_process(args: list[str], secrets: tuple[str, ...]) -> Result:
    """``publish watch`` as a real process: started, left to scan, stopped with SIGTERM; a process that does
    not end within LIMIT of the signal is a hang."""
    w = Watch(*args, "-interval", "100ms")
    if not _wait_until_caught(w.proc, signal.SIGTERM):
        if w.proc.poll() is None:
            w.proc.kill()
            w.finish()
            raise Hung(f"publish watch {' '.join(args)} did not set up its SIGTERM handler within {LIMIT} s")
        code, err = w.finish()  # it ended by itself (a missing root)
    else:
        time.sleep(0.3)  # a scan or two
        try:
            code, err = w.stop(signal.SIGTERM, timeout=LIMIT)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
            raise Hung(f"publish watch {' '.join(args)} did not end within {LIMIT} s of SIGTERM") from None
    result = Result(code, "".join(line + "\n" for line in w.seen), err)
    check_no_secret(result, secrets)
    return result


def _wait_until_caught(proc: subprocess.Popen[str], sig: int) -> bool:
    """Wait until ``proc`` catches ``sig`` (Linux: SigCgt in /proc/PID/status), as a job's SIGTERM only ever
    comes to a watch that has started; False when it does not within LIMIT, or has ended."""
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                status = f.read()
        except OSError:
            return False
        for line in status.splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) >> (sig - 1) & 1:
                return True
        time.sleep(0.02)
    return False


# -- the two kinds of root ----------------------------------------------------------------------------------


class PosixRoot:
    """A POSIX root at BASE/ckpt, with neighbours that nothing may touch: BASE/ckptx (a sibling sharing the
    root's name as a prefix, itself laid out as a root) and BASE/outside."""

    kind = "posix"

    def __init__(self, base: Path, exists: bool, restore: Any) -> None:
        self.base = base
        self.path = base / "ckpt"
        self.loc = str(self.path)
        self.secrets: tuple[str, ...] = ()
        self.restore = restore
        if exists:
            self.path.mkdir(parents=True)
        sib = base / "ckptx"
        (sib / "exec" / "A" / "checkpoint-10").mkdir(parents=True)
        (sib / "exec" / "A" / "checkpoint-10" / MODEL_FILE).write_bytes(b"neighbour")
        (sib / "pub").mkdir()
        (sib / "pub" / entry_name(1, 10, "exec/A/checkpoint-10")).touch()
        (base / "outside" / "checkpoint-5").mkdir(parents=True)
        (base / "outside" / "checkpoint-5" / MODEL_FILE).write_bytes(b"outside")
        self._sentinel = self.sentinel()

    # the command
    def args(self) -> list[str]:
        return ["-checkpoint", self.loc]

    def location(self, rel: str) -> str:
        return f"{self.loc}/{rel}" if rel else self.loc

    def run(self, verb: str, *args: str, last_scan: bool = False) -> Result:
        return call([verb, *self.args(), *args], self.secrets, self.restore, last_scan)

    def watch_process(self, *args: str) -> Result:
        return watch_process([*self.args(), *args], self.secrets)

    def cut_prune(self, keep: int, cut: int, land: bool) -> tuple[bool, Result]:
        """A prune stopped dead after ``cut`` of its steps (each tombstone, entry, half a folder): True when
        it was cut short."""
        from publish.ops import Say
        from publish.ops.retention import prune
        from publish.rules.deadline import UNBOUNDED
        from publish.stores.posix import PosixStore
        from tests.support.crash import Cut, Killed

        out: list[str] = []
        err: list[str] = []
        killed: list[bool] = []

        def run() -> None:
            try:
                prune(UNBOUNDED, Cut(PosixStore(self.loc), cut), Say(out.append, err.append), keep)  # type: ignore[arg-type]
                killed.append(False)
            except Killed:
                killed.append(True)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(LIMIT)
        if worker.is_alive():
            raise Hung("a cut prune did not end")
        assert killed, "the cut prune failed otherwise"
        return killed[0], Result(0, "".join(x + "\n" for x in out), "".join(f"publish: {x}\n" for x in err))

    # what others do to the root
    def exists(self) -> bool:
        return self.path.is_dir()

    def write(self, rel: str, data: bytes) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def unlink(self, rel: str) -> None:
        (self.path / rel).unlink(missing_ok=True)

    def delete_folder(self, rel: str) -> None:
        shutil.rmtree(self.path / rel)

    def plant(self, folder: str, name: str) -> None:
        self.write(f"{folder}/{name}", b"")

    def loop(self, rel: str) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(p.name, p)  # ln -s loop exec/A/loop: a link to itself

    # what the root holds
    def names(self, folder: str) -> set[str]:
        p = self.path / folder
        return set(os.listdir(p)) if p.is_dir() else set()

    def saves(self) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """Every folder two levels below exec/ with its files (name: bytes), and the links found there."""
        found: dict[str, dict[str, Any]] = {}
        links: set[str] = set()
        ex = self.path / "exec"
        if not ex.is_dir():
            return found, links
        for attempt in sorted(os.listdir(ex)):
            a = ex / attempt
            if a.is_symlink() or not a.is_dir():
                links.add(f"exec/{attempt}")
                continue
            for child in sorted(os.listdir(a)):
                c = a / child
                rel = f"exec/{attempt}/{child}"
                if c.is_symlink():
                    links.add(rel)
                elif c.is_dir():
                    found[rel] = {
                        str(f.relative_to(c)): f.read_bytes()
                        for f in sorted(c.rglob("*"))
                        if f.is_file() and not f.is_symlink()
                    }
                else:
                    links.add(rel)  # a plain file: never made by the model
        return found, links

    def digest(self, data: bytes) -> Any:
        return data

    def sentinel(self) -> Any:
        return tree(self.base / "ckptx", self.base / "outside")

    def sentinel_unchanged(self) -> bool:
        return self.sentinel() == self._sentinel


OVERLAP_ACCESS_KEY = "OVERLAPKEY000001"  # also an attempt's name: exec/OVERLAPKEY000001/...
OVERLAP_SECRET_KEY = "model-00000000-secret-1"  # holds eight zeros, as every entry name does


class S3Root:
    """An s3:// root: a fresh prefix in the server's shared bucket, reached through a fault proxy (so a prune
    can be cut at its Nth request), with neighbours nothing may touch: the bare key PREFIX, and keys under
    PREFIXx/ and PREFIX-other/."""

    kind = "s3"

    def __init__(self, server: Any, proxy: Any, tmp: Path, exists: bool, restore: Any) -> None:
        from tests.support.s3roots import client, creds_dir

        self.server = server
        self.proxy = proxy
        self.bucket = server.shared_bucket()
        self.prefix = "model-" + uuid.uuid4().hex[:10]
        self.loc = f"s3://{self.bucket}/{self.prefix}"
        self.s3 = client(server)
        self.admin_creds = creds_dir(tmp, server, proxy.endpoint)
        self.overlap_creds = self._overlap_dir(tmp)
        self.creds = self.admin_creds
        self.secrets: tuple[str, ...] = (server.secret_key, OVERLAP_SECRET_KEY)
        self.restore = restore
        for key, body in [
            (self.prefix, b"bare prefix object"),
            (f"{self.prefix}x/exec/A/checkpoint-10/{MODEL_FILE}", b"neighbour"),
            (f"{self.prefix}x/pub/{entry_name(1, 10, 'exec/A/checkpoint-10')}", b""),
            (f"{self.prefix}-other/exec/A/checkpoint-5/{MODEL_FILE}", b"other"),
        ]:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        if exists:
            self.write("README", b"an operator's note")  # anything at all makes an S3 root exist
        self._sentinel = self.sentinel()

    def _overlap_dir(self, tmp: Path) -> str:
        """Credentials whose access key is a path element of the root and whose secret shares eight zeros
        with every entry name; the access key is data here, so only the secret is registered as one."""
        d = tmp / f"overlap-{uuid.uuid4().hex[:8]}"
        d.mkdir(mode=0o700)
        for name, value in {
            "access_key_id": OVERLAP_ACCESS_KEY,
            "secret_access_key": OVERLAP_SECRET_KEY,
            "endpoint": self.proxy.endpoint,
            "region": self.server.region,
        }.items():
            (d / name).write_text(value + "\n")
            (d / name).chmod(0o600)
        remember_secret(OVERLAP_SECRET_KEY)
        return f"file:{d}"

    def args(self) -> list[str]:
        return ["-checkpoint", self.loc, "-creds", self.creds]

    def location(self, rel: str) -> str:
        return f"{self.loc}/{rel}" if rel else self.loc

    def run(self, verb: str, *args: str, last_scan: bool = False) -> Result:
        return call([verb, *self.args(), *args], self.secrets, self.restore, last_scan)

    def watch_process(self, *args: str) -> Result:
        return watch_process([*self.args(), *args], self.secrets)

    def cut_prune(self, keep: int, cut: int, land: bool) -> tuple[bool, Result]:
        """A prune whose requests from the (cut+1)th on are refused, before they reach the store or (``land``)
        after they landed there with the answer lost."""
        from tests.support.fault_proxy import Action, FaultProxy, Respond

        class LandThenRefuse(Action):
            def handle(self, p: FaultProxy, h: Any, req: Any) -> None:
                p.upstream_call(req)
                Respond(403, "AccessDenied").handle(p, h, req)

        seen = [0]

        def from_nth(req: Any) -> bool:
            seen[0] += 1
            return seen[0] > cut

        self.proxy.reset()
        self.proxy.add(LandThenRefuse() if land else Respond(403, "AccessDenied"), match=from_nth)
        try:
            r = self.run("prune", "-keep", str(keep))
        finally:
            self.proxy.reset()
        return r.code != 0, r

    def _keys(self, under: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=under):
            for o in page.get("Contents", []):
                found[o["Key"]] = o["Size"]
        return found

    def exists(self) -> bool:
        return bool(
            self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + "/", MaxKeys=1).get("KeyCount")
        )

    def has_marker(self) -> bool:
        return f"{self.prefix}/.publish-root" in self._keys(f"{self.prefix}/.publish-root")

    def write(self, rel: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}", Body=data)

    def unlink(self, rel: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")

    def delete_folder(self, rel: str) -> None:
        for key in self._keys(f"{self.prefix}/{rel}/"):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def plant(self, folder: str, name: str) -> None:
        self.write(f"{folder}/{name}", b"")

    def loop(self, rel: str) -> None:
        raise AssertionError("S3 has no links")

    def names(self, folder: str) -> set[str]:
        under = f"{self.prefix}/{folder}/"
        return {k[len(under) :] for k in self._keys(under)}

    def saves(self) -> tuple[dict[str, dict[str, Any]], set[str]]:
        found: dict[str, dict[str, Any]] = {}
        under = f"{self.prefix}/"
        for key, size in self._keys(under + "exec/").items():
            parts = key[len(under) :].split("/")
            if len(parts) < 4:
                continue
            found.setdefault("/".join(parts[:3]), {})["/".join(parts[3:])] = size
        return found, set()

    def digest(self, data: bytes) -> Any:
        return len(data)

    def sentinel(self) -> Any:
        keys = {self.prefix: self._keys(self.prefix).get(self.prefix)}
        keys.update(self._keys(self.prefix + "x/"))
        keys.update(self._keys(self.prefix + "-other/"))
        return keys

    def sentinel_unchanged(self) -> bool:
        return self.sentinel() == self._sentinel
