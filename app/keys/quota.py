"""Holding a key to its limits: requests and tokens per window, concurrent
requests.

Token limits are exact. A request reserves its worst case — its prompt and
every token it may generate, for each of its sequences — when it is
admitted, and settles to what it really used (the engine's ``usage``: prompt
plus completion, as OpenAI counts them) when it ends; a cancelled stream pays
for what it generated, a request refused before the engine pays nothing. So
the tokens a key's requests are charged in any window stay within its limit,
plus at most what one request used beyond its reservation (its prompt
estimate's error). Charging after the response instead lets every request in
flight overshoot at once; refusing up front what could never fit (a worst
case above the whole limit) keeps a client from waiting on a limit it can
never pass.
"""

import math
from dataclasses import dataclass

from app.errors import RateLimited, TooLong
from app.keys.file import KeyEntry
from app.record import RequestRecord
from app.state.base import LimitStore, Verdict


@dataclass(eq=False)
class Charge:
    """What one request holds against its key until it ends."""

    store: LimitStore
    key: str
    charge: str
    reserved: int | None
    slot: bool
    headers: dict[str, str]
    settled: bool = False

    def settle(self, used: int) -> None:
        """Pay ``used`` tokens instead of the reservation and free the slot;
        once."""
        if self.settled:
            return
        self.settled = True
        if self.reserved is not None:
            self.store.settle_tokens(self.key, self.charge, used)
        if self.slot:
            self.store.release_slot(self.key)


class KeyQuota:
    def __init__(self, store: LimitStore, window: int) -> None:
        self._store = store
        self._window = window

    async def charge(self, entry: KeyEntry, charge: str, worst_tokens: int) -> Charge:
        """Count the request against the key's limits or raise ``RateLimited``
        (``TooLong`` if its worst case exceeds the whole token limit)."""
        store, window = self._store, self._window
        headers: dict[str, str] = {}
        if entry.requests_per_minute is not None:
            verdict = await store.hit_requests(entry.id, entry.requests_per_minute, window)
            headers |= _headers("requests", verdict)
            if not verdict.allowed:
                raise _refused(entry, "requests", verdict, headers)
        reserved = None
        if entry.tokens_per_minute is not None:
            limit = entry.tokens_per_minute
            if worst_tokens > limit:
                raise TooLong(
                    f"the request may use {worst_tokens} tokens; the key {entry.id} may use"
                    f" {limit} per {window}s: lower max_tokens (or n)",
                    param="max_tokens",
                )
            verdict = await store.reserve_tokens(entry.id, charge, worst_tokens, limit, window)
            headers |= _headers("tokens", verdict)
            if not verdict.allowed:
                raise _refused(entry, "tokens", verdict, headers)
            reserved = worst_tokens
        slot = False
        if entry.max_concurrent is not None:
            slot = await store.acquire_slot(entry.id, entry.max_concurrent)
            if not slot:
                if reserved is not None:
                    store.settle_tokens(entry.id, charge, 0)
                raise RateLimited(
                    f"the key {entry.id} has {entry.max_concurrent} requests in progress,"
                    " its limit; retry when one ends",
                    limit="requests",
                    retry_after=1.0,
                    headers=headers,
                )
        return Charge(store, entry.id, charge, reserved, slot, headers)


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
