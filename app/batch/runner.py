"""Running batches in the engines' idle capacity.

A batch's lines go through admission like any request (``app.batch.call``),
in the lowest class, a few at a time (``GATEWAY_BATCH_CONCURRENCY`` lines in
flight per gateway, all batches together): never more than that in the
queue, so interactive requests always find it short; where they come back,
the class order admits them first, and a running line of a sheddable class
is stopped for them (evicted), to be run again. A line refused for capacity
or its key's rate (429), or because no engine is up (503), waits the
``Retry-After`` it was given and is run again: it is not failed for it. A
line the route refuses (another 4xx) ends in the error file; one the engine
fails (5xx) is tried up to three times.

Every step is recorded in the store first (``app.batch.store``): a line is
marked running before it is sent and done when its answer is recorded. A
gateway that stops mid-batch leaves lines marked running; when it starts
again they are pending again and run once more — so a line whose answer
the engine had finished but the gateway had not recorded runs twice; its
result says how many times it was sent (``attempts``), and the batch counts
those lines (``lines_sent_more_than_once``).
"""

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from app.batch import store
from app.batch.call import Answer, call_line
from app.batch.files import write_output
from app.batch.store import BatchStore, new_id, now
from app.batch.validate import read_lines
from app.observe.batch_metrics import ACTIVE
from app.serve.services import Services

log = logging.getLogger("gateway.batch")

# Answers after which a line waits and is run again, not failed.
_AGAIN = frozenset({429, 503})
_ATTEMPTS_ON_ENGINE_ERRORS = 3
_SCAN_SECONDS = 0.5


