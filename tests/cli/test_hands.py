"""What an operator's hands expect: `help VERB`, `--version` and the build it names, shell completion generated
from the verb table, and `status` listing each save once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import publish
from publish import cli
from publish.frameworks import FRAMEWORKS
from tests.conftest import REPO, command, need, run_cli
from tests.support.dcp_shapes import write_save
from tests.support.trainer_saves import hf_save

FRAMEWORK_NAMES = ["hf", "dcp", "snapshot", "lightning", "megatron", "nemo", "deepspeed"]
ALL_VERBS = [*cli.VERBS, "version", "help", "completion"]


def flags_of(verb: str) -> set[str]:
    return {"-" + flag.name for flag in cli.command(verb).fs.defined()}


# --- help VERB ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", cli.VERBS)
def test_help_verb_prints_its_usage_to_stdout(verb: str) -> None:
    r = run_cli("help", verb)
    assert (r.code, r.out, r.err) == (0, cli.command(verb).usage(), "")


@pytest.mark.parametrize("verb", ["version", "help", "completion"])
def test_help_names_the_usage_of_the_verbs_main_answers_itself(verb: str) -> None:
    r = run_cli("help", verb)
    assert (r.code, r.err) == (0, "") and r.out.startswith(f"usage: publish {verb}")


def test_help_alone_still_lists_the_verbs() -> None:
    r = run_cli("help")
    assert (r.code, r.out, r.err) == (0, cli.verb_list(), "")
    assert all(f"\n  {verb} " in r.out for verb in ALL_VERBS)


def test_help_of_an_unknown_verb_is_a_usage_error_naming_it() -> None:
    r = run_cli("help", "nosuchverb")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("publish: unknown verb 'nosuchverb'\n")


def test_help_takes_one_verb() -> None:
    r = run_cli("help", "status", "prune")
    assert r.code == 2 and r.out == "" and r.err.startswith("publish: unexpected argument 'prune'")


# --- version --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["-version", "--version"])
def test_dash_version_is_version(spelling: str) -> None:
    assert run_cli(spelling) == run_cli("version")
    assert run_cli(spelling).out.startswith(f"publish {publish.__version__}\n")


def test_version_names_the_build_python_and_freezer_from_the_source() -> None:
    r = run_cli("version")
    if command() is not None:  # a frozen program: its build lines are checked in tests/house/test_binary.py
        assert len(r.lines) == 4 and r.lines[3] in (
            "freezer: python",
            "freezer: pyinstaller",
            "freezer: nuitka",
        )
        return
    python = "{}.{}.{}".format(*sys.version_info[:3])
    assert (r.code, r.err) == (0, "")
    assert r.lines == [
        f"publish {publish.__version__}",
        "build: none",
        f"python: {python}",
        "freezer: source",
    ]


def test_version_takes_no_argument() -> None:
    r = run_cli("--version", "x")
    assert r.code == 2 and r.out == "" and r.err.startswith("publish: unexpected argument 'x'")


def test_version_imports_nothing_beyond_the_command_table() -> None:
    """`version` is what a module install and a job's first line run: it loads nothing publish.cli has not
    but the verbs the command answers itself and the small module that reads the build (the standard
    library's platform, sysconfig... stay out)."""
    code = (
        "import io, sys; from publish.cli import main; before = set(sys.modules); "
        "out = io.StringIO(); code = main(['version'], {}, out, sys.stderr); "
        "print(code, sorted(set(sys.modules) - before))"
    )
    r = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (r.stdout, r.stderr) == ("0 ['publish.cli.buildinfo', 'publish.cli.own']\n", "")


# --- completion -----------------------------------------------------------------------------------------------


def script(shell: str) -> str:
    r = run_cli("completion", shell)
    assert (r.code, r.err) == (0, ""), r.err
    return r.out


def bash_complete(words: list[str]) -> list[str]:
    """COMPREPLY of the completion function `complete -p publish` names, the last word being completed."""
    prog = (
        script("bash")
        + "\nspec=$(complete -p publish) || exit 3; fn=${spec##*-F }; fn=${fn%% *}\n"
        + 'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}\n'
        + '"$fn" publish "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        + 'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", prog, "bash", *words],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    return sorted(line for line in r.stdout.splitlines() if line)


def test_bash_completes_the_verbs() -> None:
    assert bash_complete(["publish", ""]) == sorted(ALL_VERBS)
    assert bash_complete(["publish", "st"]) == ["status"]
    assert bash_complete(["publish", "-"]) == []


@pytest.mark.parametrize("verb", cli.VERBS)
def test_bash_completes_each_verbs_flags_from_its_flag_set(verb: str) -> None:
    assert bash_complete(["publish", verb, "-"]) == sorted(flags_of(verb))
    assert "-checkpoint" in bash_complete(["publish", verb, "-ch"])


def test_bash_completes_the_framework_names() -> None:
    assert bash_complete(["publish", "watch", "-framework", ""]) == sorted(FRAMEWORK_NAMES)
    assert bash_complete(["publish", "run", "-interval", "5s", "--framework", "d"]) == ["dcp", "deepspeed"]
    assert bash_complete(["publish", "status", "-framework", "l"]) == ["lightning"]
    assert sorted(FRAMEWORKS) == sorted(FRAMEWORK_NAMES)


def test_bash_offers_no_flag_where_go_takes_none() -> None:
    assert bash_complete(["publish", "status", "-json", "-keep", "-"]) == []  # -keep's value
    assert bash_complete(["publish", "publish", "SAVE", "-"]) == []  # flags end at the first argument
    assert bash_complete(["publish", "run", "-framework", "hf", "--", "-"]) == []  # COMMAND's own


def test_bash_completes_help_and_completion_arguments() -> None:
    assert bash_complete(["publish", "help", ""]) == sorted(ALL_VERBS)
    assert bash_complete(["publish", "completion", ""]) == ["bash", "zsh"]
    assert bash_complete(["publish", "version", ""]) == []


def test_bash_completes_the_checkpoint_as_a_directory(tmp_path: Path) -> None:
    (tmp_path / "roots").mkdir()
    (tmp_path / "rootfile").write_bytes(b"")
    assert bash_complete(["publish", "resolve", "-checkpoint", f"{tmp_path}/ro"]) == [f"{tmp_path}/roots"]


def zsh() -> str:
    found = shutil.which("zsh")
    need(found is not None, "zsh is not installed (./test installs it as root on Debian)")
    assert found is not None
    return found


def zsh_complete(words: list[str]) -> list[str]:
    """What the zsh script hands to zsh's completion functions, for ``words`` (the last one being completed):
    _arguments, _describe and compadd replaced by functions that print what they are given."""
    prog = (
        "_arguments() { print -rl -- ARGUMENTS $@ }\n"
        "_describe() { print -rl -- DESCRIBE ${(P)${@[-1]}} }\n"
        "compadd() { print -rl -- COMPADD $@ }\n"
        "_files() { print -rl -- FILES $@ }\n"
        "compdef() { : }\n"
        'source "$1"; shift\n'
        'words=("$@"); CURRENT=$#\n'
        "_publish\n"
    )
    return _zsh(prog, words)


def _zsh(prog: str, words: list[str]) -> list[str]:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"publish-completion-{os.getpid()}.zsh"
    path.write_text(script("zsh"))
    try:
        r = subprocess.run(
            [zsh(), "-f", "-c", prog, "zsh", str(path), *words], capture_output=True, text=True, timeout=60
        )
    finally:
        path.unlink()
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    return r.stdout.splitlines()


def test_zsh_script_parses_and_declares_itself() -> None:
    text = script("zsh")
    assert text.startswith("#compdef publish\n")
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"publish-completion-n-{os.getpid()}.zsh"
    path.write_text(text)
    try:
        r = subprocess.run([zsh(), "-n", str(path)], capture_output=True, text=True, timeout=60)
    finally:
        path.unlink()
    assert (r.returncode, r.stderr) == (0, "")
    # sourced (`source <(publish completion zsh)` after compinit), it registers itself
    assert _zsh('compdef() { print -r -- COMPDEF $@ }; source "$1"', []) == ["COMPDEF _publish publish"]


def test_zsh_completes_the_verbs() -> None:
    out = zsh_complete(["publish", ""])
    assert out[0] == "DESCRIBE"
    assert sorted(line.split(":")[0] for line in out[1:]) == sorted(ALL_VERBS)


@pytest.mark.parametrize("verb", cli.VERBS)
def test_zsh_completes_each_verbs_flags_from_its_flag_set(verb: str) -> None:
    out = zsh_complete(["publish", verb, "-"])
    assert out[0] == "ARGUMENTS"
    specs = [line for line in out[1:] if line.startswith("-") and "[" in line]  # not _arguments' own -S, -A
    assert {re.split(r"[=\[]", spec)[0] for spec in specs} == flags_of(verb)
    framework = [spec for spec in specs if spec.startswith("-framework")]
    if "-framework" in flags_of(verb):
        assert framework and framework[0].endswith(":(" + " ".join(FRAMEWORK_NAMES) + ")"), framework


def test_zsh_completes_help_and_completion_arguments() -> None:
    out = zsh_complete(["publish", "help", ""])
    assert out[0] == "DESCRIBE" and sorted(line.split(":")[0] for line in out[1:]) == sorted(ALL_VERBS)
    assert zsh_complete(["publish", "completion", ""]) == ["COMPADD", "bash", "zsh"]


def test_completion_needs_a_known_shell() -> None:
    r = run_cli("completion")
    assert r.code == 2 and r.out == "" and "missing argument SHELL" in r.err
    r = run_cli("completion", "fish")
    assert r.code == 2 and r.out == "" and r.err.startswith("publish: unknown shell 'fish': bash or zsh\n")


# --- status: each save once -----------------------------------------------------------------------------------


def test_status_lists_twenty_whole_hf_saves_once_each_as_complete(tmp_path: Path) -> None:
    for step in range(1, 21):
        hf_save(tmp_path / "exec" / "A", step)
    r = run_cli("status", "-checkpoint", str(tmp_path))
    assert (r.code, r.err) == (0, ""), r.err
    saves = [line for line in r.lines if line.startswith(("  complete", "  incomplete", "  faulty"))]
    assert saves == [
        f"  complete   {tmp_path}/exec/A/checkpoint-{step} (hf, step {step})"
        for step in sorted(range(1, 21), key=str)
    ]


def test_a_save_more_than_one_rule_matches_shows_the_complete_verdict_else_the_specific_one(
    tmp_path: Path,
) -> None:
    a = tmp_path / "exec" / "A"
    hf_save(a, 3)  # hf: complete; dcp: incomplete
    write_save(a / "checkpoint-4")  # a DCP save named as hf names its own: dcp complete, hf incomplete
    (a / "checkpoint-5").mkdir()  # neither: hf's rule is the more specific
    (a / "global_step6").mkdir()  # deepspeed's rule over dcp's
    write_save(a / "step7")  # dcp's rule alone
    r = run_cli("status", "-checkpoint", str(tmp_path), "-json")
    assert (r.code, r.err) == (0, ""), r.err
    saves = [(s["path"], s["framework"], s["state"]) for s in json.loads(r.out)["saves"]]
    assert saves == [
        ("exec/A/checkpoint-3", "hf", "complete"),
        ("exec/A/checkpoint-4", "dcp", "complete"),
        ("exec/A/checkpoint-5", "hf", "incomplete"),
        ("exec/A/global_step6", "deepspeed", "incomplete"),
        ("exec/A/step7", "dcp", "complete"),
    ]
    text = run_cli("status", "-checkpoint", str(tmp_path))
    assert f"  complete   {a}/checkpoint-4 (dcp, step 4)" in text.lines
    assert f"  incomplete {a}/global_step6 (deepspeed, step 6)" in text.lines
    assert sum(" (" in line and "step" in line for line in text.lines) == 5


def test_status_framework_limits_the_verdicts_to_one_framework(tmp_path: Path) -> None:
    a = tmp_path / "exec" / "A"
    hf_save(a, 3)
    write_save(a / "step7")
    r = run_cli("status", "-checkpoint", str(tmp_path), "-json", "-framework", "dcp")
    assert (r.code, r.err) == (0, ""), r.err
    saves = [(s["path"], s["framework"], s["state"]) for s in json.loads(r.out)["saves"]]
    assert saves == [("exec/A/checkpoint-3", "dcp", "incomplete"), ("exec/A/step7", "dcp", "complete")]
    r = run_cli("status", "-checkpoint", str(tmp_path), "-framework", "hf")
    assert (r.code, r.err) == (0, ""), r.err
    assert f"  complete   {a}/checkpoint-3 (hf, step 3)" in r.lines
    assert not any("step7" in line for line in r.lines)


def test_status_framework_must_be_one_of_the_frameworks(tmp_path: Path) -> None:
    r = run_cli("status", "-checkpoint", str(tmp_path), "-framework", "tf")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(
        'publish: invalid value "tf" for flag -framework: must be hf, dcp, snapshot, lightning, megatron, nemo, deepspeed\n'
    )


def test_status_text_says_none_under_an_empty_section(tmp_path: Path) -> None:
    r = run_cli("status", "-checkpoint", str(tmp_path), "-keep", "3")
    assert (r.code, r.err) == (0, ""), r.err
    lines = r.lines
    # the free space of the filesystem under the root, whatever it is
    space = lines.pop(2)
    assert space.startswith(
        f"space: the saves of 0 publications hold 0 B; the filesystem of {tmp_path} has "
    ), space
    assert lines == [
        f"publications in {tmp_path}/pub: 0, newest first",
        "  (none)",
        f"saves not published under {tmp_path}/exec/ (0 attempts)",
        "  (none)",
        "folders under exec/<attempt>/ that no entry names and no framework's naming rule matches:",
        "  (none)",
        f"tombstones in {tmp_path}/tomb (an interrupted prune; the next prune finishes them):",
        "  (none)",
        "prune -keep 3 would remove entries: 0, and:",
        "  (none)",
    ]
