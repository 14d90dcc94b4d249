"""The Store over a POSIX directory: local disk, NFS, Lustre, GPFS."""

from __future__ import annotations

import os
import stat

from publish.errors import Failure
from publish.fileio import read_at_most
from publish.layout import POSIX_NAME_MAX
from publish.stores.base import PUB, TOMB, Removal

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def fsync_dir(path: str) -> None:
    """Make the names in the directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    except (
        OSError
    ) as e:  # some filesystems refuse fsync on a directory; the data is then as durable as they make it
        if e.errno not in (22, 95):  # EINVAL, EOPNOTSUPP
            raise
    finally:
        os.close(fd)


def _why(e: OSError) -> str:
    return e.strerror or str(e)


class PosixStore:
    """A checkpoint root that is a directory.  ``root`` is absolute and lexically clean; it may be a link."""

    cheap_listing = True

    def __init__(self, root: str) -> None:
        self.root = root

    def location(self, path: str) -> str:
        return self.root.rstrip("/") + "/" + path

    def _full(self, path: str) -> str:
        return self.location(path)

    def begin(self, timeout: float | None) -> None:
        pass

    def check_root(self) -> None:
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            raise Failure(f"checkpoint root {self.root} does not exist") from None
        except OSError as e:
            raise Failure(f"checkpoint root {self.root}: {_why(e)}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise Failure(f"checkpoint root {self.root} is not a directory")

    def list_entries(self) -> list[str]:
        pub = self._full(PUB)
        try:
            return os.listdir(pub)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise Failure(f"{pub} is not a directory") from None
        except OSError as e:
            raise Failure(f"{pub}: {_why(e)}") from None

    def create_entry(self, name: str) -> bool:
        if len(name.encode("utf-8")) > POSIX_NAME_MAX:
            raise Failure(
                f"the entry name would be {len(name.encode('utf-8'))} bytes, over the {POSIX_NAME_MAX} a POSIX "
                "file name may hold: the save's path is too long"
            )
        pub = self._full(PUB)
        try:
            os.mkdir(pub, 0o755)
        except FileExistsError:
            pass
        except OSError as e:
            raise Failure(f"{pub}: {_why(e)}") from None
        else:
            fsync_dir(self.root)
        path = os.path.join(pub, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise Failure(f"{path}: {_why(e)}") from None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(pub)
        return True

    def remove_entries(self, names: list[str]) -> None:
        pub = self._full(PUB)
        for name in names:
            try:
                os.unlink(os.path.join(pub, name))
            except FileNotFoundError:
                pass
            except OSError as e:
                raise Failure(f"{pub}/{name}: {_why(e)}") from None
        if names:
            fsync_dir(pub)

    def holds(self, path: str) -> bool:
        try:
            os.lstat(self._full(path))
        except FileNotFoundError:
            return False
        except NotADirectoryError:
            return False
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None
        return True

    def list_folders(self, path: str) -> list[str]:
        full = self._full(path)
        try:
            with os.scandir(full) as it:
                return [e.name for e in it if e.is_dir()]
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise Failure(f"{full} is not a directory") from None
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None

    def read(self, path: str, limit: int) -> bytes | None:
        full = self._full(path)
        try:
            fd = os.open(full, os.O_RDONLY | _O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Failure(f"{full} is not a regular file")
            data = read_at_most(fd, limit)
            if data is None:
                raise Failure(f"{full} is over {limit} bytes")
            return data
        except OSError as e:
            raise Failure(f"{full}: {_why(e)}") from None
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(self._full(path)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as e:
            raise Failure(f"{self._full(path)}: {_why(e)}") from None

    def remove_folder(self, path: str) -> Removal:
        parts = path.split("/")
        for i in range(len(parts)):
            rel = "/".join(parts[: i + 1])
            try:
                st = os.lstat(self._full(rel))
            except (FileNotFoundError, NotADirectoryError):
                return Removal(False)
            except OSError as e:
                raise Failure(f"{self._full(rel)}: {_why(e)}") from None
            if stat.S_ISLNK(st.st_mode):
                return Removal(False, link=rel)
        full = self._full(path)
        try:
            if stat.S_ISDIR(st.st_mode):
                import shutil  # only prune removes folders; shutil pulls in re

                # rmtree works from directory descriptors here, so a link inside is removed, never followed.
                shutil.rmtree(full)
            else:
                os.unlink(full)
        except OSError as e:
            raise Failure(f"{full}: could not remove: {_why(e)}") from None
        return Removal(True)

    # -- tombstones: tomb/ is reached through descriptors, never through a link

    def _tomb_dir(self, create: bool) -> int | None:
        """A descriptor of tomb/ (made, durably, when missing and ``create``); None when missing otherwise."""
        import errno

        where = self._full(TOMB)
        try:
            root = os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except OSError as e:
            raise Failure(f"checkpoint root {self.root}: {_why(e)}") from None
        try:
            for _ in range(3):  # another prune may make or remove it between our calls
                try:
                    return os.open(TOMB, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=root)
                except FileNotFoundError:
                    if not create:
                        return None
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        try:
                            link = stat.S_ISLNK(os.stat(TOMB, dir_fd=root, follow_symlinks=False).st_mode)
                        except OSError:
                            link = e.errno == errno.ELOOP
                        raise Failure(
                            f"{where} is {'a symbolic link' if link else 'not a directory'}"
                        ) from None
                    raise Failure(f"{where}: {_why(e)}") from None
                try:
                    os.mkdir(TOMB, 0o755, dir_fd=root)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise Failure(f"{where}: {_why(e)}") from None
                _fsync_fd(root)
            raise Failure(f"{where}: appeared and vanished while it was opened")
        finally:
            os.close(root)

    def list_tombs(self) -> list[str]:
        fd = self._tomb_dir(create=False)
        if fd is None:
            return []
        try:
            return os.listdir(fd)
        except OSError as e:
            raise Failure(f"{self._full(TOMB)}: {_why(e)}") from None
        finally:
            os.close(fd)

    def create_tombs(self, names: list[str]) -> None:
        if not names:
            return
        fd = self._tomb_dir(create=True)
        assert fd is not None
        try:
            for name in names:
                try:
                    f = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                        0o644,
                        dir_fd=fd,
                    )
                except FileExistsError:
                    continue
                try:
                    os.fsync(f)
                finally:
                    os.close(f)
            _fsync_fd(fd)
        except OSError as e:
            raise Failure(f"{self._full(TOMB)}: {_why(e)}") from None
        finally:
            os.close(fd)

    def remove_tombs(self, names: list[str]) -> None:
        if not names:
            return
        fd = self._tomb_dir(create=False)
        if fd is None:
            return
        try:
            for name in names:
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise Failure(f"{self._full(TOMB)}/{name}: {_why(e)}") from None
            _fsync_fd(fd)
        finally:
            os.close(fd)


def _fsync_fd(fd: int) -> None:
    """fsync a directory's descriptor; a filesystem that refuses it on a directory makes names as durable as
    it makes them."""
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (22, 95):  # EINVAL, EOPNOTSUPP
            raise
