"""Which relay a stream gets: its route's stream kind, and whether its
tokens are charged to a key (``app.relay.stream`` says why each exists)."""

from collections.abc import Callable
from typing import get_args

from app.observe.metrics import GatewayMetrics
from app.relay.exact import ExactUsageRelay
from app.relay.named import MESSAGES, RESPONSES, Framing, NamedEventRelay
from app.relay.stream import StreamRelay
from app.request.record import RequestRecord
from app.request.routes import ROUTES, StreamKind
from app.request.validation import CompletionJob

_Make = Callable[[CompletionJob, RequestRecord, GatewayMetrics, bool], StreamRelay]


def _chunks(
    job: CompletionJob, record: RequestRecord, metrics: GatewayMetrics, charged: bool
) -> StreamRelay:
    usage = ROUTES[job.route].usage
    if job.chunk_usage:
        return ExactUsageRelay(
            record,
            metrics,
            usage=usage,
            forward_usage=job.wants_usage,
            forward_chunk_usage=job.forward_chunk_usage,
            prompts=len(job.prompts),
        )
    return StreamRelay(record, metrics, usage=usage, forward_usage=job.wants_usage)


def _named(framing: Framing) -> _Make:
    def make(
        job: CompletionJob, record: RequestRecord, metrics: GatewayMetrics, charged: bool
    ) -> StreamRelay:
        usage = ROUTES[job.route].usage
        return NamedEventRelay(
            record, metrics, framing=framing, usage=usage, exact=charged, most=job.max_tokens
        )

    return make


_RELAYS: dict[StreamKind, _Make] = {
    "chunks": _chunks,
    "responses": _named(RESPONSES),
    "messages": _named(MESSAGES),
}
if set(_RELAYS) != set(get_args(StreamKind)):
    raise ImportError("every stream kind needs its relay")


def relay_for(
    job: CompletionJob, record: RequestRecord, metrics: GatewayMetrics, *, charged: bool
) -> StreamRelay:
    kind = ROUTES[job.route].stream
    if kind is None:
        raise ValueError(f"the {job.route} route does not stream")
    return _RELAYS[kind](job, record, metrics, charged)
