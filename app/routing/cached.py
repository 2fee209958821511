"""What each engine holds of a request's prompt, from the engines' own
reports (their KV cache events: ``app.engine.kv_events``), as routing asks
it (``CacheView``): the leading blocks of the prompt in the engine's prefix
cache, looked up in the engine's ``BlockIndex`` with the prompt's token ids
and cache salt. Not known — None — for an engine whose events are not live
(started without them, disconnected, a gap being filled) or not seen yet.
"""

from collections.abc import Mapping

from app.routing.base import RouteRequest
from app.routing.block_index import BlockIndex


class ReportedCache:
    def __init__(self, indexes: Mapping[str, BlockIndex]) -> None:
        # Engine URL → its index, kept by the engine pool (read, not copied).
        self._indexes = indexes

    def held(self, request: RouteRequest, engine: str) -> int | None:
        index = self._indexes.get(engine)
        if request.prompt is None or index is None or not index.live:
            return None
        return index.leading(request.prompt)
