"""Every secret value the tests hand to the command, and everything the command printed, for the
session-end check in tests/support/no_secrets.py.

The check holds for secrets that overlap no data.  A value chosen to collide with what the command prints
(tests/promise/test_secret_collisions.py: a secret key of ``00000000`` beside zero-padded entry names) is printed as
data, exactly (spec addendum, section 14), so such a test does not register it here and checks its output
itself."""

from __future__ import annotations

import sys

SECRETS: set[str] = set()
CAPTURED: list[tuple[str, str]] = []

# Fixed secrets of the test servers and credential tests, checked when their module was loaded.
FIXED = (
    ("tests.support.servers", ("WEED_ACCESS_KEY", "WEED_SECRET_KEY")),
    ("tests.support.vault_server", ("ROOT_TOKEN",)),
    ("tests.creds.test_creds", ("AK", "SK", "TOKEN")),
    ("tests.creds.test_vault", ("AK", "SK", "TOKEN")),
)
SHORTEST = 8  # shorter values match by chance ("admin", "x")


def remember_secret(*values: str) -> None:
    """Register secret values (keys, tokens, secret_ids, JWTs) that must never appear in any output."""
    SECRETS.update(v for v in values if v)


def record_output(where: str, *texts: str) -> None:
    """Keep an output the command produced, for the no-secrets check."""
    CAPTURED.extend((where, t) for t in texts if t)


def secrets_known() -> set[str]:
    """The registered secrets and the fixed ones of every loaded module that holds some."""
    found = set(SECRETS)
    for module, names in FIXED:
        mod = sys.modules.get(module)
        if mod is not None:
            found.update(str(getattr(mod, n)) for n in names if getattr(mod, n, ""))
    return {s for s in found if len(s) >= SHORTEST}


def leaks() -> list[tuple[str, str]]:
    """(where, the secret's first four characters and "...") for each secret found in a recorded output."""
    secrets = secrets_known()
    return [(where, s[:4] + "...") for where, text in CAPTURED for s in secrets if s in text]
