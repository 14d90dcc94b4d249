"""The README and the pages under docs/: every relative link leads somewhere, and the README's commands run.

Links: every relative link in README.md and docs/*.md names a file that exists, and an ``#anchor`` on a
Markdown file matches one of its headings as GitHub turns headings into anchors.

Commands: every ``publish ...`` line of a fenced shell block in the README is run by a test.  The quick
start's block runs here, line by line, against a temporary POSIX root (the ``publish`` of this checkout,
through ``python -m publish`` as tests/conftest.py ``spawn`` starts it); the S3 root's block runs here against
moto, with a ``file:`` source in place of its ``-creds``; a block that is an ``examples/`` script as it is
must be checked against that script by a test that runs the script (tests/jobs/test_slurm.py does it for
examples/slurm_run.sh, on a real Slurm).  A README block with a ``publish`` line of any other kind fails
here until a test runs it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO, spawn
from tests.support.s3roots import Root
from tests.support.servers import Moto, moto_s3  # noqa: F401 (fixture)

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELLS = {"sh", "bash", "shell", "console"}
PUBLISH_LINE = re.compile(r"^\s*(?:exec\s+|\w+=\$\()?publish\s")
WAIT = 120  # seconds: a deadline for each command, far above what each takes


# --- Markdown, as GitHub reads the parts these checks need ---------------------------------------------


@dataclass
class Block:
    info: str  # the fence's info string: sh, bash, yaml, ...
    text: str
    heading: str  # the nearest heading above it


@dataclass
class Page:
    headings: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # the lines outside fenced blocks


def parse(text: str) -> Page:
    page = Page()
    fence: str | None = None
    info, heading = "", ""
    body: list[str] = []
    for line in text.split("\n"):
        if fence is None:
            m = re.match(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)", line)
            if m:
                fence, info, body = m.group(1), m.group(2), []
                continue
            h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if h:
                heading = h.group(1)
                page.headings.append(heading)
            page.prose.append(line)
        elif line.strip().startswith(fence):
            page.blocks.append(Block(info, "".join(x + "\n" for x in body), heading))
            fence = None
        else:
            body.append(line)
    return page


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in page.headings:
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Page) -> list[str]:
    """The targets of the page's inline links, outside code."""
    out = []
    for line in page.prose:
        line = re.sub(r"(`+)(.+?)\1", "code", line)
        out += re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line)
    return out


def test_slug_is_githubs() -> None:
    assert slug("Slurm: `publish run`") == "slurm-publish-run"
    assert slug("`vault:` — a Vault or OpenBao KV secret") == "vault--a-vault-or-openbao-kv-secret"
    assert slug("Where the specification is silent, `publish` does this") == (
        "where-the-specification-is-silent-publish-does-this"
    )
    assert anchors(parse("# A\n## A\n```\n# not a heading\n```\n")) == {"a", "a-1"}


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(path: Path) -> None:
    page = parse(path.read_text())
    bad = []
    for target in links(page):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:: not a file of the checkout
            continue
        name, _, anchor = target.partition("#")
        dest = (path.parent / name).resolve() if name else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(parse(dest.read_text())):
            bad.append(f"{target}: no heading of {dest.relative_to(REPO)} has that anchor")
    assert bad == [], f"{path.relative_to(REPO)}: broken links"


def test_the_readme_links_every_page() -> None:
    """The README's table of pages names every page of docs/ but the measurement pages it reaches through
    performance.md."""
    targets = {t.partition("#")[0] for t in links(parse((REPO / "README.md").read_text()))}
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md") if not p.name.startswith("perf-")}
    assert pages - targets == set()


# --- the README's commands ---------------------------------------------------------------------------


def readme_blocks() -> list[Block]:
    return [b for b in parse((REPO / "README.md").read_text()).blocks if b.info in SHELLS]


def publish_lines(block: Block) -> list[str]:
    return [line for line in block.text.splitlines() if PUBLISH_LINE.match(line)]


def the_block(heading: str) -> Block:
    found = [b for b in readme_blocks() if b.heading == heading]
    assert len(found) == 1, f"one shell block under the README's {heading!r}"
    assert publish_lines(found[0]), f"the README's {heading!r} block has publish lines"
    return found[0]


QUICK_START = "Quick start"
S3_ROOT = "An S3 root"
TWO_TIERS = "Two tiers: fast storage, mirrored to S3"


def covering_test(block: Block) -> str | None:
    """The test that runs this block: an examples/ script shown as it is, checked by a test of that script."""
    for script in sorted((REPO / "examples").glob("*.sh")):
        if block.text == script.read_text():
            for test in sorted((REPO / "tests").rglob("test_*.py")):
                source = test.read_text()
                if f'"{script.name}"' in source and '"README.md"' in source:
                    return f"{test.relative_to(REPO)} ({script.relative_to(REPO)})"
    return None


def test_every_publish_line_of_the_readme_is_run_by_a_test() -> None:
    unrun = []
    for block in readme_blocks():
        if block.heading in (QUICK_START, S3_ROOT, TWO_TIERS) or not publish_lines(block):
            continue
        if covering_test(block) is None:
            unrun += publish_lines(block)
    assert unrun == [], "README publish lines no test runs: run them in tests/house/test_docs.py"
    assert covering_test(the_block("Slurm: `publish run`")) is not None


@dataclass
class Ran:
    line: str
    code: int
    out: str
    err: str


