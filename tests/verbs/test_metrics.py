"""-metrics FILE on watch and run: a Prometheus text-format file, written after every scan through a
temporary file renamed into place, read back with prometheus_client's own parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from publish.ops.metrics import CAPACITY, SERIES, Metrics
from tests.conftest import REPO, base_env, command, run_cli
from tests.support.trainer_saves import hf_save


def samples(path: Path) -> dict[str, tuple[dict[str, str], float]]:
    found = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            found[sample.name] = (sample.labels, sample.value)
    return found


#: The gauges of what the root holds (tests/verbs/test_capacity.py), written beside the counters.
CAPACITY_NAMES = tuple(name for name, _ in CAPACITY)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*cmd, *args], env=env, capture_output=True, text=True, errors="surrogateescape", timeout=120
    )


def test_run_writes_every_series_for_its_root(root: Path, tmp_path: Path) -> None:
    saves = root / "exec/A"
    hf_save(saves, 5)
    hf_save(saves, 9)
    (saves / "checkpoint-7").mkdir()
    (saves / "checkpoint-7/trainer_state.json").write_text("junk")  # faulty: passed over, counted
    prom = tmp_path / "m" / "publish.prom"
    prom.parent.mkdir()
    r = cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-keep", "1",
            "-metrics", str(prom), "--", "true")  # fmt: skip
    assert r.returncode == 1, r  # the faulty save
    got = samples(prom)
    names = [name.removesuffix("_total") for name, _, _ in SERIES]
    counters = {n: v for n, v in got.items() if not n.startswith(CAPACITY_NAMES)}
    assert sorted(n.removesuffix("_total") for n in counters) == sorted(names)
    for _, (labels, _) in counters.items():
        assert labels == {"root": str(root)}
    assert got["publish_last_published_step"][1] == 9
    assert got["publish_published_total"][1] == 2
    assert got["publish_scan_errors_total"][1] >= 1
    assert got["publish_prune_removed_total"][1] == 1
    assert got["publish_requeues_total"][1] == 0
    assert os.listdir(prom.parent) == ["publish.prom"]  # no temporary file left


def _watch_briefly(root: Path, metrics: str) -> subprocess.CompletedProcess[str]:
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [*cmd, "watch", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-interval", "50ms",
         "-metrics", metrics],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="surrogateescape",
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("published ")
    hf_save(root / "exec/A", 9)  # published by a later scan
    assert proc.stdout.readline().startswith("published ")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_watch_writes_after_each_scan(root: Path, tmp_path: Path) -> None:
    hf_save(root / "exec/A", 5)
    prom = tmp_path / "w.prom"
    r = _watch_briefly(root, str(prom))
    assert r.returncode == 0, r
    got = samples(prom)
    assert got["publish_last_published_step"][1] == 9 and got["publish_published_total"][1] == 2
    assert got["publish_scan_errors_total"][1] == 0


def test_an_unwritable_metrics_file_is_said_once_and_never_stops_publishing(
    root: Path, tmp_path: Path
) -> None:
    hf_save(root / "exec/A", 5)
    missing = tmp_path / "no-such-dir" / "w.prom"
    r = _watch_briefly(root, str(missing))
    assert r.returncode == 0, r  # both saves were published (_watch_briefly read their lines)
    assert (
        r.stderr.count(f"publish: -metrics {missing}: No such file or directory (publishing goes on)\n") == 1
    ), r


def test_a_root_label_is_escaped_as_the_text_format_says() -> None:
    m = Metrics("", 'a"b\\c\nd')
    families = list(text_string_to_metric_families(m.text()))
    assert {s.labels["root"] for f in families for s in f.samples} == {'a"b\\c\nd'}
    assert len(families) == len(SERIES)


@pytest.mark.parametrize("verb", ["watch", "run"])
def test_an_empty_metrics_flag_is_a_usage_error(root: Path, verb: str) -> None:
    tail = ["--", "true"] if verb == "run" else []
    r = run_cli(verb, "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-metrics=", *tail)
    assert r.code == 2 and "-metrics is empty" in r.err, r


def _raw_root(tmp_path: Path) -> Path:
    """A root whose name is bytes, not UTF-8 (``ckpt\\377``), with one save of attempt A waiting."""
    root = Path(os.fsdecode(bytes(tmp_path) + b"/ckpt\xff"))
    (root / "exec").mkdir(parents=True)
    hf_save(root / "exec/A", 5)
    return root


def test_run_writes_metrics_for_a_root_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Issue #31 (-metrics and a root that is not UTF-8): run publishes and the file is one the text format's
    parser reads, its root label the root's Go %q (as messages show such a name), not an internal error."""
    from publish.rules.go.gocompat import go_quote

    root = _raw_root(tmp_path)
    prom = tmp_path / "run.prom"
    r = cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-metrics", str(prom),
            "--", "true")  # fmt: skip
    assert r.returncode == 0 and "internal error" not in r.stderr, r
    got = samples(prom)
    assert got["publish_published_total"][1] == 1 and got["publish_scan_errors_total"][1] == 0
    assert {labels["root"] for labels, _ in got.values()} == {go_quote(str(root))}
    assert go_quote(str(root)).endswith('\\xff"')


