"""The keys file is re-read when it changes; a broken one keeps the old keys."""

import asyncio
import os
from pathlib import Path

from app.keys.ring import KeyRing
from app.keys.watch import KeysWatcher
from tests.support.keys import Entry, key_entry, write_keys_file
from tests.support.wait import wait_for


def entry(key_id: str, key: str) -> Entry:
    return key_entry(key_id, "t", key)


async def test_a_changed_file_is_picked_up_and_a_broken_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_file(path, [entry("one", "k1")])
    failures: list[None] = []
    watcher = KeysWatcher(path, 0.01, lambda: failures.append(None))
    seen: list[KeyRing] = []
    watcher.on_change(seen.append)
    task = asyncio.create_task(watcher.run())
    try:
        write_keys_file(path, [entry("one", "k1"), entry("two", "k2")])
        assert await wait_for(lambda: bool(seen), timeout=30)
        assert watcher.ring.lookup("k2") is not None
        path.write_text("keys: [broken")
        os.utime(path, ns=(1, 1))  # a change even on a coarse clock
        assert await wait_for(lambda: bool(failures), timeout=30)
        assert watcher.ring.lookup("k2") is not None
        assert len(seen) == 1
    finally:
        task.cancel()


def test_a_reload_on_demand(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_file(path, [entry("one", "k1")])
    watcher = KeysWatcher(path, 60)
    write_keys_file(path, [entry("two", "k2")])
    assert watcher.reload()
    assert watcher.ring.lookup("k1") is None
    assert watcher.ring.lookup("k2") is not None
