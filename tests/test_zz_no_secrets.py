"""Runs last: no secret value the suite handed to the command appears in anything the command printed."""

from __future__ import annotations

import pytest

from tests import conftest


def secrets_known() -> set[str]:
    """The fixed secrets of the test servers and credential tests, and those registered while running."""
    found = set(conftest.SECRETS)
    for module, names in (
        ("tests.servers", ("WEED_ACCESS_KEY", "WEED_SECRET_KEY")),
        ("tests.vault_server", ("ROOT_TOKEN",)),
        ("tests.test_creds", ("AK", "SK", "TOKEN")),
        ("tests.test_vault", ("AK", "SK", "TOKEN")),
    ):
        try:
            mod = __import__(module, fromlist=["x"])
        except ImportError:
            continue
        found.update(str(getattr(mod, n)) for n in names if getattr(mod, n, ""))
    return {s for s in found if len(s) >= 8}


def test_no_secret_in_any_captured_output() -> None:
    if len(conftest.CAPTURED) < 20:
        pytest.skip("run with the rest of the suite: too little output captured to judge")
    secrets = secrets_known()
    assert secrets, "no secrets registered: the check would prove nothing"
    leaks = [(where, s[:4] + "...") for where, text in conftest.CAPTURED for s in secrets if s in text]
    assert not leaks, f"secret values in output: {leaks[:10]}"
