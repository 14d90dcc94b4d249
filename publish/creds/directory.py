"""``secret:`` (a Kubernetes Secret volume) and ``file:`` (a private directory): one file per field.

Both ignore names starting with ``..`` (the kubelet's ``..data`` link and its timestamped folders).  In a
``secret:`` directory a field file may be a link, as the kubelet makes them, but only to somewhere inside the
directory; modes are not checked, since the kubelet sets them.  A ``file:`` directory must be private: the
directory and every field file owned by the running user, granting nothing to group or others, and neither
one a symbolic link.
"""

from __future__ import annotations

import errno
import os
import stat

from publish.creds.fields import FIELDS, NotAnswering, credentials_from_fields
from publish.rules.errors import CredentialsError
from publish.rules.files.fileio import read_at_most
from publish.rules.redact import shown

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping

    from publish.rules.credentials import Credentials

# A session token is a few KiB at most; anything much larger is not a credential file.
MAX_FILE = 64 * 1024


class DirectorySource:
    """A ``secret:`` or ``file:`` source (``kind`` says which) at an absolute path."""

    def __init__(self, kind: str, path: str) -> None:
        if kind not in ("secret", "file"):
            raise ValueError(kind)
        self.kind = kind
        self.path = path
        self.text = shown(f"{kind}:{path}")  # quoted in messages when the path holds a control character

    def fetch(self, env: Mapping[str, str], timeout: float | None) -> Credentials:
        """Read the field files; NotAnswering when the path does not exist."""
        try:
            return self._fetch()
        except FileNotFoundError:
            # The kubelet swapped ..data between the listing and the read: look once more.
            try:
                return self._fetch()
            except FileNotFoundError as e:
                name = e.filename or "a field file"
                raise self._refuse(f"{name}: no such file (a dangling link?)") from None

    def _fetch(self) -> Credentials:
        private = self.kind == "file"
        try:
            st = os.lstat(self.path) if private else os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            raise NotAnswering("no such directory") from None
        except OSError as e:
            raise self._refuse(e.strerror or str(e)) from None
        if stat.S_ISLNK(st.st_mode):
            raise self._refuse("is a symbolic link; a file: directory must be the directory itself")
        if not stat.S_ISDIR(st.st_mode):
            raise self._refuse("is not a directory")
        if private:
            self._check_private("the directory", st)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if private else 0)
        try:
            dirfd = os.open(self.path, flags)
        except OSError as e:
            raise self._refuse(e.strerror or str(e)) from None
        try:
            if private:
                again = os.fstat(dirfd)
                if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                    raise self._refuse("changed while it was read")
            fields = {}
            for name in sorted(os.listdir(dirfd)):
                if name.startswith(".."):
                    continue
                if name not in FIELDS:
                    raise self._refuse(f"unknown file {name!r}; the fields are {', '.join(FIELDS)}")
                data = self._read_private(dirfd, name) if private else self._read_secret(name)
                try:
                    value = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise self._refuse(f"{name} is not UTF-8 text") from None
                fields[name] = value[:-1] if value.endswith("\n") else value
        except OSError as e:
            if isinstance(e, FileNotFoundError):
                raise
            raise self._refuse(e.strerror or str(e)) from None
        finally:
            os.close(dirfd)
        return credentials_from_fields(self.text, fields)

    def _read_private(self, dirfd: int, name: str) -> bytes:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise self._refuse(f"{name} is a symbolic link") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse(f"{name} is not a regular file")
            self._check_private(name, st)
            return self._read(fd, name)
        finally:
            os.close(fd)

    def _read_secret(self, name: str) -> bytes:
        base = os.path.realpath(self.path)
        target = os.path.realpath(os.path.join(base, name))
        if target == base or os.path.commonpath([base, target]) != base:
            raise self._refuse(f"{name} links to outside the directory")
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            if os.path.islink(os.path.join(base, name)) and not os.path.lexists(target):
                # Either a dangling link, or the kubelet's swap: fetch() looks once more.
                raise FileNotFoundError(errno.ENOENT, "vanished", name) from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self._refuse(f"{name} is not a regular file")
            return self._read(fd, name)
        finally:
            os.close(fd)

    def _read(self, fd: int, name: str) -> bytes:
        data = read_at_most(fd, MAX_FILE)
        if data is None:
            raise self._refuse(f"{name} is larger than {MAX_FILE} bytes")
        return data

    def _check_private(self, what: str, st: os.stat_result) -> None:
        uid = os.geteuid()
        if st.st_uid != uid:
            raise self._refuse(f"{what} is owned by uid {st.st_uid}, not by the running user (uid {uid})")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise self._refuse(
                f"{what} grants permissions to group or others (mode {mode:04o}); want 0700/0600"
            )

    def _refuse(self, why: str) -> CredentialsError:
        return CredentialsError(why, self.text)
