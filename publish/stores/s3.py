"""The Store over an S3 bucket and prefix: keys PREFIX/pub/<entry> and PREFIX/<save path>/..., no HTTP here."""

from __future__ import annotations

import os

from publish.rules.errors import Failure, MissingRoot, StoreError
from publish.rules.layout import EXEC, MAN, PUB, ROOT_OBJECT, S3_KEY_MAX, TOMB
from publish.rules.redact import shown
from publish.s3.s3client import S3Client
from publish.stores.base import LastChange, Removal, Upload

TYPE_CHECKING = False  # typing costs start-up time; mypy reads this block, the interpreter skips it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from publish.rules.credentials import Credentials
    from publish.rules.deadline import Deadline
    from publish.s3.s3client import Renew
    from publish.stores.base import SaveFiles

#: The bytes one ranged GET of a deep check asks for.
CHUNK = 8 * 1024 * 1024
#: The name of the probe object, directly under PREFIX (beside pub/), followed by random hex.
PROBE_NAME = ".publish-probe-"
#: What ``publish init`` writes into the root's own object (layout.ROOT_OBJECT).
ROOT_BODY = b"publish checkpoint root\n"


class S3Store:
    """A checkpoint root ``s3://BUCKET[/PREFIX]``.

    ``renew(code)``, when given, is called once a request is refused with ExpiredToken or InvalidAccessKeyId;
    it returns credentials resolved again (or raises), which must name the same endpoint and region, and the
    request is sent once more with them.  ``client_options`` go to :class:`S3Client` (clock, sleep, rand,
    now, cafile, connector), for tests.
    """

    cheap_listing = False

    def __init__(
        self,
        bucket: str,
        prefix: str,
        creds: Credentials,
        *,
        proxy: str | None,
        env: Mapping[str, str],
        renew: Renew | None = None,
        token: Any = None,
        **client_options: Any,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.root = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.client = S3Client(creds, bucket, proxy=proxy, env=env, renew=renew, **client_options)
        self._token = token or (lambda: os.urandom(8).hex())

    # -- keys

    def key(self, path: str) -> str:
        """The object key of ``path`` (relative to the root)."""
        return f"{self.prefix}/{path}" if self.prefix else path

    def location(self, path: str) -> str:
        return f"{self.root}/{path}"

    # -- the Store protocol

    def check_root(self, dl: Deadline) -> None:
        pass

    def _holds_anything(self, dl: Deadline) -> bool:
        prefix = self.key("")  # PREFIX/, or "" for a whole bucket
        first = self.client.list(prefix, max_keys=1, pages=1, deadline=dl)
        return bool(first.keys or first.prefixes or first.truncated)

    def check_exists(self, dl: Deadline) -> None:
        if not self._holds_anything(dl):
            raise MissingRoot(
                f"checkpoint root {shown(self.root)} does not exist: it holds no object (a typo in the prefix?)",
                f"publish init -checkpoint {shown(self.root)} -creds ...",
            )

    def create_root(self, dl: Deadline) -> bool:
        if self._holds_anything(dl):
            return False
        return self.client.put_if_absent(self.key(ROOT_OBJECT), ROOT_BODY, deadline=dl)

    def list_entries(self, dl: Deadline) -> list[str]:
        pub = self.key(PUB) + "/"
        listing = self.client.list(pub, deadline=dl)  # the client refuses a key outside pub/
        return [k[len(pub) :] for k in listing.keys if k != pub]

    def entry_times(self, dl: Deadline) -> dict[str, float]:
        from publish.rules.timestamps import iso8601

        pub = self.key(PUB) + "/"
        listing = self.client.list(pub, deadline=dl)
        times = {}
        for key, modified in zip(listing.keys, listing.modified):
            if key == pub:
                continue
            try:
                times[key[len(pub) :]] = iso8601(modified)
            except ValueError:
                raise StoreError(
                    f"the store listed {shown(key)} without a LastModified time it could read",
                    op="list",
                    thing=self.location(PUB) + "/",
                ) from None
        return times

    def create_entry(self, dl: Deadline, name: str) -> bool:
        key = self.key(f"{PUB}/{name}")
        size = len(key.encode("utf-8"))
        if size > S3_KEY_MAX:
            raise Failure(
                f"the entry's key would be {size} bytes, over the {S3_KEY_MAX} an S3 key may hold: "
                "the save's path is too long"
            )
        return self.client.put_if_absent(key, deadline=dl)

    def create_mark(self, dl: Deadline, name: str) -> bool:
        return self.client.put_if_absent(self.key(f"{EXEC}/{name}"), deadline=dl)

    def remove_entries(self, dl: Deadline, names: list[str]) -> None:
        self.client.delete_objects([self.key(f"{PUB}/{n}") for n in names], deadline=dl)

    def holds(self, dl: Deadline, path: str) -> bool:
        key = self.key(path)
        # One LIST of the prefix <key>, max-keys=1, settles the usual cases in one request whatever order the
        # store lists in: a first key that is <key> or lies below <key>/ is something there; an empty,
        # complete listing means nothing has even the prefix.  A first key that only shares the prefix
        # (<key>-old, <key>0) settles nothing: in S3's UTF-8 order a key like <key>-old comes before <key>/x,
        # and rather than lean on every store's order the folder and the object are asked for themselves.
        first = self.client.list(key, max_keys=1, pages=1, deadline=dl)
        if any(k == key or k.startswith(key + "/") for k in first.keys):
            return True
        if not first.keys and not first.truncated:
            return False
        folder = self.client.list(key + "/", max_keys=1, pages=1, deadline=dl)
        if folder.keys or folder.truncated:
            return True
        return self.client.head(key, deadline=dl) is not None

    def list_folders(
        self, dl: Deadline, path: str, unexamined: list[tuple[str, str]] | None = None
    ) -> list[str]:
        folder = self.key(path) + "/"
        listing = self.client.list(
            folder, "/", deadline=dl
        )  # the client refuses a prefix that is not one element below
        return [p[len(folder) :].rstrip("/") for p in listing.prefixes]

    def read(self, dl: Deadline, path: str, limit: int) -> bytes | None:
        return self.client.get(self.key(path), limit, deadline=dl)

    def exists(self, dl: Deadline, path: str) -> bool:
        return self.client.head(self.key(path), deadline=dl) is not None

    def _time(self, text: str, key: str, op: str, thing: str) -> float:
        """A LastModified or Initiated text the store listed for ``key``, in seconds since the epoch."""
        from publish.rules.timestamps import iso8601

        try:
            return iso8601(text)
        except ValueError:
            raise StoreError(
                f"the store listed {shown(key)} without a time it could read ({shown(text)})",
                op=op,
                thing=thing,
            ) from None

    def newest(self, dl: Deadline, path: str) -> LastChange:
        key = self.key(path)
        listing = self.client.list(key + "/", deadline=dl)
        if listing.keys:
            thing = self.location(path) + "/"
            return LastChange(
                max(self._time(m, k, "list", thing) for k, m in zip(listing.keys, listing.modified))
            )
        headers = self.client.head(key, deadline=dl)  # a save that is one object (a Lightning .ckpt)
        if headers is None:
            return LastChange(None)
        from publish.rules.timestamps import http_date

        text = headers.get("last-modified", "")
        try:
            return LastChange(http_date(text))
        except ValueError:
            raise StoreError(
                f"the store sent no Last-Modified it could read ({shown(text)})",
                op="head",
                thing=self.location(path),
            ) from None

    def uploads(self, dl: Deadline, path: str, cutoff: float) -> list[Upload]:
        prefix = self.key(path) + "/"
        base = len(self.key(""))
        thing = self.location(path) + "/"
        found = []
        for key, upload_id, initiated in self.client.list_uploads(prefix, deadline=dl):
            at = self._time(initiated, key, "list-uploads", thing)
            if at <= cutoff:  # initiated long ago: it may still be receiving parts
                parts = self.client.list_parts(key, upload_id, deadline=dl)
                if parts is None:
                    continue  # completed or aborted meanwhile
                for text in parts:
                    at = max(at, self._time(text, key, "list-parts", self.location(key[base:])))
            found.append(Upload(key[base:], upload_id, at))
        return found

    def abort_upload(self, dl: Deadline, upload: Upload) -> bool:
        return self.client.abort_upload(self.key(upload.path), upload.upload_id, deadline=dl)

    def remove_folder(self, dl: Deadline, path: str) -> Removal:
        key = self.key(path)
        keys = self.client.list(key + "/", deadline=dl).keys
        if not keys and self.client.head(key, deadline=dl) is not None:
            keys = [key]  # a save that is one object (a Lightning .ckpt)
        self.client.delete_objects(keys, deadline=dl)  # 1,000 keys a request
        return Removal(removed=bool(keys))

    # -- tombstones

    def list_tombs(self, dl: Deadline) -> list[str]:
        tomb = self.key(TOMB) + "/"
        listing = self.client.list(tomb, deadline=dl)
        return [k[len(tomb) :] for k in listing.keys if k.startswith(tomb) and k != tomb]

    def create_tombs(self, dl: Deadline, names: list[str]) -> None:
        for name in names:
            self.client.put_if_absent(
                self.key(f"{TOMB}/{name}"), deadline=dl
            )  # False: already there, which is fine

    def tomb_times(self, dl: Deadline) -> dict[str, float]:
        tomb = self.key(TOMB) + "/"
        listing = self.client.list(tomb, deadline=dl)
        return {
            k[len(tomb) :]: self._time(m, k, "list", self.location(TOMB) + "/")
            for k, m in zip(listing.keys, listing.modified)
            if k.startswith(tomb) and k != tomb
        }

    def remove_tombs(self, dl: Deadline, names: list[str]) -> None:
        for name in names:
            self.client.delete(self.key(f"{TOMB}/{name}"), deadline=dl)

    # -- manifests

    def write_manifest(self, dl: Deadline, entry: str, data: bytes) -> None:
        self.client.put(self.key(f"{MAN}/{entry}"), data, deadline=dl)

    def read_manifest(self, dl: Deadline, entry: str, limit: int) -> bytes | None:
        return self.client.get(self.key(f"{MAN}/{entry}"), limit, deadline=dl)

    def list_manifests(self, dl: Deadline) -> list[str]:
        man = self.key(MAN) + "/"
        listing = self.client.list(man, deadline=dl)
        return [k[len(man) :] for k in listing.keys if k.startswith(man) and k != man]

    def manifest_times(self, dl: Deadline) -> dict[str, float]:
        man = self.key(MAN) + "/"
        listing = self.client.list(man, deadline=dl)
        return {
            k[len(man) :]: self._time(m, k, "list", self.location(MAN) + "/")
            for k, m in zip(listing.keys, listing.modified)
            if k.startswith(man) and k != man
        }

    def remove_manifests(self, dl: Deadline, names: list[str]) -> None:
        self.client.delete_objects([self.key(f"{MAN}/{n}") for n in names], deadline=dl)

    def save_rows(self, dl: Deadline, path: str, digests: bool) -> list[tuple[str, int, str | None]]:
        from publish.rules.manifest import good_path

        found = self.sizes(dl, path)
        if not found:
            size = self.size(dl, path)  # a save that is one object (a Lightning .ckpt)
            if size is None:
                raise Failure(f"save {shown(self.location(path))} does not exist")
            return [("", size, None)]
        # A key no file system could hold (a folder marker ending in /, an empty element) is no file of it.
        return sorted((rel, size, None) for rel, size in found.items() if good_path(rel))

    def check_rows(
        self, dl: Deadline, path: str, rows: list[tuple[str, int, str | None]], deep: bool
    ) -> tuple[str, str] | None:
        if len(rows) == 1 and rows[0][0] == "":
            size = self.size(dl, path)
            found = {} if size is None else {"": size}
        else:
            found = self.sizes(dl, path)
        for rel, size, _ in rows:
            where = self.location(f"{path}/{rel}" if rel else path)
            got = found.get(rel)
            if got is None:
                return where, "missing"
            if got != size:
                return where, f"size {got}, manifest says {size}"
        if not deep:
            return None
        for rel, size, digest in rows:
            if digest is None:
                continue
            where = self.location(f"{path}/{rel}" if rel else path)
            why = self._check_digest(dl, f"{path}/{rel}" if rel else path, size, digest)
            if why:
                return where, why
        return None

    def _check_digest(self, dl: Deadline, path: str, size: int, digest: str) -> str:
        """Why the object at ``path`` is not ``size`` bytes of SHA-256 ``digest`` (read by ranged GETs of
        CHUNK bytes), or ""."""
        import hashlib

        h = hashlib.sha256()
        offset = 0
        while offset < size:
            data = self.client.get_range(self.key(path), offset, min(CHUNK, size - offset), deadline=dl)
            if data is None:
                return "missing"
            if not data:
                return f"size {offset} when read, manifest says {size}"
            h.update(data)
            offset += len(data)
        if size == 0 and self.client.head(self.key(path), deadline=dl) is None:
            return "missing"
        got = h.hexdigest()
        return "" if got == digest else f"sha256 {got}, manifest says {digest}"

    # -- what the frameworks read of a save

    def list_files(self, dl: Deadline, path: str) -> list[str]:
        folder = self.key(path) + "/"
        listing = self.client.list(folder, "/", deadline=dl)
        return [k[len(folder) :] for k in listing.keys if k != folder]

    def children(self, dl: Deadline, path: str) -> tuple[list[str], list[str]]:
        folder = self.key(path) + "/"
        listing = self.client.list(folder, "/", deadline=dl)
        folders = [p[len(folder) :].rstrip("/") for p in listing.prefixes]
        return folders, [k[len(folder) :] for k in listing.keys if k != folder]

    def sizes(self, dl: Deadline, path: str) -> dict[str, int]:
        folder = self.key(path) + "/"
        listing = self.client.list(folder, deadline=dl)
        found = {}
        for k, size in zip(listing.keys, listing.sizes):
            if k == folder:
                continue
            if size < 0:
                raise StoreError(
                    f"the store listed {k} without its Size", op="list", thing=f"{self.location(path)}/"
                )
            found[k[len(folder) :]] = size
        return found

    def size(self, dl: Deadline, path: str) -> int | None:
        headers = self.client.head(self.key(path), deadline=dl)
        if headers is None:
            return None
        length = headers.get("content-length", "")
        if not (length.isascii() and length.isdigit()):
            raise StoreError("the store sent no Content-Length", op="head", thing=self.location(path))
        return int(length)

    def read_range(self, dl: Deadline, path: str, offset: int, length: int) -> bytes | None:
        return self.client.get_range(self.key(path), offset, length, deadline=dl)

    # -- the upload of a save (publish.stores.transfer): this root is the destination

    def open_save(self, dl: Deadline, path: str) -> SaveFiles:
        raise Failure(f"{shown(self.location(path))}: a save on an S3 root is not uploaded elsewhere")

    def sender(self, fork: bool) -> S3Sender:
        return S3Sender(self, self.client.fork() if fork else self.client, fork)

    # -- probe

    def probe(self, dl: Deadline) -> None:
        """The preflight: put a probe object beside pub/, read it back, put it again with If-None-Match: *
        (expecting 412), list pub/, delete the probe.  Exactly two PUTs.  StoreError "probe: <step>: ...".
        """
        token = self._token()
        key = self.key(PROBE_NAME + token)
        body = f"publish probe {token}\n".encode("ascii")
        where = self.location(PROBE_NAME + token)
        with _step("write"):
            self.client.put(key, body, deadline=dl)
        with _step("read"):
            got = self.client.get(key, len(body), deadline=dl)
            if got is None:
                raise StoreError(f"{where} is not there after it was written")
            if got != body:
                raise StoreError(f"{where} reads back other bytes than were written")
        with _step("conditional write"):
            if self.client.put_if_absent(key, body, deadline=dl):
                raise StoreError(
                    "the store accepted a second If-None-Match: * write of the same key: it does not honour "
                    "conditional writes",
                    thing=where,
                )
        with _step("list"):
            self.list_entries(dl)
        with _step("delete"):
            self.client.delete(key, deadline=dl)


class S3Sender:
    """The requests of an upload into an S3 root, over ``client`` (closed by :meth:`close` when ``own``):
    PUT, the multipart ones, HEAD, each to the key of a path relative to the root."""

    def __init__(self, store: S3Store, client: S3Client, own: bool) -> None:
        self.key = store.key
        self.client = client
        self.own = own

    def put(self, dl: Deadline, path: str, body: memoryview, crc: str) -> None:
        self.client.put_bytes(self.key(path), body, crc, deadline=dl)

    def create_upload(self, dl: Deadline, path: str) -> str:
        return self.client.create_upload(self.key(path), deadline=dl)

    def upload_part(
        self, dl: Deadline, path: str, upload_id: str, number: int, body: memoryview, crc: str
    ) -> str:
        return self.client.upload_part(self.key(path), upload_id, number, body, crc, deadline=dl)

    def complete_upload(self, dl: Deadline, path: str, upload_id: str, parts: list[tuple[str, str]]) -> str:
        return self.client.complete_upload(self.key(path), upload_id, parts, deadline=dl)

    def stored(self, dl: Deadline, path: str, checksum: bool) -> tuple[str, str] | None:
        head = self.client.head(self.key(path), checksum=checksum, deadline=dl)
        if head is None:
            return None
        return head.get("content-length", ""), head.get("x-amz-checksum-crc32", "")

    def close(self) -> None:
        if self.own:
            self.client.close()


class _step:
    """Re-raise a StoreError as ``probe: <step>: <what it said>``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, StoreError):
            raise exc.in_step(self.name) from None
