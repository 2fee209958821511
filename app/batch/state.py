"""What the Batch API keeps, behind one interface: the files' records, the
batches, and each batch's lines with their state and claims. Two kinds:
one gateway's SQLite (``app.batch.sqlite_state``, the default) and the
Redis a fleet of gateways shares (``app.batch.redis_state``, with
``GATEWAY_REDIS_URL``), the files' bytes on a directory every replica mounts.

A line is claimed before it is sent: in SQLite by marking it running (a
gateway that stops leaves it so, and it is pending again when one starts on
the directory); in Redis under a lease its gateway renews while the line
runs (a gateway that dies stops renewing, and any replica returns the line
to pending once the lease is out). Steps one gateway must take alone — a
batch's validation, its finish — are claimed too (``claim_step``).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

Record = dict[str, Any]
Change = Callable[[Record], None]


class BatchState(Protocol):
    files_dir: Path
    # How often the claims of lines in flight are renewed (seconds).
    renew_every: float

    def path_of(self, file_id: str) -> Path: ...

    @property
    def exists(self) -> bool:
        """Whether anything was ever kept (else the runner has nothing to look at)."""
        ...

    # files
    async def insert_file(self, record: Record) -> None: ...
    async def get_file(self, tenant: str, file_id: str) -> Record | None: ...
    async def list_files(self, tenant: str, purpose: str | None, order: str) -> list[Record]: ...
    async def tenant_bytes(self, tenant: str) -> int: ...
    async def delete_file(self, tenant: str, file_id: str) -> bool: ...
    async def expired_files(self) -> list[str]:
        """The files past their expiry, their records removed (their bytes are the caller's)."""
        ...

    # batches
    async def insert_batch(self, record: Record, key_hash: str | None) -> None: ...
    async def update_batch(self, batch_id: str, change: Change) -> Record:
        """Read, ``change`` and save in one step: another writer's change is not lost."""
        ...

    async def get_batch(self, tenant: str, batch_id: str) -> Record | None: ...
    async def key_of(self, batch_id: str) -> str | None: ...
    async def list_batches(self, tenant: str) -> list[Record]: ...
    async def active_batches(self) -> list[Record]: ...

    # lines
    async def begin(self, batch_id: str, lines: list[tuple[str, str]], change: Change) -> None:
        """Keep a validated batch's lines, pending, and change its record."""
        ...

    async def claim_lines(self, batch_id: str, count: int) -> list[Record]:
        """Up to ``count`` pending lines, now this gateway's (attempted once more)."""
        ...

    async def finish_line(
        self, batch_id: str, idx: int, state: str, result: Record | None, attempt: int
    ) -> None:
        """A claimed line's end: ``done`` or ``failed`` with its result, or
        ``pending`` again (to be run once more); recorded only by the claim
        of that ``attempt``."""
        ...

    async def line_counts(self, batch_id: str) -> dict[str, int]: ...
    async def results(self, batch_id: str, state: str) -> list[str]: ...
    async def expire_pending(self, batch_id: str, result_of: Callable[[str], Record]) -> list[str]:
        """The lines never run, ended ``expired`` with ``result_of(custom_id)``."""
        ...

    async def claim_step(self, batch_id: str, step: str, seconds: float) -> bool: ...
    async def recover(self) -> int:
        """At start: lines claimed by a gateway gone, pending again; how many."""
        ...

    async def reclaim(self) -> int:
        """At any time: lines whose claim ran out, pending again; how many."""
        ...

    async def renew(self, batch_id: str, idxs: list[int]) -> None: ...
    async def stopping(self, batch_id: str, claims: list[tuple[int, int]]) -> None:
        """This gateway stops: its claimed lines (index, attempt) pending again."""
        ...

    def close(self) -> None: ...
