"""The scorers' table: every signal routing weighs, by the name the settings
give it (``GATEWAY_ROUTING_SCORERS``), and the weights each routing preset
stands for (``GATEWAY_ROUTING``).

A scorer gives each engine a score in [0, 1] for one request; the router
adds them up, each times its weight, and a weight of 0 takes a scorer out of
the decision (it is not even asked). A new signal is a module here and one
line in ``SCORERS``; a name without a scorer, or a scorer without a name,
fails at import.
"""

from collections.abc import Callable, Mapping
from typing import Literal, get_args

from app.routing.base import Scorer
from app.routing.scorers.adapter import RunsTheAdapter
from app.routing.scorers.in_flight import FewestInFlight
from app.routing.scorers.kv_utilization import EmptiestBudget
from app.routing.scorers.prefix import HoldsThePrompt

ScorerName = Literal["kv_utilization", "in_flight", "prefix", "adapter"]

SCORERS: Mapping[ScorerName, Callable[[], Scorer]] = {
    "kv_utilization": EmptiestBudget,
    "in_flight": FewestInFlight,
    "prefix": HoldsThePrompt,
    "adapter": RunsTheAdapter,
}

# The scorers that read a request's prompt (its prefix key, its token ids):
# a route that weighs one ranks by the prompt, counts its tokens and breaks
# ties by its key.
READS_PROMPTS: frozenset[ScorerName] = frozenset({"prefix"})

Weights = Mapping[ScorerName, float]

# ``GATEWAY_ROUTING``'s presets: least loaded weighs the KV budget and the
# requests in flight alike; prefix routing weighs only what the engines hold
# of the prompt (its key breaking ties). Both weigh the LoRA adapter (alike
# for every engine where the request's model is not one) at 4, twice what
# the other scorers can add up to: an engine already using the adapter is
# not passed over for one with a free slot, nor that one for one that would
# have to swap it in, while it has room.
PRESETS: Mapping[str, Weights] = {
    "least_loaded": {"kv_utilization": 1.0, "in_flight": 1.0, "adapter": 4.0},
    "prefix": {"prefix": 1.0, "adapter": 4.0},
}

_missing = set(get_args(ScorerName)) ^ set(SCORERS)
if _missing:
    raise ImportError(f"scorers without an entry or a name: {sorted(_missing)}")


def scorer_weights(text: str) -> dict[ScorerName, float]:
    """``name=weight`` pairs, comma-separated (``prefix=1,in_flight=0.5``):
    unknown names and negative or missing weights are errors, said plainly."""
    weights: dict[ScorerName, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if name not in SCORERS:
            raise ValueError(f"unknown scorer {name!r}: the scorers are {', '.join(SCORERS)}")
        try:
            weight = float(value) if sep else -1.0
        except ValueError:
            weight = -1.0
        if not weight >= 0:
            raise ValueError(f"scorer {name!r} needs a weight of 0 or more: {part.strip()!r}")
        weights[name] = weight  # type: ignore[index]
    if not any(weights.values()):
        raise ValueError(f"no scorer with a weight above 0 in {text!r}")
    return weights
