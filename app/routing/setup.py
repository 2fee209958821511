"""The router the settings describe.

``GATEWAY_ROUTING=auto`` (the default) is prefix routing where the engines
publish their KV cache events and least loaded where they do not. On KV
events, prefix routing knows what each engine holds; by the prompt's
approximate key alone (no events) it guesses, and a wrong guess piles
requests on one engine while the other idles where the documents fit both
caches (docs/benchmarks.md, "Routing over two engines"), so a deployment
without events gets least loaded unless it asks for ``prefix``.

``GATEWAY_ROUTING_SCORERS`` replaces the preset's weights; a load cap
(``routing_load_factor``, ``routing_load_slack``; ``routing_held_load_factor``
for a prefix its holder can carry) bounds every route that weighs the
prompt (not the requests for a LoRA adapter: app/routing/router.py).
"""

from collections.abc import Mapping

from app.routing.base import CacheView
from app.routing.block_index import BlockIndex
from app.routing.cached import ReportedCache
from app.routing.heat import PrefixHeat
from app.routing.homes import Homes
from app.routing.load_cap import LoadCap
from app.routing.router import Router
from app.routing.scorers import PRESETS, READS_PROMPTS, ScorerName, scorer_weights
from app.settings import Settings


def routing_preset(settings: Settings) -> str:
    """The preset ``GATEWAY_ROUTING`` comes to (``auto`` resolved)."""
    if settings.routing != "auto":
        return settings.routing
    return "prefix" if settings.kv_events_endpoint is not None else "least_loaded"


def routing_weights(settings: Settings) -> Mapping[ScorerName, float]:
    if settings.routing_scorers is not None:
        return scorer_weights(settings.routing_scorers)
    return PRESETS[routing_preset(settings)]


def build_router(settings: Settings, kv_indexes: Mapping[str, BlockIndex]) -> Router:
    weights = routing_weights(settings)
    reads_prompts = any(w > 0 and name in READS_PROMPTS for name, w in weights.items())
    cap = LoadCap(
        settings.routing_load_factor,
        settings.routing_load_slack,
        settings.routing_held_load_factor,
    )
    # What the engines report holding ranks engines only where a route
    # weighs the prompt at all, and only if they publish it.
    cache: CacheView | None = None
    if reads_prompts and settings.kv_events_endpoint is not None:
        cache = ReportedCache(kv_indexes)
    # Homes only beside the engines' events: those tell every replica where a
    # prefix was placed; without them, the key is all that replicas share.
    homes = Homes() if cache is not None and settings.routing_placement == "least_loaded" else None
    # Heat only beside the events too: without them no engine is known to
    # hold a prompt, and the cap alone bounds every engine.
    heat = PrefixHeat() if cache is not None else None
    name = routing_preset(settings) if settings.routing_scorers is None else _named(weights)
    return Router(
        weights,
        cap=cap if reads_prompts else None,
        cache=cache,
        name=name,
        homes=homes,
        heat=heat,
    )


def _named(weights: Mapping[ScorerName, float]) -> str:
    return ",".join(f"{name}={weight:g}" for name, weight in weights.items())
