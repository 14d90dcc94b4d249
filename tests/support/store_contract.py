"""The conformance suite every Store passes.

A store's test file subclasses ``StoreContract`` and provides four fixtures: ``store`` (a Store over a fresh,
empty root), ``make_file`` (``make_file(path, data=b"")`` creates a file, or an S3 object, at ``path``
relative to that root), ``peer`` (``peer()`` makes another Store over that same root, as another process
would have: its own connection, its own descriptors) and ``unreadable`` (``unreadable(folder)`` makes a
folder at ``folder`` holding a file that is there but cannot be read, a real fault of that kind of store,
and returns a Store over the root that meets the fault and the file's path).
"""

from __future__ import annotations

import threading
import time
import zlib
from typing import Any, Callable

import pytest

from publish.rules import layout
from publish.rules.deadline import UNBOUNDED, Deadline
from publish.rules.errors import Failure, StoreError, UploadError
from publish.stores.base import LastChange, Store, Upload

MakeFile = Callable[..., None]
MakePeer = Callable[[], Store]
MakeUnreadable = Callable[[str], "tuple[Store, str]"]


class StoreContract:
    def test_location_joins_root_and_path(self, store: Store) -> None:
        assert store.location("exec/A/checkpoint-1") == store.root + "/exec/A/checkpoint-1"
        assert not store.root.endswith("/")

    def test_fresh_root_has_no_entries(self, store: Store) -> None:
        store.check_root(Deadline(30))
        assert store.list_entries(Deadline(30)) == []

    def test_create_entry_once(self, store: Store) -> None:
        name = layout.name(1, 2, "exec/A/checkpoint-2")
        assert store.create_entry(UNBOUNDED, name) is True
        assert store.create_entry(UNBOUNDED, name) is False
        assert store.list_entries(UNBOUNDED) == [name]

    def test_concurrent_creates_of_one_entry_exactly_one_wins(self, store: Store, peer: MakePeer) -> None:
        name = layout.name(1, 1, "exec/A/checkpoint-1")
        stores = [peer() for _ in range(8)]
        results: list[bool] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(len(stores), timeout=60)

        def create(s: Store) -> None:
            try:
                barrier.wait()
                results.append(s.create_entry(UNBOUNDED, name))
            except BaseException as e:  # noqa: BLE001 - reported by the test thread below
                errors.append(e)

        threads = [threading.Thread(target=create, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a create_entry did not return within 120 s"
        assert errors == []
        assert sorted(results) == [False] * 7 + [True]
        assert store.list_entries(UNBOUNDED) == [name]

    def test_entries_listed_in_any_number(self, store: Store) -> None:
        names = {layout.name(0, i, f"exec/A/checkpoint-{i}") for i in range(25)}
        for n in names:
            assert store.create_entry(UNBOUNDED, n)
        assert sorted(store.list_entries(UNBOUNDED)) == sorted(names)

    def test_remove_entries(self, store: Store) -> None:
        a, b = layout.name(0, 1, "x/a"), layout.name(0, 2, "x/b")
        store.create_entry(UNBOUNDED, a)
        store.create_entry(UNBOUNDED, b)
        store.remove_entries(UNBOUNDED, [a, layout.name(0, 3, "x/never")])
        assert store.list_entries(UNBOUNDED) == [b]

    def test_odd_names_in_pub_are_listed_not_hidden(self, store: Store, make_file: MakeFile) -> None:
        make_file("pub/.hidden")
        make_file("pub/not-an-entry")
        assert sorted(store.list_entries(UNBOUNDED)) == [".hidden", "not-an-entry"]

    def test_holds(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/AB/checkpoint-1/model.bin", b"w")
        assert store.holds(UNBOUNDED, "exec/AB/checkpoint-1")
        assert store.holds(UNBOUNDED, "exec/AB")
        assert not store.holds(UNBOUNDED, "exec/A")  # a prefix of a name is not a folder
        assert not store.holds(UNBOUNDED, "exec/AB/checkpoint-2")

    def test_list_folders(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/checkpoint-1/a", b"1")
        make_file("exec/A/checkpoint-20/b", b"2")
        make_file("exec/A/loose-file", b"3")
        make_file("exec/AB/checkpoint-3/c", b"4")
        assert sorted(store.list_folders(UNBOUNDED, "exec/A")) == ["checkpoint-1", "checkpoint-20"]
        assert store.list_folders(UNBOUNDED, "exec/missing") == []

    def test_read(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/checkpoint-1/trainer_state.json", b'{"global_step": 1}')
        assert store.read(UNBOUNDED, "exec/A/checkpoint-1/trainer_state.json", 1024) == b'{"global_step": 1}'
        assert store.read(UNBOUNDED, "exec/A/checkpoint-1/missing.json", 1024) is None
        assert store.read(UNBOUNDED, "exec/A/checkpoint-1/trainer_state.json", 18) == b'{"global_step": 1}'

    def test_read_over_the_limit_is_refused_naming_the_file(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/big", b"x" * 100)
        with pytest.raises(Failure, match="exec/A/big"):
            store.read(UNBOUNDED, "exec/A/big", 99)

    def test_exists(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/step-5/.metadata", b"")
        assert store.exists(UNBOUNDED, "exec/A/step-5/.metadata")
        assert not store.exists(UNBOUNDED, "exec/A/step-6/.metadata")

    def test_remove_folder_removes_everything_under_it_and_nothing_else(
        self, store: Store, make_file: MakeFile
    ) -> None:
        make_file("exec/A/checkpoint-1/a", b"1")
        make_file("exec/A/checkpoint-1/sub/b", b"2")
        make_file("exec/A/checkpoint-10/c", b"3")
        make_file("exec/A/checkpoint-1x", b"4")
        result = store.remove_folder(UNBOUNDED, "exec/A/checkpoint-1")
        assert result.removed and not result.link
        assert not store.holds(UNBOUNDED, "exec/A/checkpoint-1")
        assert store.read(UNBOUNDED, "exec/A/checkpoint-10/c", 10) == b"3"
        assert store.read(UNBOUNDED, "exec/A/checkpoint-1x", 10) == b"4"

    def test_remove_absent_folder(self, store: Store) -> None:
        result = store.remove_folder(UNBOUNDED, "exec/A/checkpoint-9")
        assert not result.removed and not result.link

    def test_calls_accept_an_unbounded_deadline_and_seconds(self, store: Store, make_file: Any) -> None:
        assert store.list_entries(Deadline.none()) == []
        assert store.list_entries(Deadline(5.0)) == []

    # -- tombstones: tomb/<base32 of a folder's path>, beside pub/

    def test_fresh_root_has_no_tombs(self, store: Store) -> None:
        assert store.list_tombs(UNBOUNDED) == []
        store.remove_tombs(UNBOUNDED, [layout.tomb_name("exec/A")])  # nothing there: fine
        store.create_tombs(UNBOUNDED, [])
        assert store.list_tombs(UNBOUNDED) == []

    def test_create_list_and_remove_tombs(self, store: Store) -> None:
        a, b = layout.tomb_name("exec/A/checkpoint-1"), layout.tomb_name("exec/A/checkpoint-2")
        store.create_tombs(UNBOUNDED, [a, b])
        assert sorted(store.list_tombs(UNBOUNDED)) == sorted([a, b])
        store.create_tombs(UNBOUNDED, [a])  # already there: fine, and still one
        assert sorted(store.list_tombs(UNBOUNDED)) == sorted([a, b])
        store.remove_tombs(UNBOUNDED, [a, layout.tomb_name("exec/never")])
        assert store.list_tombs(UNBOUNDED) == [b]
        store.remove_tombs(UNBOUNDED, [b])
        assert store.list_tombs(UNBOUNDED) == []

    def test_tombs_and_entries_are_apart(self, store: Store) -> None:
        entry = layout.name(0, 1, "exec/A/checkpoint-1")
        store.create_entry(UNBOUNDED, entry)
        store.create_tombs(UNBOUNDED, [layout.tomb_name("exec/A/checkpoint-1")])
        assert store.list_entries(UNBOUNDED) == [entry]
        assert store.list_tombs(UNBOUNDED) == [layout.tomb_name("exec/A/checkpoint-1")]
        store.remove_tombs(UNBOUNDED, store.list_tombs(UNBOUNDED))
        assert store.list_entries(UNBOUNDED) == [entry]

    def test_odd_names_in_tomb_are_listed_not_hidden(self, store: Store, make_file: MakeFile) -> None:
        make_file("tomb/.hidden")
        make_file("tomb/not-a-tombstone")
        assert sorted(store.list_tombs(UNBOUNDED)) == [".hidden", "not-a-tombstone"]

    def test_many_tombs(self, store: Store) -> None:
        names = {layout.tomb_name(f"exec/A/checkpoint-{i}") for i in range(25)}
        store.create_tombs(UNBOUNDED, sorted(names))
        assert sorted(store.list_tombs(UNBOUNDED)) == sorted(names)

    # -- manifests: man/<entry name>, beside pub/

    def test_fresh_root_has_no_manifests(self, store: Store) -> None:
        name = layout.name(0, 1, "exec/A/checkpoint-1")
        assert store.list_manifests(UNBOUNDED) == []
        assert store.read_manifest(UNBOUNDED, name, 1024) is None
        store.remove_manifests(UNBOUNDED, [name])  # nothing there: fine
        assert store.list_manifests(UNBOUNDED) == []

    def test_write_read_list_and_remove_manifests(self, store: Store) -> None:
        a, b = layout.name(0, 1, "exec/A/checkpoint-1"), layout.name(0, 2, "exec/A/checkpoint-2")
        store.write_manifest(UNBOUNDED, a, b'{"a":1}')
        store.write_manifest(UNBOUNDED, b, b"second")
        assert store.read_manifest(UNBOUNDED, a, 1024) == b'{"a":1}'
        assert sorted(store.list_manifests(UNBOUNDED)) == sorted([a, b])
        store.write_manifest(UNBOUNDED, a, b"replaced")  # a write replaces what was there
        assert store.read_manifest(UNBOUNDED, a, 1024) == b"replaced"
        assert sorted(store.list_manifests(UNBOUNDED)) == sorted([a, b])
        store.remove_manifests(UNBOUNDED, [a, layout.name(0, 3, "exec/never")])
        assert store.list_manifests(UNBOUNDED) == [b]
        assert store.read_manifest(UNBOUNDED, a, 1024) is None

    def test_manifest_times_are_when_each_was_written(self, store: Store) -> None:
        a = layout.name(0, 1, "exec/A/checkpoint-1")
        assert store.manifest_times(UNBOUNDED) == {}
        before = time.time()
        store.write_manifest(UNBOUNDED, a, b"m")
        times = store.manifest_times(UNBOUNDED)
        assert list(times) == [a]
        assert before - 5 <= times[a] <= time.time() + 5

    def test_tomb_times_are_when_each_was_written(self, store: Store) -> None:
        a, b = layout.tomb_name("exec/A/checkpoint-1"), layout.tomb_name("exec/A/checkpoint-2")
        assert store.tomb_times(UNBOUNDED) == {}
        before = time.time()
        store.create_tombs(UNBOUNDED, [a, b])
        times = store.tomb_times(UNBOUNDED)
        assert sorted(times) == sorted([a, b])
        assert all(before - 5 <= t <= time.time() + 5 for t in times.values())
        store.remove_tombs(UNBOUNDED, [a])
        assert list(store.tomb_times(UNBOUNDED)) == [b]

    def test_manifests_entries_and_tombs_are_apart(self, store: Store) -> None:
        entry = layout.name(0, 1, "exec/A/checkpoint-1")
        store.write_manifest(UNBOUNDED, entry, b"m")
        assert store.list_entries(UNBOUNDED) == [] and store.list_tombs(UNBOUNDED) == []
        store.create_entry(UNBOUNDED, entry)
        store.remove_manifests(UNBOUNDED, [entry])
        assert store.list_entries(UNBOUNDED) == [entry]

    def test_a_manifest_over_the_limit_is_refused_naming_it(self, store: Store) -> None:
        name = layout.name(0, 1, "exec/A/checkpoint-1")
        store.write_manifest(UNBOUNDED, name, b"x" * 100)
        assert store.read_manifest(UNBOUNDED, name, 100) == b"x" * 100
        with pytest.raises(Failure, match="man/" + name):
            store.read_manifest(UNBOUNDED, name, 99)

    def test_an_empty_manifest_is_read_as_empty_not_missing(self, store: Store) -> None:
        name = layout.name(0, 1, "exec/A/checkpoint-1")
        store.write_manifest(UNBOUNDED, name, b"")
        assert store.read_manifest(UNBOUNDED, name, 10) == b""

    def test_odd_names_in_man_are_listed_not_hidden(self, store: Store, make_file: MakeFile) -> None:
        make_file("man/not-a-manifest")
        assert store.list_manifests(UNBOUNDED) == ["not-a-manifest"]

    # -- marks: exec/<name>, run -requeue's record of a dispatch requeued without progress

    def test_create_mark_once_listed_beside_the_attempts(self, store: Store, make_file: MakeFile) -> None:
        assert store.list_files(UNBOUNDED, layout.EXEC) == []
        assert store.create_mark(UNBOUNDED, ".idle-ab-1") is True  # exec/ made for it
        make_file("exec/A/checkpoint-1/w")
        assert store.create_mark(UNBOUNDED, ".idle-ab-1") is False
        assert store.create_mark(UNBOUNDED, ".idle-ab-2") is True
        assert sorted(store.list_files(UNBOUNDED, layout.EXEC)) == [".idle-ab-1", ".idle-ab-2"]
        assert store.list_folders(UNBOUNDED, layout.EXEC) == ["A"]
        assert store.list_entries(UNBOUNDED) == [] and store.list_tombs(UNBOUNDED) == []
        assert store.size(UNBOUNDED, "exec/.idle-ab-1") == 0

    # -- what the frameworks read of a save

    def test_children_are_the_folders_and_the_files_directly_in_a_folder(
        self, store: Store, make_file: MakeFile
    ) -> None:
        make_file("exec/A/last.ckpt", b"z")
        make_file("exec/A/checkpoint-1/model.bin", b"w")
        make_file("exec/A/checkpoint-2/sub/x", b"v")
        make_file("exec/AB/checkpoint-3/c", b"4")
        folders, files = store.children(UNBOUNDED, "exec/A")
        assert (sorted(folders), files) == (["checkpoint-1", "checkpoint-2"], ["last.ckpt"])
        assert store.children(UNBOUNDED, "exec/missing") == ([], [])

    def test_list_files_names_the_files_directly_in_a_folder(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/epoch=0-step=2.ckpt", b"zz")
        make_file("exec/A/last.ckpt", b"z")
        make_file("exec/A/checkpoint-1/model.bin", b"w")
        assert sorted(store.list_files(UNBOUNDED, "exec/A")) == ["epoch=0-step=2.ckpt", "last.ckpt"]
        assert store.list_files(UNBOUNDED, "exec/B") == []

    def test_sizes_of_every_file_below_a_folder(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/step-1/.metadata", b"m" * 7)
        make_file("exec/A/step-1/__0_0.distcp", b"d" * 100)
        make_file("exec/A/step-1/sub/x", b"")
        make_file("exec/A/step-10/__0_0.distcp", b"other")
        assert store.sizes(UNBOUNDED, "exec/A/step-1") == {".metadata": 7, "__0_0.distcp": 100, "sub/x": 0}
        assert store.sizes(UNBOUNDED, "exec/A/step-2") == {}

    def test_size_and_read_range_of_one_file(self, store: Store, make_file: MakeFile) -> None:
        data = bytes(range(256)) * 40
        make_file("exec/A/s.ckpt", data)
        assert store.size(UNBOUNDED, "exec/A/s.ckpt") == len(data)
        assert store.size(UNBOUNDED, "exec/A/none.ckpt") is None
        assert store.read_range(UNBOUNDED, "exec/A/s.ckpt", 0, 10) == data[:10]
        assert store.read_range(UNBOUNDED, "exec/A/s.ckpt", len(data) - 22, 22) == data[-22:]
        assert (
            store.read_range(UNBOUNDED, "exec/A/s.ckpt", len(data) - 5, 50) == data[-5:]
        )  # fewer at the end
        assert store.read_range(UNBOUNDED, "exec/A/s.ckpt", len(data), 10) == b""  # none past it
        assert store.read_range(UNBOUNDED, "exec/A/none.ckpt", 0, 10) is None

    def test_remove_folder_removes_a_save_that_is_one_file(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/epoch=0-step=2.ckpt", b"zz")
        make_file("exec/A/epoch=0-step=2.ckpt.keep", b"z")
        assert store.remove_folder(UNBOUNDED, "exec/A/epoch=0-step=2.ckpt").removed
        assert store.list_files(UNBOUNDED, "exec/A") == ["epoch=0-step=2.ckpt.keep"]

    def test_newest_is_when_anything_at_a_path_last_changed(self, store: Store, make_file: MakeFile) -> None:
        before = time.time()
        make_file("exec/A/checkpoint-1/a", b"a")
        make_file("exec/A/checkpoint-1/sub/b", b"b")
        make_file("exec/A/epoch=0-step=1.ckpt", b"c")
        after = time.time()
        for path in ("exec/A/checkpoint-1", "exec/A", "exec/A/epoch=0-step=1.ckpt"):
            change = store.newest(UNBOUNDED, path)
            assert change.at is not None and before - 2 <= change.at <= after + 2, (path, change)
            assert (change.link, change.why) == ("", "")
        assert store.newest(UNBOUNDED, "exec/A/missing") == LastChange(None)

    def test_a_root_without_uploads_lists_none(self, store: Store, make_file: MakeFile) -> None:
        make_file("exec/A/checkpoint-1/a", b"a")
        assert store.uploads(UNBOUNDED, "exec", time.time()) == []

    def test_an_unreadable_file_is_a_store_error_naming_the_operation_and_the_file(
        self, unreadable: MakeUnreadable
    ) -> None:
        """A file that is there but cannot be read (a disk's I/O error, a store's refusal) fails a read as the
        store failing, on every store alike: a StoreError with the operation and the file's location."""
        faulty, path = unreadable("exec/A/checkpoint-1")
        assert faulty.exists(UNBOUNDED, path)
        for read in (
            lambda: faulty.read(UNBOUNDED, path, 1 << 20),
            lambda: faulty.read_range(UNBOUNDED, path, 0, 4),
        ):
            with pytest.raises(StoreError) as e:
                read()
            assert e.value.op in ("read", "get")
            assert e.value.thing == faulty.location(path)
            assert str(e.value).startswith(
                ("store: get " + faulty.location(path) + ": ", faulty.location(path) + ": ")
            )


class SaveSourceContract:
    """What publish.stores.transfer reads an upload's save through (Store.open_save): a store that is a
    mirror's source passes it (POSIX).  Same fixtures as StoreContract."""

    def test_an_opened_save_lists_every_file_below_it_and_reads_each(
        self, store: Store, make_file: MakeFile
    ) -> None:
        files = {"b.distcp": b"b" * 3000, "a/x.bin": b"x", "a/deep/y": b"", ".metadata": b"meta"}
        for path, data in files.items():
            make_file(f"exec/A/checkpoint-1/{path}", data)
        make_file("exec/A/checkpoint-10/other", b"not in the save")
        save = store.open_save(UNBOUNDED, "exec/A/checkpoint-1")
        try:
            assert save.files == sorted((p, len(d)) for p, d in files.items())
            for path, data in files.items():
                reader = save.open(path)
                try:
                    buf = bytearray(len(data) + 10)
                    assert reader.read_into(memoryview(buf), 0) == len(data)  # fewer where it ends
                    assert bytes(buf[: len(data)]) == data
                    if len(data) > 2:
                        part = memoryview(bytearray(2))
                        assert reader.read_into(part, len(data) - 2) == 2
                        assert bytes(part) == data[-2:]
                    assert reader.whole()
                finally:
                    reader.close()
        finally:
            save.close()

    def test_a_save_that_is_one_file_is_listed_as_the_path_nothing(
        self, store: Store, make_file: MakeFile
    ) -> None:
        make_file("ckpts/epoch=1.ckpt", b"weights")
        save = store.open_save(UNBOUNDED, "ckpts/epoch=1.ckpt")
        try:
            assert save.files == [("", 7)]
            reader = save.open("")
            buf = bytearray(7)
            assert reader.read_into(memoryview(buf), 0) == 7 and bytes(buf) == b"weights"
            reader.close()
        finally:
            save.close()

    def test_a_missing_save_is_refused_naming_it(self, store: Store) -> None:
        with pytest.raises(UploadError) as e:
            store.open_save(UNBOUNDED, "exec/A/checkpoint-9")
        assert str(e.value) == f"upload of {store.location('exec/A/checkpoint-9')}: no such save"

    def test_a_file_rewritten_after_the_save_was_opened_is_refused_naming_it(
        self, store: Store, make_file: MakeFile
    ) -> None:
        make_file("exec/A/checkpoint-1/a", b"first")
        save = store.open_save(UNBOUNDED, "exec/A/checkpoint-1")
        try:
            time.sleep(0.01)  # a new mtime, whatever the file system's granularity of it
            make_file("exec/A/checkpoint-1/a", b"second, longer")
            with pytest.raises(UploadError) as e:
                save.open("a")
            where = store.location("exec/A/checkpoint-1/a")
            assert str(e.value) == f"upload of {where}: changed while it was being uploaded"
        finally:
            save.close()


class SenderContract:
    """What publish.stores.transfer writes an upload's files through (Store.sender): a store that is a
    mirror passes it (S3).  Same fixtures as StoreContract."""

    def test_a_file_put_whole_is_stored_with_its_size_and_bytes(self, store: Store) -> None:
        from publish.stores.transfer import crc_text

        sender = store.sender(fork=True)
        try:
            data = b"one part\n" * 100
            sender.put(UNBOUNDED, "exec/A/checkpoint-1/a", memoryview(data), crc_text(zlib.crc32(data)))
            assert sender.stored(UNBOUNDED, "exec/A/checkpoint-1/a", checksum=False) == (str(len(data)), "")
            assert store.read(UNBOUNDED, "exec/A/checkpoint-1/a", 1 << 20) == data
            assert sender.stored(UNBOUNDED, "exec/A/checkpoint-1/missing", checksum=True) is None
        finally:
            sender.close()

    def test_a_multipart_upload_is_stored_with_the_checksum_of_its_parts(self, store: Store) -> None:
        from publish.stores.transfer import MIN_PART, composite, crc_text

        parts = [bytes([i]) * MIN_PART for i in range(2)] + [b"end"]
        crcs = [zlib.crc32(p) for p in parts]
        path = "exec/A/checkpoint-1/model.distcp"
        sender = store.sender(fork=False)  # the store's own connection: left open by close
        upload = sender.create_upload(UNBOUNDED, path)
        etags = [
            sender.upload_part(UNBOUNDED, path, upload, n + 1, memoryview(p), crc_text(c))
            for n, (p, c) in enumerate(zip(parts, crcs))
        ]
        answered = sender.complete_upload(
            UNBOUNDED, path, upload, [(e, crc_text(c)) for e, c in zip(etags, crcs)]
        )
        sender.close()
        assert answered in ("", composite(crcs), f"{composite(crcs)}-3")
        size, checksum = sender.stored(UNBOUNDED, path, checksum=True) or ("", "")
        assert size == str(sum(map(len, parts)))
        assert checksum in ("", composite(crcs), f"{composite(crcs)}-3")  # moto leaves out the count
        assert store.read(UNBOUNDED, path, 1 << 24) == b"".join(parts)

    def test_an_upload_started_then_aborted_leaves_nothing(self, store: Store) -> None:
        path = "exec/A/checkpoint-1/model.distcp"
        sender = store.sender(fork=True)
        try:
            upload = sender.create_upload(UNBOUNDED, path)
        finally:
            sender.close()
        assert [u.upload_id for u in store.uploads(UNBOUNDED, "exec", time.time())] == [upload]
        assert store.abort_upload(UNBOUNDED, Upload(path, upload, 0.0)) is True
        assert store.uploads(UNBOUNDED, "exec", time.time()) == []
        assert not store.holds(UNBOUNDED, "exec/A/checkpoint-1")
