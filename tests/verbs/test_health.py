"""Health checks without Prometheus (issue #34): ``status -max-age D`` and, with ``-mirror``,
``-max-mirror-lag D`` exit 1 with one line naming what is stale; otherwise exit 0 with the usual output.

- stale by age: the newest publication whose save exists, on either tier, was made longer than D ago (or
  there is none); a publication whose save was deleted by hand counts for nothing;
- stale by lag: the newest save published on the fast root and not yet on the mirror was published there
  longer than D ago.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from publish.rules import layout
from publish.rules.redact import shown
from tests.conftest import Result, run_cli
from tests.support.s3roots import Root
from tests.support.servers import S3Server, Weed
from tests.support.trainer_saves import hf_save

#: A hostile attempt folder: a leading dash, a newline, a non-ASCII letter.
ODD = "-a\nä"
HOURS = 3600.0


def publish(root: Path, step: int, attempt: str = "a", hours_ago: float = 0.0) -> tuple[Path, str]:
    """An HF save published by the command, its entry made ``hours_ago``; the folder and the entry name."""
    folder = hf_save(root / "exec" / attempt, step)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "0", str(folder), str(step))
    assert r.code == 0, r
    name = layout.name(0, step, folder.relative_to(root).as_posix())
    if hours_ago:
        then = time.time() - hours_ago * HOURS
        os.utime(root / "pub" / name, (then, then))
    return folder, name


def stale_line(r: Result) -> str:
    """The one line of a stale check: exit 1, nothing on stdout, one line on stderr."""
    assert (r.code, r.out) == (1, ""), r
    err = r.err
    assert err.count("\n") == 1 and err.startswith("publish: status: stale: "), err
    return err


def test_fresh_is_exit_0_with_the_usual_output(root: Path) -> None:
    publish(root, 1)
    plain = run_cli("status", "-checkpoint", str(root))
    r = run_cli("status", "-checkpoint", str(root), "-max-age", "1h")
    assert (r.code, r.err) == (0, ""), r
    assert r.out.splitlines()[:2] == plain.out.splitlines()[:2]
    doc = json.loads(run_cli("status", "-checkpoint", str(root), "-max-age", "1h", "-json").out)
    assert doc["publications"][0]["step"] == 1


def test_an_old_newest_publication_is_named_in_one_line(root: Path) -> None:
    folder, _ = publish(root, 7, attempt=ODD, hours_ago=3)
    err = stale_line(run_cli("status", "-checkpoint", str(root), "-max-age", "2h"))
    want = rf"publish: status: stale: the newest publication, {re.escape(shown(str(folder)))}, was made 3h0m\d+s ago, over -max-age 2h0m0s\n"
    assert re.fullmatch(want, err), err
    assert stale_line(run_cli("status", "-checkpoint", str(root), "-max-age", "2h", "-json")) == err


def test_a_fresh_entry_whose_save_is_gone_counts_for_nothing(root: Path) -> None:
    """The newest entry was made now, but its save was deleted by hand: the newest publication that resolve
    would answer is three hours old, and that is what is stale."""
    older, _ = publish(root, 1, hours_ago=3)
    newer, _ = publish(root, 2)
    shutil.rmtree(newer)
    err = stale_line(run_cli("status", "-checkpoint", str(root), "-max-age", "1h"))
    assert f"the newest publication, {older}, was made 3h0m" in err, err


def test_no_publication_at_all_is_stale(root: Path) -> None:
    err = stale_line(run_cli("status", "-checkpoint", str(root), "-max-age", "1h"))
    assert err == f"publish: status: stale: no publication whose save exists in {root}/pub, -max-age 1h0m0s\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-max-mirror-lag", "1h"], "-max-mirror-lag applies to -mirror: give -mirror"),
        (["-max-age", "0"], 'invalid value "0" for flag -max-age: must be positive'),
        (["-max-age", "-1h"], 'invalid value "-1h" for flag -max-age: must be positive'),
        (["-max-age", "5"], 'invalid value "5" for flag -max-age: '),
        (["-max-age", "1d"], 'invalid value "1d" for flag -max-age: '),
        (["-max-age"], "flag needs an argument: -max-age"),
    ],
)
def test_usage_errors(root: Path, args: list[str], message: str) -> None:
    r = run_cli("status", "-checkpoint", str(root), *args)
    assert r.code == 2, r
    assert r.err.startswith(f"publish: {message}"), r.err


# ------------------------------------------------------------------------------------------- two tiers


class Tiers:
    def __init__(self, server: S3Server, tmp: Path) -> None:
        self.fast = tmp / "fast"
        self.fast.mkdir()
        self.mirror = Root(server, tmp, init=False)

    def status(self, *more: str) -> Result:
        return run_cli(
            "status", "-checkpoint", str(self.fast), "-mirror", self.mirror.url, "-creds", self.mirror.creds,
            *more,
        )  # fmt: skip

    def mirrored(self, name: str) -> None:
        """The entry ``name`` and its save put on the mirror now."""
        path = layout.parse(name).path
        self.mirror.put(f"{path}/model.safetensors", b"w")
        self.mirror.put(f"pub/{name}")


@pytest.mark.s3
def test_mirror_lag_names_the_newest_save_not_yet_mirrored(weed: Weed, tmp_path: Path) -> None:
    t = Tiers(weed, tmp_path)
    _, first = publish(t.fast, 1, hours_ago=4)
    t.mirrored(first)
    folder, _ = publish(t.fast, 2, hours_ago=2)  # pending for two hours
    err = stale_line(t.status("-max-mirror-lag", "1h"))
    assert re.fullmatch(
        rf"publish: status: stale: the newest save not yet mirrored, {re.escape(str(folder))}, was published "
        r"2h0m\d+s ago, over -max-mirror-lag 1h0m0s\n",
        err,
    ), err
    r = t.status("-max-mirror-lag", "3h")
    assert (r.code, r.err) == (0, ""), r
    assert "both tiers, newest first" in r.out


@pytest.mark.s3
def test_max_age_looks_at_either_tier(weed: Weed, tmp_path: Path) -> None:
    """The fast root's publications are two hours old, the mirror's newest was made now: not stale by age
    (the job publishes; the fast root was lost or is another node's), and the pending one is stale by lag:
    one line says both when both are."""
    t = Tiers(weed, tmp_path)
    _, old = publish(t.fast, 1, hours_ago=2)
    t.mirrored(layout.name(0, 5, "exec/b/checkpoint-5"))
    r = t.status("-max-age", "1h")
    assert (r.code, r.err) == (0, ""), r
    err = stale_line(t.status("-max-age", "1h", "-max-mirror-lag", "1h"))
    assert "the newest save not yet mirrored" in err and "-max-age" not in err, err
    t.mirror.s3.delete_object(
        Bucket=t.mirror.bucket, Key=f"{t.mirror.prefix}/pub/{layout.name(0, 5, 'exec/b/checkpoint-5')}"
    )
    err = stale_line(t.status("-max-age", "1h", "-max-mirror-lag", "1h"))
    assert err.count("; ") == 1 and "-max-age 1h0m0s" in err and "-max-mirror-lag 1h0m0s" in err, err
    assert old  # published


@pytest.mark.s3
def test_s3_root_max_age(s3_server: S3Server, tmp_path: Path) -> None:
    """On S3 an entry's time is its LastModified (whole seconds)."""
    root = Root(s3_server, tmp_path)
    path = "exec/a/checkpoint-3"
    root.put(f"{path}/model.safetensors", b"w")
    root.put(f"pub/{layout.name(0, 3, path)}")
    r = root.run("status", "-max-age", "1h")
    assert (r.code, r.err) == (0, ""), r
    time.sleep(2.5)
    err = stale_line(root.run("status", "-max-age", "1s"))
    assert f"the newest publication, {root.url}/{path}, was made " in err, err
