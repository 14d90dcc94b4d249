"""The writing part of the POSIX store: the root made, entries, marks, tombstones and manifests created and
removed, and saves removed (walking down through descriptors, publish.rules.files.walks). A part of
:class:`publish.stores.posix.PosixStore`, made on first use: a resolve that answers needs none of it."""

from __future__ import annotations

import posix as os  # os's functions themselves (os.open is posix.open): importing os costs a sixth of a bare start
import stat

from publish.rules.errors import Failure, FileError, PublishError
from publish.rules.files import fsops, walks
from publish.rules.layout import EXEC, MAN, POSIX_NAME_MAX, PUB, TOMB
from publish.rules.redact import shown
from publish.stores.posix_root import MARKER_FLAGS, RootDirs, kind

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from publish.rules.deadline import Deadline
    from publish.stores.base import Removal

_O_NOFOLLOW = fsops.O_NOFOLLOW
_O_CLOEXEC = fsops.O_CLOEXEC

#: A manifest's temporary file: this prefix and random hex, in man/ (no entry name starts with ".").
TEMP_PREFIX = ".tmp-"
#: How long after its last change a temporary file in man/ is taken for one a cut-off write left.
TEMP_AGE = 3600.0


class PosixWrites:
    """What the store writes and removes below the root's directories ``dirs``."""

    def __init__(self, dirs: RootDirs) -> None:
        self._dirs = dirs

    def _top(self, name: str) -> int | None:
        """A descriptor of pub/, tomb/ or man/, never through a link; None when it is missing."""
        root = self._dirs.open_root()
        try:
            return self._dirs.open_top(root, name)
        finally:
            os.close(root)

    def create_root(self, dl: Deadline) -> bool:
        try:
            fd = os.open(self._dirs.root, os.O_RDONLY | fsops.O_DIRECTORY | _O_CLOEXEC)
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            raise Failure(f"checkpoint root {shown(self._dirs.root)} is not a directory") from None
        except OSError as e:
            raise FileError(f"checkpoint root {shown(self._dirs.root)}", e, op="open") from None
        else:
            os.close(fd)
            return False
        from os import makedirs  # init's alone
        from posixpath import dirname

        try:
            makedirs(self._dirs.root)
        except FileExistsError:
            return False  # made meanwhile by another init
        except OSError as e:
            raise FileError(
                f"checkpoint root {shown(self._dirs.root)}", e, "could not make it", op="make"
            ) from None
        parent = dirname(self._dirs.root.rstrip("/")) or "/"
        try:  # durable where the filesystem allows
            fd = os.open(parent, os.O_RDONLY | fsops.O_DIRECTORY | _O_CLOEXEC)
            try:
                fsops.fsync_fd(fd)
            finally:
                os.close(fd)
        except OSError:
            pass
        return True

    def create_entry(self, dl: Deadline, name: str) -> bool:
        if len(name.encode("utf-8")) > POSIX_NAME_MAX:
            raise Failure(
                f"the entry name would be {len(name.encode('utf-8'))} bytes, over the {POSIX_NAME_MAX} a POSIX "
                "file name may hold: the save's path is too long"
            )
        fd = self._made_top(
            PUB, 2, f"{self._dirs.full(PUB)} was removed while an entry was being created in it"
        )
        try:
            return self._create_in(fd, name)
        finally:
            os.close(fd)

    def create_mark(self, dl: Deadline, name: str) -> bool:
        fd = self._made_top(EXEC, 2, f"{self._dirs.full(EXEC)} was removed while a mark was being made in it")
        try:
            return self._create_in(fd, name, EXEC)
        finally:
            os.close(fd)

    def _create_in(self, pub_fd: int, name: str, top: str = PUB) -> bool:
        """Create the empty ``name`` in the directory ``pub_fd`` (the root's ``top``) exclusively, durably."""
        path = self._dirs.full(f"{top}/{name}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o644, dir_fd=pub_fd)
        except FileExistsError:
            return False
        except OSError as e:
            raise FileError(path, e, op="create") from None
        try:
            os.fsync(fd)
        except OSError as e:
            raise FileError(path, e, op="sync") from None
        finally:
            os.close(fd)
        self._sync(pub_fd, self._dirs.full(top))
        return True

    def _sync(self, fd: int, where: str) -> None:
        """fsync the directory ``fd`` (at ``where``, for messages) as :func:`fsops.fsync_fd` does."""
        try:
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(where, e, op="sync") from None

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        fd = self._top(PUB)
        if fd is None:
            return
        try:
            self._unlink_all(fd, PUB, names)
        finally:
            os.close(fd)

    def _unlink_all(self, fd: int, where: str, names: list[str]) -> None:
        """Unlink each of ``names`` in the directory ``fd`` (``where``, for messages), then fsync it; a name
        already gone is fine."""
        for name in names:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise FileError(f"{self._dirs.full(where)}/{name}", e, op="remove") from None
        if names:
            self._sync(fd, self._dirs.full(where))

    def remove_folder(
        self,
        dl: Deadline,
        path: str,
        seen: dict[str, tuple[os.stat_result, list[str], list[str]]] | None = None,
    ) -> Removal:
        """Walk down from the root's descriptor, each element checked (``lstat``) then opened with
        ``O_NOFOLLOW`` and compared (``fstat``), and remove the last relative to its parent's descriptor:
        as ``seen`` records it (:func:`walks.remove_seen`) when that is the folder there, else (and for
        whatever that left) listing it as it goes (:func:`walks.remove_tree`)."""
        parts = path.split("/")
        fds = [self._dirs.open_root()]
        try:
            for i, part in enumerate(parts):
                rel = "/".join(parts[: i + 1])
                try:
                    result = self._remove_step(fds, part, rel, i == len(parts) - 1, seen)
                except walks.Changed as e:
                    where = self._dirs.full(rel + ("/" + e.filename if e.filename else ""))
                    raise Failure(f"{where}: could not remove: {e.strerror}") from None
                except OSError as e:
                    where = self._dirs.full(
                        rel + ("/" + e.filename if isinstance(e.filename, str) and e.filename else "")
                    )
                    raise FileError(where, e, "could not remove", op="remove") from None
                if result is not None:
                    return result
            raise AssertionError("unreachable")
        finally:
            for fd in fds:
                os.close(fd)

    def _remove_step(
        self,
        fds: list[int],
        part: str,
        rel: str,
        last: bool,
        seen: dict[str, tuple[os.stat_result, list[str], list[str]]] | None = None,
    ) -> Removal | None:
        """One element of remove_folder's walk: the Removal when the walk ends here, else None (the element's
        descriptor is appended to ``fds``)."""
        from publish.stores.base import Removal  # prune's alone: a resolve needs none of base's types

        if last and seen and walks.remove_seen(fds[-1], part, seen):
            return Removal(True)  # else as below, from the lstat: a link, gone, swapped, or what is left
        st = fsops.lstat_at(fds[-1], part)
        if st is None:
            return Removal(False)
        if stat.S_ISLNK(st.st_mode):
            return Removal(False, link=rel)
        if not stat.S_ISDIR(st.st_mode):
            if not last:
                return Removal(False)  # a file where a folder would be: there is no such folder
            try:
                os.unlink(part, dir_fd=fds[-1])  # a save that is one file; unlink never follows a link
            except FileNotFoundError:
                return Removal(False)
            return Removal(True)
        outcome = walks.remove_tree(fds[-1], part, st) if last else walks.enter(fds[-1], part, st)
        if isinstance(outcome, int):
            fds.append(outcome)
            return None
        if outcome == "":
            return Removal(True)
        if outcome == walks.LINK:  # swapped for a link after the check: left in place, as any link is
            return Removal(False, link=rel)
        if outcome == walks.GONE:
            return Removal(False)
        raise Failure(f"{self._dirs.full(rel)}: could not remove: it was replaced while it was being removed")

    # -- tombstones: tomb/ is reached through descriptors, never through a link, like pub/

    def _made_top(self, name: str, opens: int, vanished: str) -> int:
        """A descriptor of pub/, tomb/ or exec/, made (durably: the root fsynced) when missing, opened at most
        ``opens`` times; a Failure saying ``vanished`` when another process keeps removing it."""
        root = self._dirs.open_root()
        try:
            for attempt in range(opens):
                fd = self._dirs.open_top(root, name)
                if fd is not None:
                    return fd
                if attempt == opens - 1:
                    break
                try:
                    os.mkdir(name, 0o755, dir_fd=root)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise FileError(self._dirs.full(name), e, op="make") from None
                self._sync(root, f"checkpoint root {shown(self._dirs.root)}")
            raise Failure(vanished)
        finally:
            os.close(root)

    def list_tombs(self, dl: Deadline) -> list[str]:
        fd = self._top(TOMB)
        if fd is None:
            return []
        try:
            return os.listdir(fd)
        except OSError as e:
            raise FileError(self._dirs.full(TOMB), e, op="list") from None
        finally:
            os.close(fd)

    def tomb_times(self, dl: Deadline) -> dict[str, float]:
        fd = self._top(TOMB)
        if fd is None:
            return {}
        try:
            times = {}
            for name in os.listdir(fd):
                st = fsops.lstat_at(fd, name)
                if st is not None:  # else removed since it was listed
                    times[name] = st.st_mtime  # its ctime moves as its kin, hard links to it, come and go
            return times
        except OSError as e:
            raise FileError(self._dirs.full(TOMB), e, op="list") from None
        finally:
            os.close(fd)

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        if not names:
            return
        fd = self._made_top(TOMB, 4, f"{self._dirs.full(TOMB)}: appeared and vanished while it was opened")
        try:
            # Each tombstone after the first is a hard link to the first this call made: a name without a new
            # inode, about 30 times less CPU than creating a file here (bench/orphans.py).  Where a link is
            # refused (the filesystem has none, the file has too many links, it was dropped meanwhile), the
            # name is created as a file, which the next ones link to.
            first = ""
            for name in names:
                if first:
                    try:
                        os.link(first, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                        continue
                    except FileExistsError:
                        continue
                    except OSError:
                        pass
                try:
                    f = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                        0o644,
                        dir_fd=fd,
                    )
                except FileExistsError:
                    continue
                os.close(f)  # empty: the one fsync of tomb/ below makes every new name durable
                first = name
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(self._dirs.full(TOMB), e, op="create") from None
        finally:
            os.close(fd)

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        if not names:
            return
        fd = self._top(TOMB)
        if fd is None:
            return
        try:
            self._unlink_all(fd, TOMB, names)
        finally:
            os.close(fd)

    # -- manifests: man/ is reached through descriptors, never through a link, like pub/

    def _manifest_name(self, entry: str) -> str:
        if not entry or "/" in entry or "\0" in entry or entry.startswith("."):
            raise Failure(f"{shown(self._dirs.full(MAN) + '/' + entry)}: not a manifest's name")
        return entry

    def write_manifest(self, dl: Deadline, entry: str, data: bytes) -> None:
        name = self._manifest_name(entry)
        where = f"{self._dirs.full(MAN)}/{name}"
        fd = self._made_top(MAN, 4, f"{self._dirs.full(MAN)}: appeared and vanished while it was opened")
        temp = TEMP_PREFIX + os.urandom(8).hex()
        written = False
        try:
            f = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644, dir_fd=fd
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(f, view[: 1 << 20]) :]
                os.fsync(f)
            finally:
                os.close(f)
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a link there, never follows it
            written = True
            fsops.fsync_fd(fd)
        except OSError as e:
            raise FileError(shown(where), e) from None
        finally:
            if not written:
                try:  # noqa: SIM105  (contextlib costs a POSIX resolve its start-up time)
                    os.unlink(temp, dir_fd=fd)
                except OSError:
                    pass
            os.close(fd)

    def read_manifest(self, dl: Deadline, entry: str, limit: int) -> bytes | None:
        name = self._manifest_name(entry)
        where = shown(f"{self._dirs.full(MAN)}/{name}")
        fd = self._top(MAN)
        if fd is None:
            return None
        try:
            return self._read_in(fd, name, where, limit)
        finally:
            os.close(fd)

    def read_manifests(
        self, dl: Deadline, entries: list[str], limit: int
    ) -> dict[str, bytes | None | PublishError]:
        """Each of ``entries``' manifest (None: it has none), man/ opened once for all of them (status reads
        one per publication); a manifest that cannot be read is its error, in place of its bytes."""
        got: dict[str, bytes | None | PublishError] = {}
        fd = self._top(MAN)
        if fd is None:
            return dict.fromkeys(entries)
        try:
            for entry in entries:
                name = self._manifest_name(entry)
                try:
                    got[entry] = self._read_in(fd, name, shown(f"{self._dirs.full(MAN)}/{name}"), limit)
                except PublishError as e:
                    got[entry] = e
        finally:
            os.close(fd)
        return got

    def _read_in(self, fd: int, name: str, where: str, limit: int) -> bytes | None:
        """The manifest ``name`` in man/ (``fd``), read with a limit; None when it is not there."""
        try:
            try:
                f = os.open(name, MARKER_FLAGS, dir_fd=fd)  # a link or a FIFO is refused, never followed
            except FileNotFoundError:
                return None
            except OSError as e:
                st = fsops.lstat_at(fd, name)
                if st is not None and not stat.S_ISREG(st.st_mode):
                    raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file") from None
                raise FileError(where, e) from None
            try:
                st = os.fstat(f)
                if not stat.S_ISREG(st.st_mode):
                    raise Failure(f"{where} is {kind(st.st_mode)}, not a regular file")
                from publish.rules.files.fileio import (
                    read_at_most,  # a manifest's reader alone: a resolve needs none
                )

                data = read_at_most(f, limit)
            finally:
                os.close(f)
            if data is None:
                raise Failure(f"{where} is over {limit} bytes")
            return data
        except OSError as e:
            raise FileError(where, e) from None

    def list_manifests(self, dl: Deadline) -> list[str]:
        fd = self._top(MAN)
        if fd is None:
            return []
        try:
            return [n for n in os.listdir(fd) if not n.startswith(".")]
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        finally:
            os.close(fd)

    def manifest_times(self, dl: Deadline) -> dict[str, float]:
        fd = self._top(MAN)
        if fd is None:
            return {}
        try:
            times = {}
            for name in os.listdir(fd):
                if not name.startswith("."):
                    st = fsops.lstat_at(fd, name)
                    if st is not None:  # else removed since it was listed
                        times[name] = walks.changed_at(st)
            return times
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        finally:
            os.close(fd)

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        fd = self._top(MAN)
        if fd is None:
            return
        try:
            self._unlink_all(fd, MAN, [self._manifest_name(n) for n in names] + self._stale_temps(fd))
        finally:
            os.close(fd)

    def _stale_temps(self, fd: int) -> list[str]:
        """The temporary files in man/ (the directory ``fd``) unchanged for TEMP_AGE: writes cut off."""
        import time

        cutoff = time.time() - TEMP_AGE
        stale = []
        try:
            for name in os.listdir(fd):
                if name.startswith(TEMP_PREFIX):
                    st = fsops.lstat_at(fd, name)
                    if st is not None and stat.S_ISREG(st.st_mode) and walks.changed_at(st) < cutoff:
                        stale.append(name)
        except OSError as e:
            raise FileError(self._dirs.full(MAN), e) from None
        return stale
