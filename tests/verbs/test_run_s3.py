"""``publish run`` on an s3:// root, against SeaweedFS: the trainer's saves land in the store, are published,
SIGTERM is passed on, the last scan publishes the save made on it, prune rotates, the next dispatch resumes.

The trainer writes straight into ``$PUBLISH_SAVES`` (an s3:// location under run), the way docs/frameworks.md
says an upload should go: the weights first, ``trainer_state.json`` (the marker) last.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import REPO, Lines, run_cli
from tests.support.running import Running
from tests.support.s3roots import Root
from tests.support.servers import Weed

pytestmark = pytest.mark.s3

# Saves every 2 steps (a pause between the weights and the marker, so a scan can meet a save without its
# marker), once more on SIGTERM, then exits 143; resumes from $PUBLISH_RESUME.
TRAINER = """
import json, os, signal, sys, time
sys.path.insert(0, os.environ["EXAMPLES"])
import boto3
from botocore.config import Config
from tiny_trainer import trainer_state

url = os.environ["PUBLISH_SAVES"]
bucket, _, prefix = url[len("s3://"):].partition("/")
s3 = boto3.client(
    "s3", endpoint_url=os.environ["T_ENDPOINT"], aws_access_key_id=os.environ["T_KEY"],
    aws_secret_access_key=os.environ["T_SECRET"], region_name=os.environ["T_REGION"],
    config=Config(s3={"addressing_style": "path"}),
)
def drop_expect(request, **kw):  # SeaweedFS can leave a PUT that expects a 100 unanswered (tests/cli/test_cli_s3.py)
    request.headers.pop("Expect", None)
s3.meta.events.register("before-send.s3", drop_expect)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))

def save(step):
    key = f"{prefix}/checkpoint-{step}"
    s3.put_object(Bucket=bucket, Key=f"{key}/model.safetensors", Body=os.urandom(1024))
    time.sleep(0.3)
    s3.put_object(Bucket=bucket, Key=f"{key}/trainer_state.json", Body=trainer_state(step, [1.0] * step))
    print(f"trainer: saved {url}/checkpoint-{step}", flush=True)

start = 0
resume = os.environ.get("PUBLISH_RESUME", "")
if resume:
    b, _, k = resume[len("s3://"):].partition("/")
    start = json.loads(s3.get_object(Bucket=b, Key=f"{k}/trainer_state.json")["Body"].read())["global_step"]
    print(f"trainer: resuming from {resume} at step {start}", flush=True)
step = start
while step < start + int(sys.argv[1]):
    step += 1
    time.sleep(0.1)
    if stop:
        save(step)
        print(f"trainer: stopped by SIGTERM at step {step}", flush=True)
        sys.exit(143)
    if step % 2 == 0:
        save(step)
"""


class RunS3(Running):
    """A ``publish run`` on the root, with the trainer's own key for the store in its environment."""

    def __init__(self, root: Root, *args: str) -> None:
        env = {
            "EXAMPLES": str(REPO / "examples"),
            "T_ENDPOINT": root.server.endpoint,
            "T_KEY": root.server.access_key,
            "T_SECRET": root.server.secret_key,
            "T_REGION": root.server.region,
        }
        Lines.__init__(self, "run", "-checkpoint", root.url, "-creds", root.creds, *args, env=env)


def trainer(tmp: Path, steps: int) -> list[str]:
    script = tmp / "s3_trainer.py"
    script.write_text(TRAINER)
    return [sys.executable, str(script), str(steps)]


def steps_of(lines: list[str], start: str) -> list[int]:
    return [int(line.rsplit("-", 1)[1]) for line in lines if line.startswith(start)]


def test_run_on_an_s3_root_publishes_passes_sigterm_on_scans_once_more_and_prunes(
    weed: Weed, tmp_path: Path
) -> None:
    root = Root(weed, tmp_path)
    # an hour between scans: the first finds nothing, only the last (after COMMAND exits) publishes
    r = RunS3(root, "-framework", "hf", "-keep", "2", "-attempt", "a", "-epoch", "3", "-interval", "1h",
              "--", *trainer(tmp_path, 400))  # fmt: skip
    r.wait_line(f"trainer: saved {root.url}/exec/a/checkpoint-6", timeout=60)
    r.proc.send_signal(signal.SIGTERM)
    code, err, lines = r.finish()
    assert code == 143, err
    assert "publish: run: no save to resume from" in err
    assert "publish: run: passing SIGTERM on to" in err
    saved = steps_of(lines, "trainer: saved ")
    stopped = [
        int(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("trainer: stopped by SIGTERM")
    ]
    assert stopped and saved[-1] == stopped[0] and saved[:3] == [2, 4, 6], lines
    last = saved[-1]
    published = [line for line in lines if line.startswith("published ")]
    assert published == [
        f"published {layout.name(3, s, f'exec/a/checkpoint-{s}')} (epoch 3, step {s}, {root.url}/exec/a/checkpoint-{s})"
        for s in saved
    ], lines  # every whole save, the one made on SIGTERM too, by the one scan after COMMAND exited
    gone = saved[:-2]
    assert [line for line in lines if line.startswith("removed ")] == [
        f"removed {root.url}/exec/a/checkpoint-{s}" for s in gone
    ], lines
    kept = saved[-2:]
    assert root.entries() == sorted(layout.name(3, s, f"exec/a/checkpoint-{s}") for s in kept)
    assert root.keys("exec/") == sorted(
        f"exec/a/checkpoint-{s}/{f}" for s in kept for f in ("model.safetensors", "trainer_state.json")
    )
    assert root.keys("tomb/") == []
    assert root.run("resolve").out == f"{root.url}/exec/a/checkpoint-{last}\n"

    # the next dispatch resolves the SIGTERM save, resumes from it and publishes with the greater epoch
    again = RunS3(root, "-framework", "hf", "-keep", "2", "-attempt", "b", "-epoch", "4",
                  "--", *trainer(tmp_path, 2))  # fmt: skip
    code, err, lines = again.finish()
    assert code == 0, err
    assert f"publish: run: resuming from {root.url}/exec/a/checkpoint-{last}\n" in err
    assert f"trainer: resuming from {root.url}/exec/a/checkpoint-{last} at step {last}" in lines
    new = last + 2 if last % 2 == 0 else last + 1  # its one save
    assert root.entries() == sorted(
        [layout.name(3, last, f"exec/a/checkpoint-{last}"), layout.name(4, new, f"exec/b/checkpoint-{new}")]
    ), lines
    assert run_cli("resolve", "-checkpoint", root.url, "-creds", root.creds).out == (
        f"{root.url}/exec/b/checkpoint-{new}\n"
    )
