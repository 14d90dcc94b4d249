"""Two tiers, a POSIX fast root and its S3 mirror, as the two-tier model test (tests/promise/test_model_tiers.py)
drives them: each verb run with a deadline (a hang is a failure), a watch as a real process stopped with
SIGTERM or killed with SIGKILL, what a trainer and an operator do to the fast root, and what both tiers hold,
read back without the command.

Like tests/support/model_support.py it knows nothing of the code under test: entry names are the layout the
spec gives (20-digit epoch and step, RFC 4648 base32 of the path), and the tiers are read with os and boto3."""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import Result, Watch, spawn
from tests.support.binaries import catches_sigterm
from tests.support.crash import tree
from tests.support.model_support import LIMIT, Hung, call, check_no_secret, entry_name, unb32
from tests.support.s3roots import Root
from tests.support.secret_log import record_output
from tests.support.trainer_saves import hf_save

#: The files of a save: name, bytes.
Files = dict[str, bytes]

STATE_FILE = "trainer_state.json"


def parts(name: str) -> tuple[int, int, str]:
    """The epoch, step and path an entry name stands for."""
    return int(name[:20]), int(name[21:41]), unb32(name[42:]) or ""


def key(name: str) -> tuple[int, int, str]:
    """An entry's place among the others: (epoch, step, name), the newest the greatest."""
    epoch, step, _ = parts(name)
    return epoch, step, name