class BatchRunner:
    def __init__(
        self,
        services: Services,
        files: BatchStore,
        concurrency: int,
        key_of: Callable[[str | None], Any],
    ) -> None:
        self._services = services
        self._store = files
        self._concurrency = concurrency
        self._key_of = key_of
        self._running: dict[str, set[asyncio.Task[None]]] = {}
        self._wake = asyncio.Event()
        self._series = services.metrics.batches
        self._active: Counter[str] = Counter()
        services.metrics.on_collect(self._publish)

    def wake(self) -> None:
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return sum(len(tasks) for tasks in self._running.values())

    def status(self) -> dict[str, Any]:
        """The batches under way as the last scan saw them (``/status``)."""
        return {"active": dict(self._active), "lines_in_flight": self.in_flight}

    def _publish(self) -> None:
        self._series.in_flight.set(self.in_flight)
        for status in ACTIVE:
            self._series.active.labels(status).set(self._active.get(status, 0))

    def _sweep_files(self, db: Any) -> None:
        """Files past their ``expires_after``: their records and bytes gone."""
        for file_id in store.expired_files(db):
            self._store.path_of(file_id).unlink(missing_ok=True)

    async def run(self) -> None:
        if self._store.exists:
            again = await self._store.run(store.release_running)
            if again:
                log.warning("%d batch line(s) left running by a stopped gateway: run again", again)
        try:
            while True:
                try:
                    await self._scan()
                except Exception:
                    log.exception("batch runner: a scan failed; trying again")
                self._wake.clear()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=_SCAN_SECONDS)
        finally:
            tasks = [t for ts in self._running.values() for t in ts]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _scan(self) -> None:
        if not self._store.exists:
            return
        await self._store.run(self._sweep_files)
        active = await self._store.run(store.active_batches)
        self._active = Counter(batch["status"] for batch in active)
        for batch in active:
            status = batch["status"]
            if status == "validating":
                await self._validate(batch)
            elif status == "in_progress":
                await self._advance(batch)
            elif status == "cancelling" and not self._running.get(batch["id"]):
                await self._finish(batch, "cancelled")

    async def _validate(self, batch: dict[str, Any]) -> None:
        path = self._store.path_of(batch["input_file_id"])
        lines, errors = await asyncio.to_thread(read_lines, path, batch["endpoint"])
        if errors:

            def failed(record: dict[str, Any]) -> None:
                record.update(status="failed", failed_at=now())
                record["errors"] = {"object": "list", "data": errors}

            await self._store.run(lambda db: store.update_batch(db, batch["id"], failed))
            return

        def started(record: dict[str, Any]) -> None:
            if record["status"] == "validating":  # not cancelled meanwhile
                record.update(status="in_progress", in_progress_at=now())
            record["request_counts"]["total"] = len(lines)

        def begin(db: Any) -> None:
            store.insert_lines(db, batch["id"], lines)
            store.update_batch(db, batch["id"], started)

        await self._store.run(begin)

    async def _advance(self, batch: dict[str, Any]) -> None:
        batch_id = batch["id"]
        running = self._running.setdefault(batch_id, set())
        if now() >= batch["expires_at"]:
            if not running:
                await self._finish(batch, "expired")
            return
        room = self._concurrency - self.in_flight
        if room > 0:
            claimed = await self._store.run(lambda db: store.claim_lines(db, batch_id, room))
            for line in claimed:
                task = asyncio.create_task(self._run_line(batch, line))
                running.add(task)
                task.add_done_callback(running.discard)
        counts = await self._store.run(lambda db: store.line_counts(db, batch_id))
        if not counts.get("pending") and not counts.get("running") and not running:
            await self._finish(batch, "completed")
            return
        # Progress, as a client polling the batch reads it.
        progress = {"completed": counts.get("done", 0), "failed": counts.get("failed", 0)}
        if progress.items() - batch["request_counts"].items():

            def count(record: dict[str, Any]) -> None:
                record["request_counts"].update(progress)

            await self._store.run(lambda db: store.update_batch(db, batch_id, count))

    async def _run_line(self, batch: dict[str, Any], line: dict[str, Any]) -> None:
        batch_id, idx = batch["id"], line["idx"]
        key = self._key_of(await self._store.run(lambda db: store.key_of(db, batch_id)))
        body = json.loads(line["body"])
        if body.get("stream"):
            answer = Answer(400, {}, _error("a batch's requests are not streamed: drop stream"))
        else:
            request_id = f"{batch_id}-{idx}-{line['attempts']}"
            answer = await call_line(
                self._services,
                batch["endpoint"],
                line["body"].encode(),
                batch["tenant"],
                key,
                request_id,
            )
        if answer.status in _AGAIN or (
            answer.status >= 500 and line["attempts"] < _ATTEMPTS_ON_ENGINE_ERRORS
        ):
            self._series.lines.labels("retried").inc()
            wait = float(answer.headers.get("retry-after") or 1)
            await asyncio.sleep(min(wait, 30.0))
            await self._store.run(lambda db: store.finish_line(db, batch_id, idx, "pending", None))
            return
        result = {
            "id": new_id("batch_req"),
            "custom_id": line["custom_id"],
            "response": {
                "status_code": answer.status,
                "request_id": answer.headers.get("x-request-id", ""),
                "body": answer.json(),
            },
            "error": None,
            "attempts": line["attempts"],
        }
        state = "done" if answer.status == 200 else "failed"
        self._series.lines.labels("completed" if state == "done" else "failed").inc()
        await self._store.run(lambda db: store.finish_line(db, batch_id, idx, state, result))

    async def _finish(self, batch: dict[str, Any], status: str) -> None:
        """Write the output and error files and close the batch."""
        batch_id = batch["id"]
        # As it stands now (a cancel may have come since the scan read it).
        batch = await self._store.run(
            lambda db: store.update_batch(db, batch_id, lambda b: b.update(finalizing_at=now()))
        )
        if batch["status"] == "cancelling" and status == "completed":
            status = "cancelled"
        done = await self._store.run(lambda db: store.results(db, batch_id, "done"))
        failed = await self._store.run(lambda db: store.results(db, batch_id, "failed"))
        if status == "expired":
            left = await self._store.run(lambda db: _expire_pending(db, batch_id))
            self._series.lines.labels("expired").inc(len(left))
            failed += left
        tenant = batch["tenant"]
        if done:
            batch["output_file_id"] = await write_output(self._store, tenant, "batch_output", done)
        if failed:
            batch["error_file_id"] = await write_output(self._store, tenant, "batch_output", failed)
        records = [json.loads(r) for r in done]
        usage = batch["usage"]
        for record in records:
            used = record["response"]["body"].get("usage") or {}
            usage["input_tokens"] += used.get("prompt_tokens") or 0
            usage["output_tokens"] += used.get("completion_tokens") or 0
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        batch["request_counts"].update(completed=len(done), failed=len(failed))
        batch["lines_sent_more_than_once"] = sum(
            1 for r in [*records, *(json.loads(f) for f in failed)] if r.get("attempts", 1) > 1
        )
        batch.update(status=status, **{f"{status}_at": now()})
        await self._store.run(lambda db: store.save_batch(db, batch))
        self._running.pop(batch_id, None)
        log.info("batch %s %s: %d done, %d failed", batch_id, status, len(done), len(failed))


def _expire_pending(db: Any, batch_id: str) -> list[str]:
    """The lines an expired batch never ran, as error-file lines."""
    rows = db.execute(
        "SELECT idx, custom_id FROM lines WHERE batch_id = ? AND state = 'pending' ORDER BY idx",
        (batch_id,),
    ).fetchall()
    out = []
    for row in rows:
        result = {
            "id": new_id("batch_req"),
            "custom_id": row["custom_id"],
            "response": None,
            "error": {"code": "batch_expired", "message": "the batch expired before it ran"},
        }
        store.finish_line(db, batch_id, row["idx"], "expired", result)
        out.append(json.dumps(result))
    return out


def _error(message: str) -> bytes:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return json.dumps(body).encode()
