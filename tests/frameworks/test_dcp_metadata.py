"""The .metadata reader: real DCP saves, every cut of one, and pickles that try to run code."""

from __future__ import annotations

import errno
import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from publish.frameworks.parse import dcp_metadata, forked
from publish.frameworks.parse.dcp_metadata import Incomplete, storage_ends
from publish.rules.deadline import Deadline
from publish.rules.errors import Failure
from tests.conftest import REPO, need
from tests.support.dcp_shapes import colliding, metadata
from tests.support.pythons import SUPPORTED, python


def _torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def real_save(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save written by torch.distributed.checkpoint with two gloo ranks."""
    need(_torch(), "torch is not installed")
    path = tmp_path_factory.mktemp("dcp") / "step-100"
    subprocess.run(
        [sys.executable, "-m", "tests.support.dcp_writer", str(path)], cwd=REPO, check=True, timeout=240
    )
    return path


@pytest.mark.torch
def test_a_real_save_names_each_rank_file_and_its_size(real_save: Path) -> None:
    ends = storage_ends((real_save / ".metadata").read_bytes(), "m")
    assert set(ends) == {"__0_0.distcp", "__1_0.distcp"}
    for name, end in ends.items():
        assert 0 < end <= (real_save / name).stat().st_size


@pytest.mark.torch
def test_every_cut_of_a_real_metadata_is_incomplete(real_save: Path) -> None:
    data = (real_save / ".metadata").read_bytes()
    for cut in range(len(data)):
        with pytest.raises(Incomplete):
            storage_ends(data[:cut], "m")


@pytest.mark.torch
def test_a_real_save_reads_the_same_with_the_guarded_reader(real_save: Path) -> None:
    data = (real_save / ".metadata").read_bytes()
    assert dcp_metadata._ends(data, "m", guarded=True) == storage_ends(data, "m")
    for cut in range(0, len(data), 7):
        with pytest.raises(Incomplete):
            dcp_metadata._ends(data[:cut], "m", guarded=True)


@pytest.mark.torch
def test_the_reader_imports_nothing_it_reads(real_save: Path) -> None:
    """Reading a real .metadata in a fresh interpreter pulls in no torch module."""
    code = (
        "import sys; from publish.frameworks.parse.dcp_metadata import storage_ends; "
        f"storage_ends(open({str(real_save / '.metadata')!r}, 'rb').read(), 'm'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'os.system')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _Call:
    """Pickles as a call of ``func(*args)``: what a hostile .metadata would hold."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (self.func, self.args)


@pytest.mark.parametrize(
    "func, name",
    [
        (os.system, "system"),
        (eval, "eval"),
        (exec, "exec"),
        (subprocess.Popen, "Popen"),
        (setattr, "setattr"),
        (open, "open"),
        (__import__, "__import__"),
    ],
)
def test_a_pickle_that_names_a_callable_runs_nothing_and_is_a_fault(
    tmp_path: Path, func: object, name: str
) -> None:
    canary = tmp_path / "ran"
    command = f"touch {canary}"
    arg = command if func in (os.system,) else ["touch", str(canary)] if func is subprocess.Popen else command
    data = pickle.dumps(_Call(func, arg), protocol=4)
    with pytest.raises(Failure) as e:
        storage_ends(data, "/r/exec/a/step-1/.metadata")
    assert str(e.value).startswith("/r/exec/a/step-1/.metadata: names ")
    assert name in str(e.value)
    assert not canary.exists()


def test_getattr_builds_only_a_record_and_calling_that_is_a_fault(tmp_path: Path) -> None:
    """getattr is allowed because an Enum member can be pickled as getattr(Enum, "NAME"): it then builds one
    more inert record, so getattr(<torch record>, "system")("touch ...") has nothing to call."""
    canary = tmp_path / "ran"
    data = b"cbuiltins\ngetattr\n(ctorch\nSize\nS'system'\ntR(S'touch " + str(canary).encode() + b"'\ntR."
    with pytest.raises(Failure, match="does not read as a DCP .metadata"):
        storage_ends(data, "m")
    assert not canary.exists()


def test_an_enum_member_pickled_by_name_is_read() -> None:
    """The form Python 3.11.2's enum writes: getattr(_MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT")."""
    from tests.support.dcp_shapes import Raw

    member = Raw(
        b"cbuiltins\ngetattr\nctorch.distributed.checkpoint.metadata\n_MEM_FORMAT_ENCODING\n"
        b"X\x17\x00\x00\x00TORCH_CONTIGUOUS_FORMAT\x86R"
    )
    data = metadata(
        {"w": {"relative_path": "__0_0.distcp", "offset": 0, "length": 9}}, state_dict_metadata={"m": member}
    )
    assert b"getattr" in data
    assert storage_ends(data, "m") == {"__0_0.distcp": 9}


def test_a_call_hidden_inside_an_allowed_structure_is_still_refused(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    data = pickle.dumps({"storage_data": [_Call(os.system, f"touch {canary}")]}, protocol=2)
    with pytest.raises(Failure, match="names posix.system|names os.system"):
        storage_ends(data, "m")
    assert not canary.exists()


def test_a_persistent_id_is_a_fault() -> None:
    class P(pickle.Pickler):
        def persistent_id(self, obj: object) -> object:
            return "x" if obj == "target" else None

    import io

    buf = io.BytesIO()
    P(buf, protocol=4).dump(["target"])
    with pytest.raises(Failure, match="does not read as a DCP .metadata"):
        storage_ends(buf.getvalue(), "m")


def test_storage_ends_take_the_greatest_end_per_file() -> None:
    data = metadata(
        {
            "a": {"relative_path": "__0_0.distcp", "offset": 0, "length": 10},
            "b": {"relative_path": "__0_0.distcp", "offset": 10, "length": 5},
            "c": {"relative_path": "__1_0.distcp", "offset": 0, "length": 7},
        }
    )
    assert storage_ends(data, "m") == {"__0_0.distcp": 15, "__1_0.distcp": 7}


@pytest.mark.parametrize(
    "storage, why",
    [
        ({}, "names no storage"),
        (None, "names no storage"),
        ({"a": {"relative_path": "../x", "offset": 0, "length": 1}}, "not a clean relative path"),
        ({"a": {"relative_path": "/etc/passwd", "offset": 0, "length": 1}}, "not a clean relative path"),
        ({"a": {"relative_path": "", "offset": 0, "length": 1}}, "not a clean relative path"),
        ({"a": {"relative_path": "f", "offset": -1, "length": 1}}, "offset is not a byte count"),
        ({"a": {"relative_path": "f", "offset": True, "length": 1}}, "offset is not a byte count"),
        ({"a": {"relative_path": "f", "offset": 0, "length": "1"}}, "length is not a byte count"),
        ({"a": {"relative_path": "f", "offset": 0}}, "length is not a byte count"),
    ],
)
def test_storage_that_cannot_be_checked_is_a_fault(storage: object, why: str) -> None:
    with pytest.raises(Failure, match=why):
        storage_ends(metadata(storage), "m")


def test_data_after_the_pickle_is_a_fault() -> None:
    data = metadata({"a": {"relative_path": "f", "offset": 0, "length": 1}})
    assert storage_ends(data, "m") == {"f": 1}
    with pytest.raises(Failure, match="1 bytes after its pickle ends"):
        storage_ends(data + b"x", "m")


@pytest.mark.parametrize("data", [b"", b"\x80", b"\x80\x04\x95"])
def test_an_empty_or_just_begun_file_is_incomplete(data: bytes) -> None:
    with pytest.raises(Incomplete):
        storage_ends(data, "m")


@pytest.mark.parametrize("data", [b"not a pickle", b"\x80\x04K\x01.", pickle.dumps({"storage_data": 1})])
def test_something_else_is_a_fault(data: bytes) -> None:
    with pytest.raises(Failure):
        storage_ends(data, "m")


def test_deep_nesting_is_no_internal_error() -> None:
    data = b"\x80\x02" + b"]" * 200_000 + b"a" * 199_999 + b"."
    with pytest.raises(Failure, match="is not a DCP Metadata"):
        storage_ends(data, "m")


# --- a .metadata too large to read in the process is read in a forked child, under the deadline


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the children the reader forks while the test runs."""
    pids: list[int] = []
    fork = os.fork

    def recording() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recording)
    return pids


def _reaped(pids: list[int]) -> bool:
    """Every one of ``pids`` was forked and has been waited for (the suite's servers are children too)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return bool(pids)


def test_keys_that_collide_are_read_under_the_deadline(forks: list[int]) -> None:
    """Before, the parse ran in the process: about 20 s for these 40,000 keys, whatever the deadline, and
    then the save was taken as whole.  Now the child is killed when the deadline passes (here before the
    guarded reader's turn: the C reader's allowance for 560 KB is longer than this deadline)."""
    need(forked.available(), "os.fork is not available")
    data = colliding(40_000)
    with pytest.raises(
        Failure, match=r"^m: timed out reading it as a DCP \.metadata \(the time given was 1s\)$"
    ):
        storage_ends(data, "m", Deadline(1))
    assert _reaped(forks)


def test_a_child_answers_as_the_process_does(forks: list[int]) -> None:
    """Above IN_PROCESS bytes the child reads it: the same ends, the same faults, the same Incomplete."""
    need(forked.available(), "os.fork is not available")
    storage = {
        f"w{i}": {"relative_path": f"__{i % 7}_0.distcp", "offset": i * 10, "length": 10} for i in range(3000)
    }
    data = metadata(storage)
    assert len(data) > dcp_metadata.IN_PROCESS
    assert storage_ends(data, "m", Deadline(60)) == dcp_metadata._ends(data, "m")
    ends = {f"__{r}_0.distcp": 10 * max(i for i in range(3000) if i % 7 == r) + 10 for r in range(7)}
    assert storage_ends(data, "m") == ends
    with pytest.raises(Incomplete):
        storage_ends(data[: len(data) // 2], "m", Deadline(60))
    with pytest.raises(Failure, match="^m: holds 1 bytes after its pickle ends$"):
        storage_ends(data + b"x", "m", Deadline(60))
    bad = metadata({**storage, "z": {"relative_path": "../x", "offset": 0, "length": 1}})
    with pytest.raises(Failure, match="relative_path '../x' is not a clean relative path"):
        storage_ends(bad, "m", Deadline(60))
    assert _reaped(forks)


def test_a_small_metadata_is_read_in_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> bytes:
        raise AssertionError("forked for a small .metadata")

    monkeypatch.setattr(forked, "run", refuse)
    data = metadata({"a": {"relative_path": "f", "offset": 0, "length": 1}})
    assert len(data) <= dcp_metadata.IN_PROCESS
    assert storage_ends(data, "m", Deadline(60)) == {"f": 1}


def test_a_child_that_dies_is_a_fault_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, forks: list[int]
) -> None:
    need(forked.available(), "os.fork is not available")

    def crash(*_: object) -> dict[str, int]:
        os.abort()  # as a crash in C would end it (a signal the child cannot block)

    monkeypatch.setattr(dcp_metadata, "_ends", crash)
    data = metadata({f"w{i}": {"relative_path": "f", "offset": i, "length": 1} for i in range(3000)})
    with pytest.raises(
        Failure, match=f"^m: its reader failed: it was ended by signal {int(signal.SIGABRT)}$"
    ):
        storage_ends(data, "m", Deadline(60))
    assert _reaped(forks)


COLLIDING = (
    "m: does not read as a DCP .metadata: an int of 2^61-1 or more as a dict key or set item (a DCP save holds "
    "none; its hash could be made to collide)"
)


def test_keys_that_collide_are_refused_in_linear_time(forks: list[int]) -> None:
    """Past the C reader's allowance the guarded reader reads the file again, refusing keys whose hash a
    file can choose; before, the 40,000 keys took about 20 s and the save was taken as whole."""
    need(forked.available(), "os.fork is not available")
    data = colliding(40_000)
    with pytest.raises(Failure) as e:
        storage_ends(data, "m", Deadline(120))
    assert str(e.value) == COLLIDING
    with pytest.raises(Failure) as e:
        dcp_metadata._ends(data, "m", guarded=True)
    assert str(e.value) == COLLIDING
    assert _reaped(forks)


def test_the_guarded_reader_falls_back_when_the_fast_one_is_slow(
    monkeypatch: pytest.MonkeyPatch, forks: list[int]
) -> None:
    """A real .metadata the C reader does not finish in its allowance (a machine under load) still reads,
    with the same answer, by the guarded reader."""
    need(forked.available(), "os.fork is not available")
    storage = {
        f"w{i}": {"relative_path": f"__{i % 3}_0.distcp", "offset": i, "length": 1} for i in range(3000)
    }
    data = metadata(storage)
    monkeypatch.setattr(dcp_metadata, "FAST_BASE", 0.0)
    monkeypatch.setattr(dcp_metadata, "FAST_RATE", 10**12)  # an allowance of a microsecond or so
    assert storage_ends(data, "m", Deadline(60)) == dcp_metadata._ends(data, "m")
    assert _reaped(forks)


@pytest.mark.parametrize(
    "key, refused",
    [
        ("text", None),
        (b"bytes", None),
        (7, None),
        (-((1 << 61) - 2), None),
        (1.5, None),
        (None, None),
        ((1 << 61) - 1, "an int of 2^61-1 or more"),
        (-(1 << 64), "an int of 2^61-1 or more"),
        ((1, 2), "a tuple"),
        (frozenset({1}), "a frozenset"),
        (float("nan"), "a NaN"),
        (float("inf"), None),
    ],
)
def test_the_guarded_reader_takes_only_keys_whose_hash_a_file_cannot_choose(
    key: object, refused: str | None
) -> None:
    doc = {"storage_data": {key: 1}}
    for data in (
        pickle.dumps(doc, protocol=4),
        pickle.dumps(doc, protocol=5),
        pickle.dumps({key}, protocol=5),
    ):
        if refused is None:
            dcp_metadata._load(data, "m", guarded=True)
        else:
            with pytest.raises(
                Failure,
                match="^" + re.escape(f"m: does not read as a DCP .metadata: {refused} as a dict key"),
            ):
                dcp_metadata._load(data, "m", guarded=True)


def test_the_guarded_reader_reads_as_the_fast_one_does() -> None:
    """Same ends, same faults, same Incomplete for every cut, on the shapes the tests write."""
    data = metadata(
        {f"w{i}": {"relative_path": f"__{i % 3}_0.distcp", "offset": i, "length": 2} for i in range(50)}
    )
    assert dcp_metadata._ends(data, "m", guarded=True) == dcp_metadata._ends(data, "m")
    for cut in range(len(data)):
        with pytest.raises(Incomplete):
            dcp_metadata._ends(data[:cut], "m", guarded=True)
    for bad in (data + b"x", b"not a pickle", b"\x80\x04K\x01.", metadata({})):
        with pytest.raises(Failure) as fast:
            dcp_metadata._ends(bad, "m")
        with pytest.raises(Failure) as slow:
            dcp_metadata._ends(bad, "m", guarded=True)
        assert type(fast.value) is type(slow.value)


def test_a_hard_cpu_limit_below_the_deadline_is_kept(tmp_path: Path) -> None:
    """A batch system may give the job a hard RLIMIT_CPU; the child cannot raise it, and before it tried:
    setrlimit failed and the read with it."""
    need(forked.available(), "os.fork is not available")
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (3, 3))\n"
        "from publish.frameworks.parse import dcp_metadata\n"
        "from publish.frameworks.parse.dcp_metadata import storage_ends\n"
        "dcp_metadata.FAST_BASE = 10.0  # the C reader's allowance: past the hard limit\n"
        "from publish.rules.deadline import Deadline\n"
        "from tests.support.dcp_shapes import metadata\n"
        "data = metadata({f'w{i}': {'relative_path': 'f', 'offset': i, 'length': 1} for i in range(3000)})\n"
        "print(storage_ends(data, 'm', Deadline(3600)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "{'f': 3000}\n", "")


def test_a_metadata_that_needs_too_much_memory_fails_in_the_child(
    monkeypatch: pytest.MonkeyPatch, forks: list[int]
) -> None:
    """Before, a .metadata of empty lists (32 bytes of memory for each byte of file) was built whole in the
    process, beside the training job, however large it grew."""
    need(forked.available(), "os.fork is not available")
    monkeypatch.setattr(dcp_metadata, "MEMORY_PER_BYTE", 1)
    monkeypatch.setattr(dcp_metadata, "MEMORY_BASE", 32 << 20)
    data = b"\x80\x04]" + b"]a" * 4_000_000 + b"."  # 8 MB of file, about 256 MB of lists
    with pytest.raises(Failure) as e:
        storage_ends(data, "m", Deadline(120))
    assert str(e.value) == "m: needs more than 39 MiB of memory to read: not read as a DCP .metadata"
    assert _reaped(forks)


@pytest.mark.parametrize("why", ["no fork", "fork fails"])
def test_without_a_child_the_guarded_reader_reads_in_the_process(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """At a process limit (fork fails with EAGAIN) or where there is no fork, the read is done here by the
    guarded reader, linear whatever the file holds; before, a failed fork escaped as an OSError."""
    if why == "no fork":
        monkeypatch.setattr(forked, "available", lambda: False)
    else:

        def refuse() -> int:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

        monkeypatch.setattr(os, "fork", refuse)
    data = metadata({f"w{i}": {"relative_path": "f", "offset": i, "length": 1} for i in range(3000)})
    assert storage_ends(data, "m", Deadline(60)) == {"f": 3000}
    with pytest.raises(Failure) as e:
        storage_ends(colliding(40_000), "m", Deadline(60))
    assert str(e.value) == COLLIDING


# --- StorageMeta.checkpoint_id: the pathlib path as each Python version pickles it

_PATHS = (
    "import pickle, pathlib, sys\n"
    "paths = [pathlib.Path('/ckpt/step-1'), pathlib.PurePosixPath('/ckpt'), pathlib.PureWindowsPath('c:/ckpt')]\n"
    "sys.stdout.buffer.write(pickle.dumps([pickle.dumps(p, protocol=n) for p in paths for n in (2, 4, 5)]))\n"
)


@pytest.mark.parametrize("version", SUPPORTED)
def test_a_checkpoint_id_path_reads_as_each_python_pickles_it(version: str) -> None:
    """FileSystemWriter's storage_meta holds the path it was given as a pathlib path; Python 3.13 moved the
    classes to pathlib._local, and a save written under 3.13 was refused as naming what DCP never holds."""
    out = subprocess.run(
        [python(version), "-I", "-c", _PATHS], capture_output=True, timeout=60, check=True
    ).stdout
    from tests.support.dcp_shapes import Obj, Raw

    for path in pickle.loads(out):
        assert path.startswith(b"\x80") and path.endswith(b".")
        body = path[2:-1] if path[1] < 4 else path[2:-1].removeprefix(b"\x95" + path[3:11])
        meta = Obj("torch.distributed.checkpoint.metadata", "StorageMeta", {"checkpoint_id": Raw(body)})
        data = metadata({"a": {"relative_path": "f", "offset": 0, "length": 1}}, storage_meta=meta)
        assert storage_ends(data, "m") == {"f": 1}
        assert dcp_metadata._ends(data, "m") == {"f": 1}  # the C reader, as a child reads a large one


@pytest.mark.torch
def test_a_real_save_names_a_pathlib_path(real_save: Path) -> None:
    """What the allowlist above is for: torch's FileSystemWriter records the path (under this Python)."""
    assert re.search(rb"pathlib(\._local)?\x94?.{0,4}PosixPath", (real_save / ".metadata").read_bytes(), re.S)