def test_watch_writes_metrics_for_a_root_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Issue #31: watch on a root that is not UTF-8 with -metrics publishes and ends cleanly (it exited 1)."""
    root = _raw_root(tmp_path)
    prom = tmp_path / "watch.prom"
    r = _watch_briefly(root, str(prom))
    assert r.returncode == 0 and "internal error" not in r.stderr, r
    assert samples(prom)["publish_published_total"][1] == 2


def test_a_root_label_that_is_not_utf8_is_valid_text_format() -> None:
    """A label value is UTF-8 in the text format; a root of other bytes is written as its %q, readable back."""
    m = Metrics("", "/r/\udcff\udcfe\n")
    text = m.text()
    text.encode("utf-8")  # would raise for a raw byte
    families = list(text_string_to_metric_families(text))
    assert {s.labels["root"] for f in families for s in f.samples} == {'"/r/\\xff\\xfe\\n"'}


def _published_root(tmp_path: Path) -> tuple[Path, str]:
    """A root with one publication (exec/A/checkpoint-5), and what resolve answers for it."""
    root = tmp_path / "ckpt"
    hf_save(root / "exec/A", 5)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "1", str(root / "exec/A/checkpoint-5"), "5")
    assert r.code == 0, r
    (root / "tomb").mkdir(exist_ok=True)
    (root / "man").mkdir(exist_ok=True)
    return root, f"{root}/exec/A/checkpoint-5\n"


def _reserved(root: Path) -> dict[str, list[str]]:
    return {name: sorted(os.listdir(root / name)) for name in ("pub", "tomb", "man")}


@pytest.mark.parametrize("verb", ["watch", "run"])
@pytest.mark.parametrize(
    "where",
    [
        "pub/x.prom",
        "tomb/x.prom",
        "man/x.prom",
        "pub",  # the folder itself
        "exec/../pub/x.prom",  # `..`, taken as the file is written
        "exec/A/../../tomb/x.prom",
        "link-to-pub/x.prom",  # a symbolic link to pub/, outside the root
        "link-to-root/man/x.prom",  # a link to the root itself
        "link-to-root/exec/../pub/x.prom",
        "relative:pub/x.prom",  # relative to the working directory, which is the root
    ],
)
def test_a_metrics_file_in_the_roots_own_folders_is_refused(tmp_path: Path, verb: str, where: str) -> None:
    """Issue #31 (-metrics inside pub/, tomb/ or man/): refused as a bad flag value (exit 2) naming -metrics,
    before anything is written; pub/, tomb/ and man/ hold what they held and resolve answers as before
    (a metrics file in pub/ used to make every resolve fail)."""
    root, answer = _published_root(tmp_path)
    (tmp_path / "link-to-pub").symlink_to(root / "pub")
    (tmp_path / "link-to-root").symlink_to(root)
    before = _reserved(root)
    cwd: Path | None = None
    if where.startswith("relative:"):
        given, cwd = where.removeprefix("relative:"), root
    elif where.startswith("link-"):
        given = str(tmp_path / where)
    else:
        given = f"{root}/{where}"
    tail = ["--", "true"] if verb == "run" else []
    cmd = command() or [sys.executable, "-m", "publish"]
    proc = subprocess.Popen(
        [*cmd, verb, "-checkpoint", str(root), "-framework", "hf", "-attempt", "A", "-interval", "50ms",
         "-metrics", given, *tail],
        env={**base_env(), "PYTHONPATH": str(REPO)}, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=60)  # a watch that took the file would run until stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err
    assert err.startswith(f"publish: -metrics {given}: ") and f"usage: publish {verb}" in err, err
    assert _reserved(root) == before
    resolved = run_cli("resolve", "-checkpoint", str(root))
    assert (resolved.code, resolved.out) == (0, answer), resolved


def test_a_metrics_file_beside_the_roots_folders_is_written(tmp_path: Path) -> None:
    """The refusal is of pub/, tomb/ and man/ alone: a file in the root itself, in exec/, or in a folder whose
    name starts with pub is written as before."""
    root, answer = _published_root(tmp_path)
    (root / "pubs").mkdir()
    for where in ("x.prom", "exec/x.prom", "pubs/x.prom"):
        r = run_cli("run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A",
                    "-metrics", f"{root}/{where}", "--", "true")  # fmt: skip
        assert r.code == 0, r
        assert samples(root / where)["publish_last_published_step"][1] == 5
    assert run_cli("resolve", "-checkpoint", str(root)).out == answer


def test_a_metrics_file_in_pub_by_a_bind_mount_is_refused(tmp_path: Path) -> None:
    """Issue #31: a folder that is the root's pub/ by another way in than a link (a bind mount, as a
    container may show the root twice) is refused as pub/ itself is."""
    import shutil

    probe = (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("no user and mount namespace here (unshare -rm)")
    root, answer = _published_root(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    before = _reserved(root)
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    r = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(root / "pub"), str(other),
         *cmd, "run", "-checkpoint", str(root), "-framework", "hf", "-attempt", "A",
         "-metrics", str(other / "x.prom"), "--", "true"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"publish: -metrics {other}/x.prom: its folder {other} is in {other}, "), (
        r.stderr
    )
    assert _reserved(root) == before
    assert run_cli("resolve", "-checkpoint", str(root)).out == answer
