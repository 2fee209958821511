"""Where files and batches are kept: one directory, the files' bytes in it and
their records, the batches and each batch's lines in one SQLite database
(``GATEWAY_BATCH_DIR``). Everything a batch has done is recorded here as it
happens, so a gateway that restarts resumes from it (``app.batch.runner``).

Plain ``sqlite3``, one connection, calls made from one thread at a time
(the routes and the runner go through ``asyncio.to_thread`` under a lock:
``BatchStore.run``). WAL journal: a reader never waits for the writer.
"""

import asyncio
import json
import secrets
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,
    bytes INTEGER NOT NULL, lines INTEGER NOT NULL, created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX IF NOT EXISTS files_by_tenant ON files (tenant, created_at);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, key_hash TEXT, record TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS batches_by_tenant ON batches (tenant, created_at);
CREATE TABLE IF NOT EXISTS lines (
    batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, body TEXT NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, result TEXT,
    PRIMARY KEY (batch_id, idx)
);
"""


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def now() -> int:
    return int(time.time())


class BatchStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files_dir = directory / "files"
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            self.files_dir.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.directory / "batches.sqlite3", check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    @property
    def exists(self) -> bool:
        return (self.directory / "batches.sqlite3").exists()

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` with the database, in a thread, one at a time, committed."""
        async with self._lock:
            return await asyncio.to_thread(self._in_transaction, work)

    def _in_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._open()
        with db:
            return work(db)

    def path_of(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


# --- files --------------------------------------------------------------------


def insert_file(db: sqlite3.Connection, record: dict[str, Any]) -> None:
    db.execute(
        "INSERT INTO files VALUES (:id, :tenant, :purpose, :filename, :bytes, :lines,"
        " :created_at, :expires_at)",
        record,
    )


def get_file(db: sqlite3.Connection, tenant: str, file_id: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT * FROM files WHERE id = ? AND tenant = ?"
        " AND (expires_at IS NULL OR expires_at > ?)",
        (file_id, tenant, now()),
    ).fetchone()
    return None if row is None else dict(row)


def list_files(
    db: sqlite3.Connection, tenant: str, purpose: str | None, order: str
) -> list[dict[str, Any]]:
    direction = "ASC" if order == "asc" else "DESC"
    rows = db.execute(
        "SELECT * FROM files WHERE tenant = ? AND (? IS NULL OR purpose = ?)"
        " AND (expires_at IS NULL OR expires_at > ?)"
        f" ORDER BY created_at {direction}, rowid {direction}",
        (tenant, purpose, purpose, now()),
    ).fetchall()
    return [dict(row) for row in rows]


def tenant_bytes(db: sqlite3.Connection, tenant: str) -> int:
    row = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM files WHERE tenant = ?", (tenant,))
    return int(row.fetchone()[0])


def delete_file(db: sqlite3.Connection, tenant: str, file_id: str) -> bool:
    return (
        db.execute("DELETE FROM files WHERE id = ? AND tenant = ?", (file_id, tenant)).rowcount > 0
    )


def expired_files(db: sqlite3.Connection) -> list[str]:
    rows = db.execute(
        "SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?", (now(),)
    )
    ids = [row[0] for row in rows]
    db.executemany("DELETE FROM files WHERE id = ?", [(i,) for i in ids])
    return ids


# --- batches --------------------------------------------------------------------


def insert_batch(db: sqlite3.Connection, record: dict[str, Any], key_hash: str | None) -> None:
    db.execute(
        "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?)",
        (
            record["id"],
            record["tenant"],
            key_hash,
            json.dumps(record),
            record["status"],
            record["created_at"],
        ),
    )


def save_batch(db: sqlite3.Connection, record: dict[str, Any]) -> None:
    db.execute(
        "UPDATE batches SET record = ?, status = ? WHERE id = ?",
        (json.dumps(record), record["status"], record["id"]),
    )


def update_batch(
    db: sqlite3.Connection, batch_id: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Read, ``change`` and save a batch's record in one transaction: what
    another writer saved meanwhile (a cancel) is not written over."""
    row = db.execute("SELECT record FROM batches WHERE id = ?", (batch_id,)).fetchone()
    record: dict[str, Any] = json.loads(row[0])
    change(record)
    save_batch(db, record)
    return record


def get_batch(db: sqlite3.Connection, tenant: str | None, batch_id: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT record FROM batches WHERE id = ? AND (? IS NULL OR tenant = ?)",
        (batch_id, tenant, tenant),
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def key_of(db: sqlite3.Connection, batch_id: str) -> str | None:
    row = db.execute("SELECT key_hash FROM batches WHERE id = ?", (batch_id,)).fetchone()
    return None if row is None else row[0]


def list_batches(db: sqlite3.Connection, tenant: str) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT record FROM batches WHERE tenant = ? ORDER BY created_at DESC, rowid DESC",
        (tenant,),
    ).fetchall()
    return [dict(json.loads(row[0])) for row in rows]


def active_batches(db: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT record FROM batches WHERE status IN"
        " ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY created_at, rowid"
    ).fetchall()
    return [dict(json.loads(row[0])) for row in rows]


# --- lines ---------------------------------------------------------------------


def insert_lines(db: sqlite3.Connection, batch_id: str, lines: list[tuple[str, str]]) -> None:
    db.executemany(
        "INSERT INTO lines (batch_id, idx, custom_id, body, state) VALUES (?, ?, ?, ?, 'pending')",
        [(batch_id, i, custom_id, body) for i, (custom_id, body) in enumerate(lines)],
    )


def claim_lines(db: sqlite3.Connection, batch_id: str, count: int) -> list[dict[str, Any]]:
    """The next ``count`` pending lines, marked running (attempted once more)."""
    rows = db.execute(
        "SELECT idx, custom_id, body, attempts FROM lines WHERE batch_id = ? AND state = 'pending'"
        " ORDER BY idx LIMIT ?",
        (batch_id, count),
    ).fetchall()
    db.executemany(
        "UPDATE lines SET state = 'running', attempts = attempts + 1"
        " WHERE batch_id = ? AND idx = ?",
        [(batch_id, row["idx"]) for row in rows],
    )
    return [{**dict(row), "attempts": row["attempts"] + 1} for row in rows]


def release_running(db: sqlite3.Connection) -> int:
    """Lines a gateway that stopped was running: pending again (at start)."""
    return db.execute("UPDATE lines SET state = 'pending' WHERE state = 'running'").rowcount


def release_lines(db: sqlite3.Connection, batch_id: str, idxs: list[int]) -> None:
    """Lines this gateway was running when it stopped: pending again."""
    db.executemany(
        "UPDATE lines SET state = 'pending' WHERE batch_id = ? AND idx = ? AND state = 'running'",
        [(batch_id, idx) for idx in idxs],
    )


def expire_pending(
    db: sqlite3.Connection, batch_id: str, result_of: Callable[[str], dict[str, Any]]
) -> list[str]:
    """The lines an expired batch never ran: ended with ``result_of``'s result."""
    rows = db.execute(
        "SELECT idx, custom_id FROM lines WHERE batch_id = ? AND state = 'pending' ORDER BY idx",
        (batch_id,),
    ).fetchall()
    out = []
    for row in rows:
        result = json.dumps(result_of(row["custom_id"]))
        db.execute(
            "UPDATE lines SET state = 'expired', result = ? WHERE batch_id = ? AND idx = ?",
            (result, batch_id, row["idx"]),
        )
        out.append(result)
    return out


def finish_line(
    db: sqlite3.Connection, batch_id: str, idx: int, state: str, result: dict[str, Any] | None
) -> None:
    db.execute(
        "UPDATE lines SET state = ?, result = ? WHERE batch_id = ? AND idx = ?",
        (state, None if result is None else json.dumps(result), batch_id, idx),
    )


def line_counts(db: sqlite3.Connection, batch_id: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT state, COUNT(*) FROM lines WHERE batch_id = ? GROUP BY state", (batch_id,)
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def results(db: sqlite3.Connection, batch_id: str, state: str) -> list[str]:
    rows = db.execute(
        "SELECT result FROM lines WHERE batch_id = ? AND state = ? ORDER BY idx", (batch_id, state)
    ).fetchall()
    return [row[0] for row in rows]
