"""Holding a key to its limits: requests and tokens per window, concurrent
requests.

Token limits are exact. A request is charged when it is admitted and
settles to what it really used (the engine's ``usage``: prompt plus
completion, as OpenAI counts them) when it ends; a cancelled stream pays for
what it generated, a request refused before the engine pays nothing.

*What it is charged.* Its worst case ``W`` is its prompt and every token it
may generate, for each of its sequences; its estimate ``E ≤ W`` is its
prompt and the share of its output allowance the key's completed requests
wrote (``app.keys.output``). The store keeps, per key, ``U``: the sum over
its in-window, unsettled charges of what each left unreserved of its worst
case (``W_i - c_i``). The request is charged ``c = min(W, max(E, U))``
(``app.state.base.reservation``), admitted if the window's charges plus ``c``
are within the limit, and then ``U += W - c``; settling a charge (or its
leaving the window) takes its ``W - c`` out of ``U`` and replaces ``c`` with
what it used.

*The bound, by construction.* A charge leaves ``U`` at ``U`` (``c = W``),
at ``W`` (``c = U``) or below ``W`` (``c = E > U``), and taking charges out
only lowers it: so ``U`` never exceeds the largest worst case charged. Take
the requests charged in any one window and the last of them: when it was
admitted, every other one was in the log, settled at what it used or
unsettled at its charge, and with its own charge they were within the
limit. What the unsettled ones (and it) use beyond their charges is at most
their unreserved parts, which ``U`` (after its charge) counts: the window's
tokens stay within the limit plus one request's worst case — plus what a
request used beyond its worst case where its prompt was estimated, not
counted. Charging every request its worst case leaves a window short by
all that its requests in flight will not use; charging the estimate alone,
or only after the response, lets every request in flight overshoot at once.
Between them, ``U`` lets the key's requests in flight leave at most one
worst case unreserved. Refusing up front what could never fit (a worst case
above the whole limit) keeps a client from waiting on a limit it can never
pass.
"""

import math
from dataclasses import dataclass

from app.keys.file import KeyEntry
from app.keys.output import OutputEstimates
from app.request.errors import RateLimited, TooLong
from app.request.record import RequestRecord
from app.state.base import LimitStore, Verdict


@dataclass(eq=False)
class Charge:
    """What one request holds against its key until it ends: ``charged``
    tokens of a worst case of ``worst`` (None: the key has no token limit)."""

    store: LimitStore
    estimates: OutputEstimates
    key: str
    charge: str
    worst: int
    prompt: int
    charged: int | None
    slot: bool
    headers: dict[str, str]
    settled: bool = False

    def settle(self, used: int, written: int | None = None) -> None:
        """Pay ``used`` tokens instead of the charge and free the slot;
        once. ``written``: the output tokens of a request that completed,
        which teach the key's estimate."""
        if self.settled:
            return
        self.settled = True
        if self.charged is not None:
            self.store.settle_tokens(self.key, self.charge, used)
            if written is not None:
                self.estimates.observe(self.key, written, self.worst - self.prompt)
        if self.slot:
            self.store.release_slot(self.key)


class KeyQuota:
    def __init__(self, store: LimitStore, window: int) -> None:
        self._store = store
        self._window = window
        self.estimates = OutputEstimates()

    async def charge(self, entry: KeyEntry, charge: str, worst: int, prompt: int) -> Charge:
        """Count the request — at most ``worst`` tokens, ``prompt`` of them
        its prompt — against the key's limits or raise ``RateLimited``
        (``TooLong`` if its worst case exceeds the whole token limit)."""
        store, window = self._store, self._window
        headers: dict[str, str] = {}
        if entry.requests_per_minute is not None:
            verdict = await store.hit_requests(entry.id, entry.requests_per_minute, window)
            headers |= _headers("requests", verdict)
            if not verdict.allowed:
                raise _refused(entry, "requests", verdict, headers)
        charged = None
        if entry.tokens_per_minute is not None:
            limit = entry.tokens_per_minute
            if worst > limit:
                raise TooLong(
                    f"the request may use {worst} tokens; the key {entry.id} may use"
                    f" {limit} per {window}s: lower max_tokens (or n)",
                    param="max_tokens",
                )
            estimate = self.estimates.estimate(entry.id, prompt, worst)
            verdict = await store.reserve_tokens(entry.id, charge, estimate, worst, limit, window)
            headers |= _headers("tokens", verdict)
            if not verdict.allowed:
                raise _refused(entry, "tokens", verdict, headers)
            charged = verdict.charged
        slot = False
        if entry.max_concurrent is not None:
            slot = await store.acquire_slot(entry.id, entry.max_concurrent)
            if not slot:
                if charged is not None:
                    store.settle_tokens(entry.id, charge, 0)
                raise RateLimited(
                    f"the key {entry.id} has {entry.max_concurrent} requests in progress,"
                    " its limit; retry when one ends",
                    limit="requests",
                    retry_after=1.0,
                    headers=headers,
                )
        return Charge(
            store, self.estimates, entry.id, charge, worst, prompt, charged, slot, headers
        )


def _refused(entry: KeyEntry, limit: str, verdict: Verdict, headers: dict[str, str]) -> RateLimited:
    return RateLimited(
        f"rate limit reached for the key {entry.id} on {limit} per window:"
        f" limit {verdict.limit}, remaining {verdict.remaining};"
        " retry after the time given in Retry-After",
        limit=limit,
        retry_after=max(1.0, verdict.retry_after),
        headers=headers,
    )


def _headers(kind: str, verdict: Verdict) -> dict[str, str]:
    """OpenAI's rate-limit headers for one limit."""
    return {
        f"x-ratelimit-limit-{kind}": str(verdict.limit),
        f"x-ratelimit-remaining-{kind}": str(max(0, verdict.remaining)),
        f"x-ratelimit-reset-{kind}": duration(verdict.reset_after),
    }


def duration(seconds: float) -> str:
    """A duration as OpenAI writes it: ``250ms``, ``1.5s``, ``6m0s``; in
    milliseconds rounded up, so a client that waits it out is not early (the
    inner rounding drops float noise: 2.007 × 1000 is 2007.0000000000002)."""
    ms = max(0, math.ceil(round(seconds * 1000, 6)))
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:g}"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def tokens_used(record: RequestRecord, prompt_estimate: int) -> int:
    """What a request pays: nothing if it never reached the engine; else its
    usage (prompt plus completion) — a stream that ended before its usage
    chunk pays its estimated prompt and the tokens it was sent."""
    if record.admitted_at is None:
        return 0
    return (record.prompt_tokens or prompt_estimate) + (record.completion_tokens or 0)
