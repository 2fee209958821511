"""The Batch API's state in one gateway's SQLite (``app.batch.store``): the
default. One gateway a directory: its claims are marks in its own database,
released when it stops and, if it was killed, when it starts again."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.batch import store
from app.batch.state import Change, Record
from app.batch.store import BatchStore


class SqliteState:
    def __init__(self, directory: Path) -> None:
        self._db = BatchStore(directory)
        self.files_dir = self._db.files_dir
        self.renew_every = float("inf")  # nothing to renew

    def path_of(self, file_id: str) -> Path:
        return self._db.path_of(file_id)

    @property
    def exists(self) -> bool:
        return self._db.exists

    async def insert_file(self, record: Record) -> None:
        await self._db.run(lambda db: store.insert_file(db, record))

    async def get_file(self, tenant: str, file_id: str) -> Record | None:
        return await self._db.run(lambda db: store.get_file(db, tenant, file_id))

    async def list_files(self, tenant: str, purpose: str | None, order: str) -> list[Record]:
        return await self._db.run(lambda db: store.list_files(db, tenant, purpose, order))

    async def tenant_bytes(self, tenant: str) -> int:
        return await self._db.run(lambda db: store.tenant_bytes(db, tenant))

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        return await self._db.run(lambda db: store.delete_file(db, tenant, file_id))

    async def expired_files(self) -> list[str]:
        return await self._db.run(store.expired_files)

    async def insert_batch(self, record: Record, key_hash: str | None) -> None:
        await self._db.run(lambda db: store.insert_batch(db, record, key_hash))

    async def update_batch(self, batch_id: str, change: Change) -> Record:
        return await self._db.run(lambda db: store.update_batch(db, batch_id, change))

    async def get_batch(self, tenant: str, batch_id: str) -> Record | None:
        return await self._db.run(lambda db: store.get_batch(db, tenant, batch_id))

    async def key_of(self, batch_id: str) -> str | None:
        return await self._db.run(lambda db: store.key_of(db, batch_id))

    async def list_batches(self, tenant: str) -> list[Record]:
        return await self._db.run(lambda db: store.list_batches(db, tenant))

    async def active_batches(self) -> list[Record]:
        return await self._db.run(store.active_batches)

    async def begin(self, batch_id: str, lines: list[tuple[str, str]], change: Change) -> None:
        def begin(db: Any) -> None:
            store.insert_lines(db, batch_id, lines)
            store.update_batch(db, batch_id, change)

        await self._db.run(begin)

    async def claim_lines(self, batch_id: str, count: int) -> list[Record]:
        return await self._db.run(lambda db: store.claim_lines(db, batch_id, count))

    async def finish_line(
        self, batch_id: str, idx: int, state: str, result: Record | None, attempt: int
    ) -> None:
        await self._db.run(lambda db: store.finish_line(db, batch_id, idx, state, result))

    async def line_counts(self, batch_id: str) -> dict[str, int]:
        return await self._db.run(lambda db: store.line_counts(db, batch_id))

    async def results(self, batch_id: str, state: str) -> list[str]:
        return await self._db.run(lambda db: store.results(db, batch_id, state))

    async def expire_pending(self, batch_id: str, result_of: Callable[[str], Record]) -> list[str]:
        return await self._db.run(lambda db: store.expire_pending(db, batch_id, result_of))

    async def claim_step(self, batch_id: str, step: str, seconds: float) -> bool:
        return True  # one gateway a directory: nobody else takes it

    async def recover(self) -> int:
        if not self._db.exists:
            return 0
        return await self._db.run(store.release_running)

    async def reclaim(self) -> int:
        return 0  # the claims are this gateway's own, released when it stops

    async def renew(self, batch_id: str, idxs: list[int]) -> None:
        return None

    async def stopping(self, batch_id: str, claims: list[tuple[int, int]]) -> None:
        idxs = [idx for idx, _ in claims]
        await self._db.run(lambda db: store.release_lines(db, batch_id, idxs))

    def close(self) -> None:
        self._db.close()
