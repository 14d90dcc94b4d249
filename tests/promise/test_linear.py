"""Inputs that a hostile neighbour, a broken server or a long command line controls are handled in linear
time.  Each case runs in a child process on an input large enough that a quadratic pass takes minutes
(measured on the code before: the comment of each case), and must finish within a deadline that a linear
pass meets hundreds of times over: the child is killed at the deadline, so a regression fails the test
instead of hanging the suite.  Not a speed measurement (those are under bench/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60  # seconds; the linear passes below take well under 2 s each

CASES = {
    # 0.17 s at 8 KB, 10.7 s at 64 KB before: the scrub of outside text (a store's words).
    "outside text with an @": (
        "from publish.rules import redact\n"
        "text = 'a' * 400_000 + '@'\n"
        "assert redact.foreign(text) == text\n"
        "text = 'a1' * 200_000 + 'x:/@'\n"
        "assert redact.foreign(text) == text[:-1] + 'xxxxx@'  # an empty userinfo: hidden as a token\n"
    ),
    # A user's value however malformed: the head is one pass whatever it holds.
    "a malformed URL": (
        "from publish.rules import redact\n"
        "text = 'a:' * 200_000 + 'pw@h'\n"
        "assert redact.url(text) == text[:-4] + 'xxxxx@h'\n"
        "text = '%41' * 200_000 + ':pw%40h'\n"
        "assert redact.url(text) == text[:-7] + ':xxxxx%40h'\n"
        "text = ' ' * 400_000 + '@'\n"
        "assert redact.url(text) == 'xxxxx@'\n"
    ),
    # The scrub ignores case: one pass over the folded text.
    "outside text near a secret, in upper case": (
        "from publish.rules import redact\n"
        "redact.register('abcdefgh0123', 'wxyz')\n"
        "text = 'ABCDEFG#WXY' * 40_000\n"
        "assert redact.foreign(text) == text\n"
        "assert redact.foreign('x' + 'ABCDEFGH' + 'WxYz' * 3) == 'x[redacted]'\n"
    ),
    # 12.5 s at 16,000 digits before (a nested repeat that backtracks).
    "VAULT_RATE_LIMIT": (
        "from publish.creds.vaultenv import check_vault_env\n"
        "try:\n"
        "    check_vault_env({'VAULT_RATE_LIMIT': '1' * 120_000 + 'x'})\n"
        "except ValueError as e:\n"
        "    assert 'VAULT_RATE_LIMIT' in str(e)\n"
        "else:\n"
        "    raise AssertionError('accepted')\n"
        "check_vault_env({'VAULT_RATE_LIMIT': '1' * 120_000 + '.5:3'})\n"
    ),
    # 47 s for 16,000 before: each certificate's name was probed from .0 on.
    "CA certificates sharing one subject": (
        "import binascii\n"
        "from publish.http import trustcache\n"
        "tbs = b'\\x30\\x0b' + b'\\x02\\x01\\x00' + b'\\x30\\x00' * 4\n"
        "der = b'\\x30' + bytes([len(tbs)]) + tbs\n"
        "pem = b'-----BEGIN CERTIFICATE-----\\n' + binascii.b2a_base64(der) + b'-----END CERTIFICATE-----\\n'\n"
        "files = trustcache._files(pem * 40_000)\n"
        "assert files is not None and len(files) == 40_000\n"
        "assert sorted(int(n.rsplit('.', 1)[1]) for n in files) == list(range(40_000))\n"
    ),
    # Each flag was taken off the front of the list: about 36 s for 300,000 arguments before.
    "many flags": (
        "from publish.rules.go.flags import FlagSet\n"
        "fs = FlagSet('x')\n"
        "probe = fs.boolean('probe', False, 'probe')\n"
        "name = fs.string('name', '', 'name')\n"
        "args = ['-probe=false', '-name', 'v'] * 350_000 + ['--', 'a', 'b']\n"
        "assert fs.parse(args) == ['a', 'b']\n"
        "assert probe.value is False and name.value == 'v'\n"
    ),
    # 0.58 s for 131,000 characters before (the rest re-sliced after each component).
    "a duration of many components": (
        "from publish.rules.go.gocompat import parse_duration_ns\n"
        "assert parse_duration_ns('1ns' * 1_000_000) == 1_000_000\n"
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_handled_in_linear_time(case: str) -> None:
    try:
        out = subprocess.run(
            [sys.executable, "-c", CASES[case]],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: not done within {DEADLINE} s: slower than linear")
    assert out.returncode == 0, out.stderr[-3000:]
