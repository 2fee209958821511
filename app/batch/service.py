"""The Batch API of one app: its store, its runner, its limits (built in
the app's lifespan, beside the services; the routes reach it through the
lifespan state)."""

from dataclasses import dataclass

from app.batch.files import FileLimits
from app.batch.runner import BatchRunner
from app.batch.store import BatchStore
from app.keys.file import KeyEntry
from app.serve.services import Services


@dataclass
class Batches:
    store: BatchStore
    runner: BatchRunner
    limits: FileLimits
    completion_window: float


def build_batches(services: Services) -> Batches:
    settings = services.settings
    files = BatchStore(settings.batch_dir)

    def key_of(key_hash: str | None) -> KeyEntry | None:
        """The key a batch was made with, as the keys file has it now (a
        key removed since runs its lines as no key: they are refused)."""
        if key_hash is None or services.keys is None:
            return None
        return services.keys.ring.by_hash(key_hash)

    runner = BatchRunner(services, files, settings.batch_concurrency, key_of)
    limits = FileLimits(
        max_bytes=settings.batch_max_file_bytes,
        max_lines=settings.batch_max_lines,
        tenant_bytes=settings.batch_tenant_bytes,
    )
    return Batches(files, runner, limits, settings.batch_completion_window)