def run_block(block: Block, values: dict[str, str], args: list[str], cwd: Path, **env: str) -> list[Ran]:
    """Run a block's lines as bash would, for the forms the README uses: ``export NAME=VALUE``,
    ``NAME=VALUE``, and ``[exec] publish ...`` with ``"$NAME"`` and ``"$@"`` words.  ``values`` replaces
    the value a line gives a variable (the test's own root, credentials); ``args`` is ``"$@"``."""
    shell: dict[str, str] = {}
    ran = []
    for line in block.text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export" and len(words) == 2 and "=" in words[1]:
            name, _, value = words[1].partition("=")
            shell[name] = env[name] = values.get(name, value)
            continue
        if len(words) == 1 and re.match(r"^\w+=", words[0]):
            name, _, value = words[0].partition("=")
            shell[name] = values.get(name, value)
            continue
        assert PUBLISH_LINE.match(line), f"a line this test cannot run: {line}"
        if words[0] == "exec":
            words = words[1:]
        argv: list[str] = []
        for word in words[1:]:
            if word == "$@":
                argv += args
            elif word.startswith("$"):
                argv.append(shell[word[1:]])
            else:
                assert "$" not in word, f"an expansion this test cannot do: {word}"
                argv.append(word)
        proc = spawn(*argv, env=env, cwd=cwd)
        try:
            out, err = proc.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        ran.append(Ran(line, proc.returncode, out, err))
        assert proc.returncode == 0, f"{line}\nexit {proc.returncode}\n{out}\n{err}"
    return ran


def published(out: str) -> list[str]:
    """The saves a run's stdout says it published, in order."""
    return re.findall(r"^published \S+ \(epoch \d+, step \d+, (.*)\)$", out, re.M)


def test_the_quick_start_runs(tmp_path: Path) -> None:
    block = the_block(QUICK_START)
    root = tmp_path / "ckpt" / "run-1"
    ran = run_block(block, {"CHECKPOINT": str(root)}, [], REPO)
    assert len(ran) == len(publish_lines(block))
    by_verb: dict[str, list[Ran]] = {}
    for r in ran:
        by_verb.setdefault(shlex.split(r.line)[1], []).append(r)
    assert by_verb["init"][0].out == f"created {root}\n"
    first, second = by_verb["run"]
    assert published(first.out) and published(second.out)
    newest = published(first.out)[-1]
    assert f"trainer: resuming from {newest} at step" in second.out, "the second run resumes from the first"
    assert by_verb["resolve"][0].out == published(second.out)[-1] + "\n"
    status = by_verb["status"][0].out
    assert f"publications in {root}/pub: 2, newest first" in status, status  # -keep 2
    assert f"{published(second.out)[-1]} (exists)" in status


@pytest.mark.s3
def test_the_s3_root_runs(moto_s3: Moto, tmp_path: Path) -> None:  # noqa: F811
    block = the_block(S3_ROOT)
    root = Root(moto_s3, tmp_path, init=False)
    assert "CREDS" in block.text and "CHECKPOINT" in block.text
    # The job's last line runs as in a Slurm job (-requeue needs SLURM_JOB_ID), with a COMMAND that saves
    # nothing: the root, the credentials and the flags are what this checks.
    ran = run_block(
        block,
        {"CHECKPOINT": root.url, "CREDS": root.creds},
        ["python3", "-c", "pass"],
        tmp_path,
        SLURM_JOB_ID="7",
    )
    assert len(ran) == len(publish_lines(block))
    verbs = [shlex.split(r.line)[1 if r.line.startswith("publish") else 2] for r in ran]
    assert verbs == ["init", "probe", "run"]
    assert ran[0].out == f"created {root.url}\n"
    assert ran[1].out == f"{root.url} ok, credentials from {root.creds}\n"
    assert "no save to resume from" in ran[2].err


#: A trainer for the two-tier recipe: one DCP save (step 10) in $PUBLISH_SAVES, the marker last, no torch.
DCP_TRAINER = (
    "import os, pathlib; from tests.support.dcp_shapes import write_save; "
    "write_save(pathlib.Path(os.environ['PUBLISH_SAVES']) / 'step-10')"
)


@pytest.mark.s3
def test_the_two_tiers_run(moto_s3: Moto, tmp_path: Path) -> None:  # noqa: F811
    """The README's two-tier lines, as a job runs them: the mirror made, the save published on the fast root,
    uploaded, published on the mirror; then the mirror answers once the fast root is gone."""
    block = the_block(TWO_TIERS)
    mirror = Root(moto_s3, tmp_path, init=False)
    fast = tmp_path / "nvme" / "run-7"
    values = {"CHECKPOINT": str(fast), "MIRROR": mirror.url, "CREDS": mirror.creds}
    ran = run_block(block, values, ["python3", "-c", DCP_TRAINER], REPO, SLURM_JOB_ID="7")
    assert len(ran) == len(publish_lines(block)) == 2
    assert ran[0].out == f"created {mirror.url}\n"
    saves = published(ran[1].out)
    assert len(saves) == 2, ran[1]
    local, remote = saves if saves[0].startswith("/") else saves[::-1]
    assert local.startswith(f"{fast}/exec/") and local.endswith("/step-10")
    assert remote == mirror.url + local[len(str(fast)) :]
    assert {k.rpartition("/")[2] for k in mirror.keys(local[len(str(fast)) + 1 :])} >= {".metadata"}
    import shutil

    shutil.rmtree(fast)
    r = spawn("resolve", "-checkpoint", str(fast), "-mirror", mirror.url, "-creds", mirror.creds, "-verify")
    out, err = r.communicate(timeout=WAIT)
    assert (r.returncode, out) == (0, remote + "\n"), err
