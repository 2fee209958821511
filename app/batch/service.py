"""The Batch API of one app: its state, its runner, its limits (built in
the app's lifespan, beside the services; the routes reach it through the
lifespan state). With shared state (``GATEWAY_REDIS_URL``) the batches and
their lines are the fleet's, in Redis; else this gateway's, in SQLite."""

from dataclasses import dataclass

from app.batch.files import FileLimits
from app.batch.redis_state import RedisState
from app.batch.runner import BatchRunner
from app.batch.sqlite_state import SqliteState
from app.batch.state import BatchState
from app.keys.file import KeyEntry
from app.serve.services import Services


@dataclass
class Batches:
    state: BatchState
    runner: BatchRunner
    limits: FileLimits
    completion_window: float


def build_batches(services: Services) -> Batches:
    settings = services.settings
    state: BatchState
    if services.shared is not None:
        shared = services.shared
        state = RedisState(
            shared.client, shared.replica, settings.batch_dir, settings.redis_lease_seconds
        )
    else:
        state = SqliteState(settings.batch_dir)

    def key_of(key_hash: str | None) -> KeyEntry | None:
        """The key a batch was made with, as the keys file has it now (a
        key removed since runs its lines as no key: they are refused)."""
        if key_hash is None or services.keys is None:
            return None
        return services.keys.ring.by_hash(key_hash)

    runner = BatchRunner(services, state, settings.batch_concurrency, key_of)
    limits = FileLimits(
        max_bytes=settings.batch_max_file_bytes,
        max_lines=settings.batch_max_lines,
        tenant_bytes=settings.batch_tenant_bytes,
    )
    return Batches(state, runner, limits, settings.batch_completion_window)
