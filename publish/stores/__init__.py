"""Stores move bytes for the verbs; names and keys are computed by :mod:`publish.rules.layout`.

:func:`open` builds the store for a checkpoint root. A POSIX root imports nothing of S3: the S3 store, the
credential sources and the network come in only for an ``s3://`` root.
"""

from __future__ import annotations

import time

from publish.rules import roots

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Callable

    from publish.rules.credentials import Credentials
    from publish.rules.deadline import Deadline
    from publish.stores.base import Store


class Opened:
    """A store, the credential source that answered (``""`` for POSIX), and the store's ``probe``
    capability: the S3 preflight checks (given the verb's deadline), ``None`` for a store that has none."""

    __slots__ = ("store", "source", "probe")

    def __init__(self, store: Store, source: str, probe: Callable[[Deadline], None] | None) -> None:
        self.store = store
        self.source = source
        self.probe = probe


def open(  # publish.stores.open, as os.open: the one way to a store
    root: roots.Root,
    *,
    env: Mapping[str, str],
    deadline: float,
    creds: str = "",
    proxy: str = "",
    renew_timeout: float | None = None,
    warn: Callable[[str], None] | None = None,
) -> Opened:
    """The store for ``root``. For S3: the credentials from the sources ``creds`` before ``deadline`` (a
    ``time.monotonic()`` value), the store reached through ``proxy`` (``""``: none), and, when
    ``renew_timeout`` is given, the sources resolved again (each time within it) when the store rejects
    the credentials, saying so through ``warn``."""
    if isinstance(root, roots.PosixRoot):
        from publish.stores.posix import PosixStore

        return Opened(PosixStore(root.path), "", None)
    from publish.creds import sources
    from publish.stores.s3 import S3Store

    left = max(deadline - time.monotonic(), 0.001)
    credentials, source = sources.resolve(creds, env, left)
    renewer = None
    if renew_timeout is not None:
        again_within = renew_timeout

        def renewer(code: str) -> Credentials:
            if warn is not None:
                warn(f"the store rejected the credentials ({code}); resolving the sources again")
            fresh, again = sources.resolve(creds, env, again_within)
            if warn is not None:
                warn(f"credentials from {again}")
            return fresh

    store = S3Store(root.bucket, root.prefix, credentials, proxy=proxy or None, env=env, renew=renewer)
    return Opened(store, source, store.probe)