def children(pid: int) -> set[int]:
    """The child processes of every thread of ``pid``; a thread that ends while we look is passed over."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            continue
    return found


class TwoTiers:
    """A fast root at BASE/fast and a mirror at a fresh prefix of the server's shared bucket, with neighbours
    nothing may touch: BASE/fastx (a sibling sharing the root's name as a prefix, laid out as a root) and
    BASE/outside beside the fast root; the bare key PREFIX and keys under PREFIXx/ and PREFIX-other/ beside
    the mirror."""

    def __init__(self, server: Any, base: Path, restore: Any) -> None:
        self.base = base
        self.fast = base / "fast"
        self.fast.mkdir(parents=True)
        self.mirror = Root(server, base, init=False)
        self.secrets: tuple[str, ...] = (server.secret_key,)
        self.restore = restore
        sib = base / "fastx"
        hf_save(sib / "exec" / "A", 10)
        (sib / "pub").mkdir()
        (sib / "pub" / entry_name(1, 10, "exec/A/checkpoint-10")).touch()
        (base / "outside").mkdir()
        (base / "outside" / "sentinel").write_bytes(b"beside the fast root")
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        for k, body in [
            (prefix, b"bare prefix object"),
            (f"{prefix}x/exec/A/checkpoint-10/model.safetensors", b"neighbour"),
            (f"{prefix}x/pub/{entry_name(1, 10, 'exec/A/checkpoint-10')}", b""),
            (f"{prefix}-other/exec/A/checkpoint-5/model.safetensors", b"other"),
        ]:
            s3.put_object(Bucket=bucket, Key=k, Body=body)
        self._sentinel = self.sentinel()
        self._children = children(os.getpid())

    # -- the command -----------------------------------------------------------------------------------------

    def flags(self) -> list[str]:
        return ["-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds]

    def fast_location(self, rel: str) -> str:
        return f"{self.fast}/{rel}"

    def mirror_location(self, rel: str) -> str:
        return f"{self.mirror.url}/{rel}"

    def run(self, verb: str, *args: str, mirror: bool = True, last_scan: bool = False) -> Result:
        """A verb in-process, given the mirror (or, ``mirror=False``, the fast root alone); a hang fails.
        ``last_scan``: a watch told to stop before it starts (its last scan, then with -mirror the uploads)."""
        where = self.flags() if mirror else ["-checkpoint", str(self.fast)]
        return call([verb, *where, *args], self.secrets, self.restore, last_scan)

    def watch(self, *args: str) -> Result:
        """``publish watch -mirror`` as a process, stopped with SIGTERM after a scan or two (its last scan,
        then the uploads), its output read to the end; one that never comes to catch SIGTERM, or does not end
        within LIMIT of it, is a hang."""
        proc = spawn("watch", *self.flags(), *args, "-interval", "100ms")
        try:
            deadline = time.monotonic() + LIMIT
            while proc.poll() is None and not catches_sigterm(proc.pid):
                if time.monotonic() > deadline:
                    raise Hung(f"publish watch {' '.join(args)} did not catch SIGTERM within {LIMIT} s")
                time.sleep(0.02)
            if proc.poll() is None:  # else it ended by itself (a missing root)
                time.sleep(0.3)  # a scan or two
                proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=LIMIT)
            except subprocess.TimeoutExpired:
                raise Hung(
                    f"publish watch {' '.join(args)} did not end within {LIMIT} s of SIGTERM"
                ) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        record_output("watch", out, err)
        result = Result(proc.returncode, out, err)
        check_no_secret(result, self.secrets)
        return result

    def killed_watch(self, *args: str, delay: float) -> Result:
        """``publish watch -mirror`` as a process, killed with SIGKILL ``delay`` seconds after it printed a
        ``published`` line for the fast root (mid upload, mostly), with the process groups of its children;
        the lines it printed, and exit code -9."""
        w = Watch(*self.flags(), *args, "-interval", "100ms")
        mark = f", {self.fast}/"
        try:
            deadline = time.monotonic() + LIMIT
            while True:
                if time.monotonic() > deadline:
                    raise Hung(f"publish watch {' '.join(args)} published nothing within {LIMIT} s")
                try:
                    line = w.next_line(timeout=0.1)
                except queue.Empty:
                    if w.proc.poll() is not None and w.lines.empty():
                        code, err = w.finish(LIMIT)
                        raise AssertionError(
                            f"the watch ended by itself ({code}) before it published: {err!r}"
                        ) from None
                    continue
                if line.startswith("published ") and mark in line:
                    break
            time.sleep(delay)
            kids = children(w.proc.pid)
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait(timeout=LIMIT)
            for pid in kids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        finally:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        code, err = w.finish(LIMIT)
        result = Result(code, "".join(line + "\n" for line in w.seen), err)
        check_no_secret(result, self.secrets)
        return result

    # -- what a trainer and an operator do to the fast root ----------------------------------------------------

    def write_save(self, attempt: str, step: int, whole: bool, shards: Files) -> None:
        """A Hugging Face save at exec/<attempt>/checkpoint-<step>: model.safetensors, the shards, and with
        ``whole`` its trainer_state.json (without it, cut off before the trainer wrote it)."""
        folder = hf_save(self.fast / "exec" / attempt, step)
        for name, data in shards.items():
            (folder / name).write_bytes(data)
        if not whole:
            (folder / STATE_FILE).unlink()

    def write(self, rel: str, data: bytes) -> None:
        (self.fast / rel).write_bytes(data)

    def lose_fast(self) -> None:
        """The node-local disk is gone: the fast root with everything in it."""
        shutil.rmtree(self.fast)

    # -- what the tiers hold -----------------------------------------------------------------------------------

    def fast_exists(self) -> bool:
        return self.fast.is_dir()

    def fast_names(self, folder: str) -> set[str]:
        p = self.fast / folder
        return set(os.listdir(p)) if p.is_dir() else set()

    def fast_saves(self) -> dict[str, Files]:
        """Every folder two levels below exec/ with its files (none of the model's saves has a subfolder)."""
        found: dict[str, Files] = {}
        ex = self.fast / "exec"
        if not ex.is_dir():
            return found
        for attempt in sorted(os.listdir(ex)):
            for child in sorted(os.listdir(ex / attempt)):
                c = ex / attempt / child
                found[f"exec/{attempt}/{child}"] = {f.name: f.read_bytes() for f in c.iterdir()}
        return found

    def mirror_objects(self) -> dict[str, str]:
        """Every key under the mirror's prefix (relative to it, .publish-root included) with its ETag."""
        found: dict[str, str] = {}
        under = self.mirror.prefix + "/"
        pages = self.mirror.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.mirror.bucket, Prefix=under
        )
        for page in pages:
            for o in page.get("Contents", []):
                found[o["Key"][len(under) :]] = o["ETag"].strip('"')
        return found

    def mirror_holds(self, rel: str, etag: str, data: bytes) -> bool:
        """The mirror's object ``rel`` (listed with ``etag``) holds exactly ``data``: its MD5 ETag settles it
        when it matches, else the object is read."""
        if etag == hashlib.md5(data).hexdigest():
            return True
        got = self.mirror.s3.get_object(Bucket=self.mirror.bucket, Key=f"{self.mirror.prefix}/{rel}")
        return bool(got["Body"].read() == data)

    def sentinel(self) -> Any:
        """The neighbours of both tiers: BASE/fastx and BASE/outside, and every key that starts with the
        mirror's prefix but lies outside it."""
        s3, bucket, prefix = self.mirror.s3, self.mirror.bucket, self.mirror.prefix
        keys: dict[str, Any] = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                if not o["Key"].startswith(prefix + "/"):
                    keys[o["Key"]] = o["ETag"]
        return tree(self.base / "fastx", self.base / "outside"), keys

    def sentinel_unchanged(self) -> bool:
        return bool(self.sentinel() == self._sentinel)

    def processes_left(self) -> set[int]:
        """The child processes of this one that were not there when the tiers were made."""
        return children(os.getpid()) - self._children
