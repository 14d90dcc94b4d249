"""CA trust for https: a CA file, or the system trust found as Go's crypto/x509 finds it on Linux (SSL_CERT_FILE, ...)."""

from __future__ import annotations

import os

from publish.rules.files.fileio import read_regular
from publish.rules.neterrors import TrustNotFound, reason

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from publish.http.tls import Context

BUNDLE_PATHS: tuple[str, ...] = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
)

FILE_LIMIT = 8 * 1024 * 1024  # a file of SSL_CERT_DIR larger than this is not read (a CA file is a few KiB)
DIR_LIMIT = 64 * 1024 * 1024  # ... nor more than this from one directory in all


class Trust:
    """Where CA certificates come from: a bundle file, or PEM text gathered from a directory.  With
    ``capath`` (publish.http.trustcache), the bundle ``cafile`` is read from that hashed copy of it instead, one
    certificate when a chain needs it."""

    def __init__(
        self, where: str, cafile: str | None = None, cadata: str | None = None, capath: str | None = None
    ) -> None:
        self.where = where
        self.cafile = cafile
        self.cadata = cadata
        self.capath = capath

    def load(self, ctx: Context) -> None:
        try:
            if self.capath is not None:
                ctx.load_verify_locations(capath=self.capath)
            else:
                ctx.load_verify_locations(cafile=self.cafile, cadata=self.cadata)
        except (OSError, ValueError) as e:  # an SSLError is an OSError
            raise TrustNotFound(f"cannot load CA certificates from {self.where}: {reason(e)}") from None

    def context(self) -> Context:
        """A client context (publish.http.tls: it verifies the chain and the host name, TLS 1.2 or later) that
        trusts this."""
        from publish.http import tls

        ctx = tls.client_context()
        self.load(ctx)
        return ctx

    def whole(self) -> Trust | None:
        """The same trust read from its bundle file itself, if it is read from a hashed copy; else None."""
        return None if self.capath is None else Trust(self.where, cafile=self.cafile, cadata=self.cadata)


def _dir_pem(directory: str) -> str:
    """Every PEM certificate in the files of ``directory`` (as Go reads SSL_CERT_DIR, links followed), '' if
    none.  Only regular files of at most FILE_LIMIT bytes are read, and at most DIR_LIMIT bytes in all."""
    found: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ""
    left = DIR_LIMIT
    for name in names:
        data = read_regular(os.path.join(directory, name), min(FILE_LIMIT, left))
        if data is None:
            continue
        left -= len(data)
        # Newlines as a file opened in text mode gives them: the text is the same as before the limits.
        text = data.decode("ascii", "replace").replace("\r\n", "\n").replace("\r", "\n")
        if "-----BEGIN CERTIFICATE-----" in text:
            found.append(text)
    return "\n".join(found)


def find_trust(env: Mapping[str, str], paths: Sequence[str] | None = None) -> Trust:
    """The system trust: SSL_CERT_FILE, then SSL_CERT_DIR (':'-separated), then the first of ``paths``
    (default BUNDLE_PATHS) that exists.  TrustNotFound lists every place looked at."""
    looked: list[str] = []
    if paths is None:
        paths = BUNDLE_PATHS
    cert_file = env.get("SSL_CERT_FILE", "")
    if cert_file:
        if os.path.isfile(cert_file):
            return Trust(f"SSL_CERT_FILE={cert_file}", cafile=cert_file)
        looked.append(f"SSL_CERT_FILE={cert_file}")
    cert_dir = env.get("SSL_CERT_DIR", "")
    if cert_dir:
        for d in cert_dir.split(":"):
            if d:
                pem = _dir_pem(d)
                if pem:
                    return Trust(f"SSL_CERT_DIR={d}", cadata=pem)
                looked.append(f"SSL_CERT_DIR={d}")
    for p in paths:
        if os.path.isfile(p):
            return Trust(p, cafile=p)
        looked.append(p)
    raise TrustNotFound("no CA certificates found; looked at " + ", ".join(looked))
