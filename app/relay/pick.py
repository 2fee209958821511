"""Which relay a stream gets: its route's rules, and whether its tokens are
charged to a key (``app.relay.stream`` says why each exists)."""

from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.relay.exact import ExactUsageRelay
from app.relay.responses import ResponsesRelay
from app.relay.stream import StreamRelay
from app.validation import CompletionJob


def relay_for(
    job: CompletionJob, record: RequestRecord, metrics: GatewayMetrics, *, charged: bool
) -> StreamRelay:
    if job.route == "responses":
        return ResponsesRelay(record, metrics, exact=charged, most=job.max_tokens)
    if job.chunk_usage:
        return ExactUsageRelay(
            record,
            metrics,
            forward_usage=job.wants_usage,
            forward_chunk_usage=job.forward_chunk_usage,
            prompts=len(job.prompts),
        )
    return StreamRelay(record, metrics, forward_usage=job.wants_usage)
