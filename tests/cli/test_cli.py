"""The command on POSIX roots, through main() (or the binary named by PUBLISH_BIN): verbs, flags, env, exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from publish.rules import layout
from tests.conftest import REPO, Result, base_env, command, run_cli


def entries(root: Path) -> list[str]:
    pub = root / "pub"
    return sorted(os.listdir(pub)) if pub.exists() else []


def save(root: Path, rel: str) -> Path:
    p = root / rel
    p.mkdir(parents=True, exist_ok=True)
    (p / "model.bin").write_bytes(b"w")
    return p


def publish(root: Path, rel: str, step: int, epoch: int = 0) -> Result:
    save(root, rel)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", str(epoch), str(root / rel), str(step))
    assert r.code == 0, r.err
    return r


# --- The verb list, help, version


def test_no_verb_lists_verbs_and_exits_2() -> None:
    r = run_cli()
    assert r.code == 2 and "resolve" in r.err and "probe" in r.err and r.out == ""


def test_help_lists_verbs_and_exits_0() -> None:
    r = run_cli("help")
    assert r.code == 0 and "watch" in r.out


def test_help_starts_every_verbs_summary_in_one_column() -> None:
    """Issue #32: `completion`, the longest verb, pushed its summary a column right of the others'."""
    r = run_cli("help")
    rows = [line for line in r.out.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    verbs = [row.split()[0] for row in rows]
    assert "completion" in verbs and "resolve" in verbs
    columns = {len(row) - len(row[2:].split(" ", 1)[1].lstrip()) for row in rows}
    assert len(columns) == 1, r.out


def test_version() -> None:
    r = run_cli("version")
    assert r.code == 0 and r.out.startswith("publish ") and r.out.endswith("\n")


def test_unknown_verb() -> None:
    r = run_cli("resolv")
    assert r.code == 2 and r.err.startswith("publish: unknown verb 'resolv'")


@pytest.mark.parametrize("verb", ["resolve", "watch", "publish", "prune", "probe"])
@pytest.mark.parametrize("flag", ["-h", "-help", "--help"])
def test_verb_help_prints_usage_to_stderr_and_exits_0(verb: str, flag: str) -> None:
    r = run_cli(verb, flag)
    assert r.code == 0 and r.out == ""
    assert r.err.startswith(f"usage: publish {verb}") and "-checkpoint" in r.err


# --- Go flag semantics and messages


@pytest.mark.parametrize(
    "args, message",
    [
        (["-x"], "flag provided but not defined: -x"),
        (["-checkpoint"], "flag needs an argument: -checkpoint"),
        (["-probe=maybe"], 'invalid boolean value "maybe" for -probe: parse error'),
        (["---checkpoint", "x"], "bad flag syntax: ---checkpoint"),
        (["-timeout", "10"], 'invalid value "10" for flag -timeout: parse error'),
        (["-timeout", "0s"], 'invalid value "0s" for flag -timeout: must be positive'),
        (["-chk", "x"], "flag provided but not defined: -chk"),
    ],
)
def test_flag_errors_are_go_messages_and_exit_2(args: list[str], message: str) -> None:
    r = run_cli("resolve", *args)
    assert r.code == 2
    assert r.err.startswith(f"publish: {message}\n")
    assert "usage: publish resolve" in r.err


def test_flag_forms_are_equivalent(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    want = f"{root}/exec/A/checkpoint-1\n"
    for args in (
        ["-checkpoint", str(root)],
        [f"-checkpoint={root}"],
        ["--checkpoint", str(root)],
        [f"--checkpoint={root}"],
    ):
        r = run_cli("resolve", *args)
        assert (r.code, r.out) == (0, want)


def test_flag_given_twice_takes_the_last(root: Path, tmp_path: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    r = run_cli("resolve", "-checkpoint", str(tmp_path / "missing"), "-checkpoint", str(root))
    assert r.code == 0 and r.out == f"{root}/exec/A/checkpoint-1\n"


@pytest.mark.parametrize("value", ["false", "0", "f", "F", "FALSE", "False"])
def test_probe_false_is_accepted_on_posix(root: Path, value: str) -> None:
    assert run_cli("resolve", "-checkpoint", str(root), f"-probe={value}").code == 0


@pytest.mark.parametrize("value", ["", "=true", "=1", "=T", "=TRUE", "=True", "=t"])
def test_probe_true_is_a_usage_error_on_posix(root: Path, value: str) -> None:
    r = run_cli("resolve", "-checkpoint", str(root), f"-probe{value}")
    assert r.code == 2 and "-probe" in r.err


def test_probe_false_as_separate_word_is_a_positional(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root), "-probe", "false")
    assert r.code == 2 and "unexpected argument 'false'" in r.err


def test_double_dash_ends_flags(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root), "--", "-x")
    assert r.code == 2 and "unexpected argument '-x'" in r.err


@pytest.mark.parametrize("flag", [["-creds", "file:/x"], ["-proxy", "http://p:3128"], ["-creds="]])
def test_s3_flags_with_posix_root_are_usage_errors(root: Path, flag: list[str]) -> None:
    for verb in ("resolve", "prune"):
        r = run_cli(verb, "-checkpoint", str(root), *flag)
        assert r.code == 2, r.err
        assert "applies only to s3:// roots" in r.err


def test_timeout_with_posix_root_is_accepted(root: Path) -> None:
    assert run_cli("resolve", "-checkpoint", str(root), "-timeout", "1s").code == 0


def test_probe_verb_with_posix_root_is_a_usage_error(root: Path) -> None:
    r = run_cli("probe", "-checkpoint", str(root))
    assert r.code == 2 and "POSIX" in r.err


# --- Environment


def test_checkpoint_from_environment(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    r = run_cli("resolve", env={"CHECKPOINT": str(root)})
    assert r.out == f"{root}/exec/A/checkpoint-1\n"


def test_flag_wins_over_environment(root: Path, tmp_path: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root), env={"CHECKPOINT": str(tmp_path / "missing")})
    assert r.code == 0


def test_no_root_anywhere_is_a_usage_error() -> None:
    r = run_cli("resolve")
    assert r.code == 2 and "-checkpoint" in r.err
    assert run_cli("resolve", env={"CHECKPOINT": ""}).code == 2


def test_explicitly_empty_checkpoint_flag_is_a_usage_error(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint=", env={"CHECKPOINT": str(root)})
    assert r.code == 2 and "-checkpoint is empty" in r.err


def test_other_variables_change_nothing(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    noise = {
        "AWS_ACCESS_KEY_ID": "x",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "VAULT_ADDR": "::bad",
        "PUBLISH_CHECKPOINT": "/nope",
        "ROOT": "/nope",
    }
    r = run_cli("resolve", "-checkpoint", str(root), env=noise)
    assert (r.code, r.out) == (0, f"{root}/exec/A/checkpoint-1\n")


# --- Roots


def test_missing_root_exits_1_for_every_verb(tmp_path: Path) -> None:
    missing = str(tmp_path / "typo")
    for args in (
        ["resolve"],
        ["prune"],
        ["publish", missing + "/exec/A/c", "1"],
        ["watch", "-framework", "hf", "-attempt", "A"],
    ):
        r = run_cli(args[0], "-checkpoint", missing, *args[1:])
        assert r.code == 1, (args, r.err)
        assert r.out == ""
        assert f"checkpoint root {missing} does not exist" in r.err


def test_root_that_is_a_file_exits_1(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    r = run_cli("resolve", "-checkpoint", str(tmp_path / "f"))
    assert r.code == 1 and "is not a directory" in r.err


@pytest.mark.parametrize("scheme", ["gs://bucket/x", "s3:/bucket", "file:/data", "a:b"])
def test_other_schemes_exit_1(scheme: str) -> None:
    r = run_cli("resolve", "-checkpoint", scheme)
    assert r.code == 1 and "not supported" in r.err and r.err.startswith("publish: ")


def test_relative_root_with_colon_needs_dot_slash(tmp_path: Path) -> None:
    (tmp_path / "a:b").mkdir()
    assert run_cli("resolve", "-checkpoint", "a:b", cwd=tmp_path).code == 1
    assert run_cli("resolve", "-checkpoint", "./a:b", cwd=tmp_path).code == 0


def test_relative_root_is_made_absolute_and_clean(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    r = run_cli("resolve", "-checkpoint", "../../ckpt/./", cwd=root / "exec")
    assert r.out == f"{root}/exec/A/checkpoint-1\n"


def test_bad_s3_root_exits_1_before_credentials() -> None:
    r = run_cli("resolve", "-checkpoint", "s3://Bad_Bucket/x", "-creds", "file:/nonexistent")
    assert r.code == 1 and "bucket" in r.err and "credentials" not in r.err


def test_s3_root_without_creds_is_a_usage_error() -> None:
    for verb in ("resolve", "prune", "probe"):
        r = run_cli(verb, "-checkpoint", "s3://bucket/run")
        assert r.code == 2 and "-creds is required" in r.err


# --- resolve


def test_resolve_empty_root_prints_nothing(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out, r.err) == (0, "", "")


def test_resolve_prints_latest_by_epoch_then_step(root: Path) -> None:
    publish(root, "exec/A/checkpoint-900", 900, epoch=0)
    publish(root, "exec/B/checkpoint-5", 5, epoch=1)
    publish(root, "exec/B/checkpoint-4", 4, epoch=1)
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, f"{root}/exec/B/checkpoint-5\n")


def test_late_publication_from_older_epoch_is_never_chosen(root: Path) -> None:
    publish(root, "exec/B/checkpoint-10", 10, epoch=2)
    publish(root, "exec/A/checkpoint-5000", 5000, epoch=1)  # published late
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/B/checkpoint-10\n"


def test_resolve_tie_goes_to_greatest_name(root: Path) -> None:
    publish(root, "exec/A/checkpoint-5", 5, epoch=1)
    publish(root, "exec/B/checkpoint-5", 5, epoch=1)
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/B/checkpoint-5\n"


@pytest.mark.parametrize("junk", ["junk", ".hidden", "00000000000000000000-00000000000000000001-ME======"])
def test_unparsable_entry_is_an_error_naming_it(root: Path, junk: str) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    (root / "pub" / junk).write_text("")
    r = run_cli("resolve", "-checkpoint", str(root))
    assert r.code == 1 and r.out == ""
    assert f"{root}/pub/{junk}" in r.err


def test_folder_in_pub_is_an_error(root: Path) -> None:
    (root / "pub" / "sub").mkdir(parents=True)
    r = run_cli("resolve", "-checkpoint", str(root))
    assert r.code == 1 and "pub/sub" in r.err


def test_resolve_warns_when_saves_were_never_published(root: Path) -> None:
    save(root, "exec/A/checkpoint-100")
    save(root, "exec/A/checkpoint-200")
    save(root, "exec/B/step-7")
    (root / "exec" / "B" / "logs").mkdir()
    (root / "exec" / "B" / "epoch=0-step=50.ckpt").write_bytes(b"PK")  # Lightning's saves are files
    (root / "exec" / "B" / "notes.txt").write_text("")
    os.symlink("loop", root / "exec" / "B" / "loop")  # cannot be examined: passed over, not a failure
    r = run_cli("resolve", "-checkpoint", str(root))
    assert (r.code, r.out) == (0, "")
    assert r.err == "publish: no publication, but exec/ holds 4 saves: was watch running?\n"


def test_resolve_with_extra_argument_is_a_usage_error(root: Path) -> None:
    r = run_cli("resolve", "-checkpoint", str(root), "X")
    assert r.code == 2 and "unexpected argument 'X'" in r.err


def test_resolve_through_a_linked_root(root: Path, tmp_path: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    (tmp_path / "link").symlink_to(root)
    assert (
        run_cli("resolve", "-checkpoint", str(tmp_path / "link")).out
        == f"{tmp_path}/link/exec/A/checkpoint-1\n"
    )


# --- publish


def test_publish_prints_the_entry(root: Path) -> None:
    save(root, "exec/A/checkpoint-7")
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "2", str(root / "exec/A/checkpoint-7"), "7")
    name = layout.name(2, 7, "exec/A/checkpoint-7")
    assert r.code == 0 and r.err == ""
    assert r.out == f"published {name} (epoch 2, step 7, {root}/exec/A/checkpoint-7)\n"
    assert entries(root) == [name]


def test_publish_again_says_so_and_leaves_entry_untouched(root: Path) -> None:
    publish(root, "exec/A/checkpoint-7", 7)
    name = layout.name(0, 7, "exec/A/checkpoint-7")
    before = os.stat(root / "pub" / name)
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/checkpoint-7"), "7")
    assert r.code == 0 and r.out == ""
    assert r.err == f"publish: {name} already published (epoch 0, step 7, {root}/exec/A/checkpoint-7)\n"
    after = os.stat(root / "pub" / name)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_publish_epoch_from_environment_and_flag_wins(root: Path) -> None:
    save(root, "exec/A/c")
    r = run_cli("publish", "-checkpoint", str(root), "exec/A/c", "1", env={"DISPATCH_EPOCH": "4"}, cwd=root)
    assert "(epoch 4, step 1," in r.out
    r = run_cli(
        "publish",
        "-checkpoint",
        str(root),
        "-epoch",
        "5",
        "exec/A/c",
        "1",
        env={"DISPATCH_EPOCH": "4"},
        cwd=root,
    )
    assert "(epoch 5, step 1," in r.out


@pytest.mark.parametrize("epoch", ["-1", "x", "1e3", "0x10", "+1", "100000000000000000000", " 1"])
def test_bad_epoch_is_a_usage_error(root: Path, epoch: str) -> None:
    save(root, "exec/A/c")
    assert (
        run_cli("publish", "-checkpoint", str(root), "-epoch", epoch, str(root / "exec/A/c"), "1").code == 2
    )
    r = run_cli(
        "publish", "-checkpoint", str(root), str(root / "exec/A/c"), "1", env={"DISPATCH_EPOCH": epoch}
    )
    assert r.code == 2 and "DISPATCH_EPOCH" in r.err


def test_largest_epoch_and_step(root: Path) -> None:
    save(root, "exec/A/c")
    big = str(10**20 - 1)
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", big, str(root / "exec/A/c"), big)
    assert r.code == 0 and f"(epoch {big}, step {big}," in r.out


@pytest.mark.parametrize("step", ["-1", "x", "1.0", "100000000000000000000", ""])
def test_bad_step_is_a_usage_error(root: Path, step: str) -> None:
    save(root, "exec/A/c")
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/c"), step)
    assert r.code == 2 and "STEP" in r.err


def test_publish_argument_count(root: Path) -> None:
    save(root, "exec/A/c")
    r = run_cli("publish", "-checkpoint", str(root))
    assert r.code == 2 and "missing argument SAVE" in r.err
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/c"))
    assert r.code == 2 and "missing argument STEP" in r.err
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/c"), "1", "extra")
    assert r.code == 2 and "unexpected argument 'extra'" in r.err
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/c"), "1", "-epoch", "3")
    assert r.code == 2 and "unexpected argument '-epoch'" in r.err
    assert entries(root) == []


def test_publish_missing_save_exits_1(root: Path) -> None:
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/A/none"), "1")
    assert r.code == 1 and f"{root}/exec/A/none" in r.err and entries(root) == []


@pytest.mark.parametrize("where", ["root", "outside", "sibling", "s3"])
def test_publish_save_not_strictly_below_root_exits_1(root: Path, tmp_path: Path, where: str) -> None:
    (tmp_path / "ckpt2").mkdir()
    target = {
        "root": str(root),
        "outside": str(tmp_path),
        "sibling": str(tmp_path / "ckpt2"),
        "s3": "s3://bucket/x",
    }[where]
    r = run_cli("publish", "-checkpoint", str(root), target, "1")
    assert r.code == 1 and entries(root) == []


def test_publish_relative_save_and_lexical_cleaning(root: Path) -> None:
    save(root, "exec/A/x")
    r = run_cli("publish", "-checkpoint", str(root), "exec/B/../A/x", "3", cwd=root)
    assert r.code == 0 and f"{root}/exec/A/x)" in r.out
    assert entries(root) == [layout.name(0, 3, "exec/A/x")]


def test_publish_path_too_long_creates_nothing(root: Path) -> None:
    rel = "exec/A/" + "d" * 150
    save(root, rel)
    r = run_cli("publish", "-checkpoint", str(root), str(root / rel), "1")
    assert r.code == 1 and "too long" in r.err
    assert entries(root) == []


def test_publish_a_save_that_is_a_file(root: Path) -> None:
    (root / "exec").mkdir()
    (root / "exec" / "weights.pt").write_bytes(b"w")
    r = run_cli("publish", "-checkpoint", str(root), str(root / "exec/weights.pt"), "9")
    assert r.code == 0
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/weights.pt\n"


# --- prune


def test_prune_keeps_latest_three_by_default(root: Path) -> None:
    for step in (1, 2, 3, 4, 5):
        publish(root, f"exec/A/checkpoint-{step}", step)
    r = run_cli("prune", "-checkpoint", str(root))
    assert r.code == 0
    assert r.lines == [f"removed {root}/exec/A/checkpoint-1", f"removed {root}/exec/A/checkpoint-2"]
    assert entries(root) == sorted(layout.name(0, s, f"exec/A/checkpoint-{s}") for s in (3, 4, 5))
    assert sorted(os.listdir(root / "exec/A")) == ["checkpoint-3", "checkpoint-4", "checkpoint-5"]


def test_prune_keep_one_leaves_latest(root: Path) -> None:
    for step in (10, 30, 20):
        publish(root, f"exec/A/checkpoint-{step}", step)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.lines == [f"removed {root}/exec/A/checkpoint-10", f"removed {root}/exec/A/checkpoint-20"]
    assert run_cli("resolve", "-checkpoint", str(root)).out == f"{root}/exec/A/checkpoint-30\n"


@pytest.mark.parametrize("keep", ["0", "-1", "x", "1.5", ""])
def test_prune_bad_keep_is_a_usage_error(root: Path, keep: str) -> None:
    r = run_cli("prune", "-checkpoint", str(root), "-keep", keep)
    assert r.code == 2 and "-keep" in r.err


def test_prune_orders_by_epoch(root: Path) -> None:
    publish(root, "exec/A/checkpoint-900", 900, epoch=0)
    publish(root, "exec/B/checkpoint-1", 1, epoch=1)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.lines == [f"removed {root}/exec/A/checkpoint-900"]


def test_prune_keeps_folder_still_named_inside_or_around(root: Path) -> None:
    publish(root, "exec/A", 1)  # around a kept save
    publish(root, "exec/B/checkpoint-2/sub", 2)  # inside a kept save
    publish(root, "exec/C/checkpoint-3", 3)  # same folder, kept below
    publish(root, "exec/D/checkpoint-4", 4)
    publish(root, "exec/A/checkpoint-10", 10)
    publish(root, "exec/B/checkpoint-2", 11)
    publish(root, "exec/C/checkpoint-3", 12, epoch=0)  # same name would clash: use another step
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "3")
    assert r.code == 0
    assert r.lines == [f"removed {root}/exec/D/checkpoint-4"]
    for kept in ("exec/A/checkpoint-10", "exec/B/checkpoint-2/sub", "exec/C/checkpoint-3"):
        assert (root / kept).is_dir()


def test_prune_leaves_a_linked_folder_and_carries_on(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    save(outside, "checkpoint-1")
    (root / "exec").mkdir()
    (root / "exec" / "L").symlink_to(outside)
    r0 = run_cli("publish", "-checkpoint", str(root), str(root / "exec/L/checkpoint-1"), "1")
    assert r0.code == 0
    publish(root, "exec/A/checkpoint-2", 2)
    publish(root, "exec/A/checkpoint-3", 3)
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 0
    assert r.err == (
        f"publish: prune: left {root}/exec/L/checkpoint-1 in place: {root}/exec/L is a symbolic link\n"
    )
    assert r.lines == [f"removed {root}/exec/A/checkpoint-2"]
    assert (outside / "checkpoint-1" / "model.bin").exists()
    assert entries(root) == [layout.name(0, 3, "exec/A/checkpoint-3")]


def test_prune_through_a_linked_root(root: Path, tmp_path: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    publish(root, "exec/A/checkpoint-2", 2)
    (tmp_path / "rootlink").symlink_to(root)
    r = run_cli("prune", "-checkpoint", str(tmp_path / "rootlink"), "-keep", "1")
    assert r.lines == [f"removed {tmp_path}/rootlink/exec/A/checkpoint-1"]
    assert not (root / "exec/A/checkpoint-1").exists()


def test_prune_with_nothing_to_do(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    r = run_cli("prune", "-checkpoint", str(root))
    assert (r.code, r.out, r.err) == (0, "", "")


def test_prune_refuses_unparsable_entries_before_removing_anything(root: Path) -> None:
    for step in (1, 2, 3, 4):
        publish(root, f"exec/A/checkpoint-{step}", step)
    (root / "pub" / "stray").write_text("")
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert r.code == 1 and "pub/stray" in r.err
    assert len(entries(root)) == 5


def test_prune_removes_entry_whose_folder_is_already_gone(root: Path) -> None:
    publish(root, "exec/A/checkpoint-1", 1)
    publish(root, "exec/A/checkpoint-2", 2)
    import shutil

    shutil.rmtree(root / "exec/A/checkpoint-1")
    r = run_cli("prune", "-checkpoint", str(root), "-keep", "1")
    assert (r.code, r.out) == (0, "")
    assert entries(root) == [layout.name(0, 2, "exec/A/checkpoint-2")]


def test_save_outside_an_s3_root_fails_before_any_credential_source(tmp_path: Path) -> None:
    r = run_cli(
        "publish", "-checkpoint", "s3://bucket/run", "-creds", f"file:{tmp_path}/none", "s3://other/x", "1"
    )
    assert r.code == 1 and "not under the root" in r.err and "credentials" not in r.err


def test_a_working_folder_deleted_under_the_job(tmp_path: Path) -> None:
    """A job whose working folder was removed (a scratch folder cleaned under it) still resolves an absolute
    -checkpoint, as a Go program does (it reads the working folder only for a relative path); a relative
    one fails naming it.  (Before, both failed with "publish: No such file or directory".)"""
    root = tmp_path / "ckpt"
    save = root / "exec" / "A" / "checkpoint-1"
    save.mkdir(parents=True)
    (save / "model.bin").write_bytes(b"w")
    r = run_cli("publish", "-checkpoint", str(root), "-epoch", "1", str(save), "1")
    assert r.code == 0, r.err
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (
        "import os, subprocess, sys\n"
        f"os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
        "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n"
    )
    cmd = command() or [sys.executable, "-m", "publish"]
    env = {**base_env(), "PYTHONPATH": str(REPO)}
    ok = subprocess.run(
        [sys.executable, "-c", script, *cmd, "resolve", "-checkpoint", str(root)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, f"{save}\n", "")
    gone.mkdir()
    bad = subprocess.run(
        [sys.executable, "-c", script, *cmd, "resolve", "-checkpoint", "ckpt"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == (
        "publish: ckpt: a relative path, and the working folder cannot be read (deleted?): give an absolute path\n"
    )
