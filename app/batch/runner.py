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

Every step is recorded in the state first (``app.batch.state``): a line is
claimed before it is sent and recorded when its answer is in. A gateway
that dies mid-batch leaves lines claimed: another replica takes them once
their lease runs out (Redis), or the gateway started again on the directory
does (SQLite) — so a line whose answer the engine had finished but the
gateway had not recorded runs twice; its result says how many times it was
sent (``attempts``), and the batch counts those lines
(``lines_sent_more_than_once``). A batch's validation and its finish are
claimed too: one gateway does each.
"""

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from app.batch.call import Answer, call_line
from app.batch.files import write_output
from app.batch.state import BatchState, Record
from app.batch.store import new_id, now
from app.batch.validate import read_lines
from app.observe.batch_metrics import ACTIVE
from app.serve.services import Services

log = logging.getLogger("gateway.batch")

# Answers after which a line waits and is run again, not failed.
_AGAIN = frozenset({429, 503})
_ATTEMPTS_ON_ENGINE_ERRORS = 3
_SCAN_SECONDS = 0.5
# How long one gateway holds a batch's validation or finish for itself.
_STEP_SECONDS = 300.0


class BatchRunner:
    def __init__(
        self,
        services: Services,
        state: BatchState,
        concurrency: int,
        key_of: Callable[[str | None], Any],
    ) -> None:
        self._services = services
        self._state = state
        self._concurrency = concurrency
        self._key_of = key_of
        # This gateway's lines in flight: batch → line index → (task, attempt).
        self._running: dict[str, dict[int, tuple[asyncio.Task[None], int]]] = {}
        self._wake = asyncio.Event()
        self._series = services.metrics.batches
        self._active: Counter[str] = Counter()
        self._renewed = time.monotonic()
        services.metrics.on_collect(self._publish)

    def wake(self) -> None:
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return sum(len(lines) for lines in self._running.values())

    def status(self) -> dict[str, Any]:
        """The batches under way as the last scan saw them (``/status``)."""
        return {"active": dict(self._active), "lines_in_flight": self.in_flight}

    def _publish(self) -> None:
        self._series.in_flight.set(self.in_flight)
        for status in ACTIVE:
            self._series.active.labels(status).set(self._active.get(status, 0))

    async def run(self) -> None:
        again = await self._state.recover()
        if again:
            log.warning("%d batch line(s) left claimed by a gateway gone: run again", again)
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
            await self._stop()

    async def _stop(self) -> None:
        """Stop the lines in flight; their claims go back (pending again)."""
        claims = {b: [(i, a) for i, (_, a) in lines.items()] for b, lines in self._running.items()}
        tasks = [task for lines in self._running.values() for task, _ in lines.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batch_id, claimed in claims.items():
            if claimed:
                with suppress(Exception):
                    await asyncio.shield(self._state.stopping(batch_id, claimed))

    async def _scan(self) -> None:
        if not self._state.exists:
            return
        for file_id in await self._state.expired_files():
            self._state.path_of(file_id).unlink(missing_ok=True)
        await self._state.reclaim()
        if time.monotonic() - self._renewed > self._state.renew_every:
            self._renewed = time.monotonic()
            for batch_id, lines in self._running.items():
                await self._state.renew(batch_id, list(lines))
        active = await self._state.active_batches()
        self._active = Counter(batch["status"] for batch in active)
        for batch in active:
            status = batch["status"]
            if status == "validating":
                if await self._state.claim_step(batch["id"], "validate", _STEP_SECONDS):
                    await self._validate(batch)
            elif status == "in_progress":
                await self._advance(batch)
            elif status == "cancelling":
                await self._cancelling(batch)

    async def _validate(self, batch: Record) -> None:
        path = self._state.path_of(batch["input_file_id"])
        if path.exists():
            lines, errors = await asyncio.to_thread(read_lines, path, batch["endpoint"])
        else:
            # Its record is shared, its bytes are not here: the replicas do
            # not mount one directory (GATEWAY_BATCH_DIR).
            lines, errors = [], [_unreadable(batch["input_file_id"])]
        if errors:

            def failed(record: Record) -> None:
                record.update(status="failed", failed_at=now())
                record["errors"] = {"object": "list", "data": errors}

            await self._state.update_batch(batch["id"], failed)
            return

        def started(record: Record) -> None:
            if record["status"] == "validating":  # not cancelled meanwhile
                record.update(status="in_progress", in_progress_at=now())
            record["request_counts"]["total"] = len(lines)

        await self._state.begin(batch["id"], lines, started)

    async def _cancelling(self, batch: Record) -> None:
        """Lines running finish; then the batch ends (once none runs anywhere)."""
        counts = await self._state.line_counts(batch["id"])
        if not counts.get("running") and not self._running.get(batch["id"]):
            await self._finish(batch, "cancelled")

    async def _advance(self, batch: Record) -> None:
        batch_id = batch["id"]
        running = self._running.setdefault(batch_id, {})
        if now() >= batch["expires_at"]:
            if not running:
                await self._finish(batch, "expired")
            return
        # A draining gateway starts no line: what it has not started waits for
        # another gateway, or the next one on this directory.
        room = 0 if self._services.drain.draining else self._concurrency - self.in_flight
        if room > 0:
            for line in await self._state.claim_lines(batch_id, room):
                idx, attempt = int(line["idx"]), int(line["attempts"])
                task = asyncio.create_task(self._run_line(batch, line))
                running[idx] = (task, attempt)
                task.add_done_callback(_forget(running, idx, self.wake))
        counts = await self._state.line_counts(batch_id)
        if not counts.get("pending") and not counts.get("running") and not running:
            await self._finish(batch, "completed")
            return
        # Progress, as a client polling the batch reads it.
        progress = {"completed": counts.get("done", 0), "failed": counts.get("failed", 0)}
        if progress.items() - batch["request_counts"].items():

            def count(record: Record) -> None:
                record["request_counts"].update(progress)

            await self._state.update_batch(batch_id, count)

    async def _run_line(self, batch: Record, line: Record) -> None:
        try:
            await self._run_line_once(batch, line)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Nothing recorded for it: it runs again (not left claimed forever).
            log.exception("batch %s line %s: not run; trying again", batch["id"], line["idx"])
            await asyncio.sleep(1.0)
            await self._state.finish_line(
                batch["id"], int(line["idx"]), "pending", None, int(line["attempts"])
            )

    async def _run_line_once(self, batch: Record, line: Record) -> None:
        batch_id, idx, attempt = batch["id"], int(line["idx"]), int(line["attempts"])
        key = self._key_of(await self._state.key_of(batch_id))
        body = json.loads(line["body"])
        if body.get("stream"):
            answer = Answer(400, {}, _error("a batch's requests are not streamed: drop stream"))
        else:
            request_id = f"{batch_id}-{idx}-{attempt}"
            answer = await call_line(
                self._services,
                batch["endpoint"],
                line["body"].encode(),
                batch["tenant"],
                key,
                request_id,
            )
        if answer.status in _AGAIN or (
            answer.status >= 500 and attempt < _ATTEMPTS_ON_ENGINE_ERRORS
        ):
            self._series.lines.labels("retried").inc()
            wait = float(answer.headers.get("retry-after") or 1)
            await asyncio.sleep(min(wait, 30.0))
            await self._state.finish_line(batch_id, idx, "pending", None, attempt)
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
            "attempts": attempt,
        }
        state = "done" if answer.status == 200 else "failed"
        self._series.lines.labels("completed" if state == "done" else "failed").inc()
        await self._state.finish_line(batch_id, idx, state, result, attempt)

    async def _finish(self, batch: Record, status: str) -> None:
        """Write the output and error files and close the batch (one gateway does)."""
        batch_id = batch["id"]
        if not await self._state.claim_step(batch_id, "finish", _STEP_SECONDS):
            return
        # As it stands now (a cancel may have come since the scan read it).
        batch = await self._state.update_batch(batch_id, lambda b: b.update(finalizing_at=now()))
        if batch["status"] == "cancelling" and status == "completed":
            status = "cancelled"
        done = await self._state.results(batch_id, "done")
        failed = await self._state.results(batch_id, "failed")
        if status == "expired":
            left = await self._state.expire_pending(batch_id, _expired)
            self._series.lines.labels("expired").inc(len(left))
            failed += left
        tenant = batch["tenant"]
        outputs: Record = {}
        if done:
            outputs["output_file_id"] = await write_output(
                self._state, tenant, "batch_output", done
            )
        if failed:
            outputs["error_file_id"] = await write_output(
                self._state, tenant, "batch_output", failed
            )
        records = [json.loads(r) for r in [*done, *failed]]
        usage: Counter[str] = Counter()
        for record in records[: len(done)]:
            used = record["response"]["body"].get("usage") or {}
            usage["input_tokens"] += used.get("prompt_tokens") or 0
            usage["output_tokens"] += used.get("completion_tokens") or 0
        twice = sum(1 for r in records if r.get("attempts", 1) > 1)

        def close(record: Record) -> None:
            record.update(outputs, status=status, **{f"{status}_at": now()})
            record["usage"].update(usage, total_tokens=sum(usage.values()))
            record["request_counts"].update(completed=len(done), failed=len(failed))
            record["lines_sent_more_than_once"] = twice

        await self._state.update_batch(batch_id, close)
        self._running.pop(batch_id, None)
        log.info("batch %s %s: %d done, %d failed", batch_id, status, len(done), len(failed))


def _forget(
    running: dict[int, tuple["asyncio.Task[None]", int]], idx: int, wake: Callable[[], None]
) -> Callable[["asyncio.Task[None]"], None]:
    """What drops a line from this gateway's in flight once its task ends,
    and has the runner look again at once (its place is free)."""

    def forget(task: "asyncio.Task[None]") -> None:
        running.pop(idx, None)
        wake()

    return forget


def _unreadable(file_id: str) -> Record:
    message = (
        f"the file {file_id} is not on this gateway's GATEWAY_BATCH_DIR: the gateways must"
        " share that directory"
    )
    return {"code": "file_unavailable", "message": message, "param": "input_file_id", "line": None}


def _expired(custom_id: str) -> Record:
    return {
        "id": new_id("batch_req"),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": "batch_expired", "message": "the batch expired before it ran"},
    }


def _error(message: str) -> bytes:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return json.dumps(body).encode()
