"""Keeping the key ring in step with the keys file.

The file is read at start (a broken file stops the gateway from starting),
then re-read when its modification time, size or inode changes — a
Kubernetes Secret is swapped in by a symlink, which changes the inode — and
on SIGHUP. A reload replaces the ring whole, so requests in flight keep the
key they were admitted with; a file that no longer parses keeps the old keys
and says why in the log and in ``gateway_keys_reload_failures_total``.
"""

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.keys.file import KeysFileError, read_keys
from app.keys.ring import KeyRing

log = logging.getLogger("gateway.keys")

Stamp = tuple[int, int, int]


class KeysWatcher:
    def __init__(
        self, path: Path, interval: float, on_failure: Callable[[], None] = lambda: None
    ) -> None:
        self._path = path
        self._interval = interval
        self._on_failure = on_failure
        self._listeners: list[Callable[[KeyRing], None]] = []
        self._stamp = _stamp(path)
        self.ring = KeyRing(read_keys(path))
        self._loaded_at = time.time()
        self._failures = 0
        log.info("keys file %s: %d key(s)", path, len(self.ring))

    def on_change(self, listener: Callable[[KeyRing], None]) -> None:
        self._listeners.append(listener)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            stamp = _stamp(self._path)
            if stamp != self._stamp:
                self._stamp = stamp
                self.reload()

    def reload(self) -> bool:
        try:
            ring = KeyRing(read_keys(self._path))
        except KeysFileError as exc:
            log.error("keys file not reloaded, the previous keys stay in use: %s", exc)
            self._failures += 1
            self._on_failure()
            return False
        self.ring = ring
        self._loaded_at = time.time()
        for listener in self._listeners:
            listener(ring)
        log.warning("keys file reloaded: %d key(s)", len(ring))
        return True

    def status(self) -> dict[str, Any]:
        return {
            "file": str(self._path),
            "keys": len(self.ring),
            "loaded_at": _iso(self._loaded_at),
            "reload_failures": self._failures,
        }


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _stamp(path: Path) -> Stamp:
    try:
        stat = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)
