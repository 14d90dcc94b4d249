"""Which folder names are saves, and their steps."""

from __future__ import annotations

import pytest

from publish.frameworks import FRAMEWORKS

HEX = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    "framework, name, step",
    [
        ("hf", "checkpoint-500", 500),
        ("hf", "checkpoint-0007", 7),
        ("hf", "checkpoint-", None),
        ("hf", "checkpoint-5a", None),
        ("hf", "checkpoint-٣", None),  # a digit of another script
        ("hf", "Checkpoint-5", None),
        ("hf", "checkpoint-5-tmp", None),
        ("hf", "checkpoint-" + "9" * 21, None),  # beyond 10^20
        ("dcp", "step-100", 100),
        ("dcp", "iter_0000100", 100),
        ("dcp", "300", 300),
        ("dcp", "a1b22", 22),
        ("dcp", "step-100x", None),
        ("dcp", "latest", None),
        ("dcp", "", None),
        ("snapshot", f"step_000000000042_{HEX}", 42),
        ("snapshot", f"step_00000000042_{HEX}", None),
        ("snapshot", f"step_000000000042_{HEX.upper()}", None),
        ("snapshot", f"step_000000000042_{HEX[:-1]}g", None),
        ("snapshot", f"step_000000000042-{HEX}", None),
        ("snapshot", f"step_000000000042_{HEX}x", None),
    ],
)
def test_step(framework: str, name: str, step: int | None) -> None:
    assert FRAMEWORKS[framework].step(name) == step


def test_the_table_kinds_are_the_modules_and_a_framework_loads_only_its_module() -> None:
    """FRAMEWORKS holds each module's KIND, so choosing a framework imports none; asking one about a save
    imports its module alone (a run -framework hf loads no DeepSpeed reader)."""
    import importlib
    import subprocess
    import sys

    for name, fw in FRAMEWORKS.items():
        assert fw.kind == importlib.import_module(f"publish.frameworks.{name}").KIND, name
    code = (
        "import sys; from publish.frameworks import FRAMEWORKS as F; "
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('publish.frameworks.')); "
        "before = loaded(); F['hf'].step('checkpoint-5'); print(before, loaded())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] ['publish.frameworks.hf']", out
