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

from publish.verbs.metrics import CAPACITY, SERIES, Metrics
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
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


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
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
