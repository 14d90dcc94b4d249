"""A CA bundle kept as a hashed directory in the user's cache, so that OpenSSL reads only the CAs it needs.

The bundle is a CA file, or the PEM text gathered from the files of ``SSL_CERT_DIR`` (publish.http.trust).

A bundle file of some 150 certificates costs OpenSSL about 50 ms of CPU to parse on every start, more than an
S3 ``resolve`` costs otherwise.  The same certificates, one per file and named by subject hash
(publish.rules.caname), are read only when a chain needs one.  The copy lives in the one-file build's cache
directory, ``$PUBLISH_CACHE_DIR`` (``off``: none), else ``$XDG_CACHE_HOME/publish``, else
``$HOME/.cache/publish``, as ``ca-`` and the first 32 hex digits of the SHA-256 of the bundle it was made
from: a changed bundle gets a new copy, and nodes whose bundles are the same share one in a shared home.  It is used only under the rules the one-file cache follows: the cache
directory and the copy are directories of this user's, not symbolic links, writable by no other user; a copy
is filled in a private temporary directory, made durable and renamed into place complete.  Any doubt (a
bundle OpenSSL might read otherwise, a refused directory, a failed write) leaves the bundle file to OpenSSL,
parsed whole, as before; publish.http.net also goes back to the whole bundle when a chain does not verify with
the copy, so the copy can make a start faster but never changes which servers are trusted.
"""

from __future__ import annotations

import os
import stat

from publish.http.trust import Trust
from publish.rules.files.fileio import read_regular
from publish.rules.hashing import sha256_hex

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: A bundle smaller than this is parsed whole: a handful of certificates costs OpenSSL less than a copy.
SMALLEST = 32 * 1024
#: A bundle larger than this is parsed whole, by OpenSSL, and never read by this module.
LARGEST = 8 * 1024 * 1024


def cache_dir(env: Mapping[str, str]) -> str | None:
    """The cache directory, as the one-file build finds it; None for none."""
    value = env.get("PUBLISH_CACHE_DIR", "")
    if value:  # `off`, or a path that is not absolute (the one file warns of that): no cache
        return (value.rstrip("/") or "/") if value.startswith("/") else None
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return xdg.rstrip("/") + "/publish"
    home = env.get("HOME", "")
    if home.startswith("/"):
        return home.rstrip("/") + "/.cache/publish"
    return None


def _ours(st: os.stat_result) -> bool:
    """A directory of this user's that no other user may write to."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _open_cache(path: str) -> int | None:
    """The cache directory's descriptor (made, with its missing parents, mode 0700), or None if refused."""
    try:
        if not os.path.lexists(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if _ours(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _pem(der: bytes) -> bytes:
    import binascii

    text = binascii.b2a_base64(der, newline=False)
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(lines) + b"\n-----END CERTIFICATE-----\n"


def _read(bundle: str) -> bytes | None:
    """The bundle's bytes, if it is a regular file of a size worth a copy (read at most LARGEST + 1)."""
    data = read_regular(bundle, LARGEST)
    return data if data is not None and len(data) >= SMALLEST else None


def _files(data: bytes) -> dict[str, bytes] | None:
    """The copy's files (name: PEM) for the bundle ``data``; None if unsure."""
    import hashlib

    from publish.rules import caname  # a warm start needs neither

    files: dict[str, bytes] = {}
    taken: dict[str, int] = {}  # subject hash: how many have it so far (many CAs may share one subject)
    try:
        for der in caname.pem_certificates(data.decode("latin-1")):
            digest = caname.subject_hash(der, lambda b: hashlib.sha1(b).digest())  # noqa: S324 - OpenSSL's name
            n = taken.get(digest, 0)
            taken[digest] = n + 1
            files[f"{digest}.{n}"] = _pem(der)
    except caname.Unsure:
        return None
    return files or None


def _quietly(op: Callable[[], object]) -> None:
    """``op()``, an OSError of it ignored."""
    try:  # noqa: SIM105 - contextlib would load functools and collections
        op()
    except OSError:
        pass


def _remove(cfd: int, name: str) -> None:
    """Remove the temporary directory ``name`` of the cache (only plain files in it), reached through ``cfd``."""
    try:
        dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cfd)
    except OSError:
        return
    try:
        for entry in os.listdir(dfd):
            try:  # noqa: SIM105 - contextlib would load functools and collections
                os.unlink(entry, dir_fd=dfd)
            except OSError:
                pass
    finally:
        os.close(dfd)
    _quietly(lambda: os.rmdir(name, dir_fd=cfd))


def _private_dir(cfd: int) -> str | None:
    """A new private directory ``.tmp-PID-N`` in the cache (the name clean-unpacked knows), or None: made
    before the bundle is read, so a cache on a read-only home costs a failed mkdir, not a parse."""
    for i in range(100):
        candidate = f".tmp-{os.getpid()}-{i}"
        try:
            os.mkdir(candidate, 0o700, dir_fd=cfd)
        except FileExistsError:
            continue
        except OSError:
            return None
        return candidate
    return None


def _fill(cfd: int, tmp: str, name: str, files: dict[str, bytes]) -> bool:
    """Fill the private directory ``tmp`` with ``files``, make them durable, and rename it to ``name``."""
    try:
        tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cfd)
        try:
            for file, pem in files.items():
                fd = os.open(
                    file,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=tfd,
                )
                try:
                    view = memoryview(pem)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.fsync(tfd)
        finally:
            os.close(tfd)
        os.rename(tmp, name, src_dir_fd=cfd, dst_dir_fd=cfd)
    except OSError:
        return False
    _quietly(lambda: os.fsync(cfd))  # the copy is whole either way: durable names are a nicety
    return True


def _make(cfd: int, name: str, data: bytes) -> bool:
    """Put the copy ``name`` of the bundle ``data`` in place; False if it could not be (or another start's
    won)."""
    tmp = _private_dir(cfd)
    if tmp is None:
        return False
    files = _files(data)
    if files is not None and _fill(cfd, tmp, name, files):
        return True
    _remove(cfd, tmp)  # unsure of the bundle, a full disk, or a concurrent start put its copy first
    return False


def lazy(trust: Trust, env: Mapping[str, str]) -> Trust:
    """``trust`` read from a hashed copy of its certificates in the cache (made if missing), or ``trust``
    itself when they are too few to be worth it or the cache is not usable.  The certificates are those of
    its bundle file, or the PEM text gathered from ``SSL_CERT_DIR``."""
    if trust.capath is not None:
        return trust
    base = cache_dir(env)
    if base is None:
        return trust
    if trust.cafile is not None:
        data = _read(trust.cafile)
    elif trust.cadata is not None:
        data = trust.cadata.encode("latin-1", "replace")
        if not SMALLEST <= len(data) <= LARGEST:
            return trust
    else:
        return trust
    if data is None:
        return trust
    name = "ca-" + sha256_hex(data)[:32]
    cfd = _open_cache(base)
    if cfd is None:
        return trust
    try:
        try:
            found = _ours(os.stat(name, dir_fd=cfd, follow_symlinks=False))
        except FileNotFoundError:
            found = _make(cfd, name, data)
            if not found:  # another start may have put its copy in place meanwhile
                try:
                    found = _ours(os.stat(name, dir_fd=cfd, follow_symlinks=False))
                except OSError:
                    found = False
        except OSError:
            found = False
    finally:
        os.close(cfd)
    if not found:
        return trust
    return Trust(trust.where, cafile=trust.cafile, cadata=trust.cadata, capath=f"{base}/{name}")
