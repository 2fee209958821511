"""Series per model and LoRA adapter: requests by outcome and tokens, by the
served name the request went to.

Bounded by what the engines serve: a model gets series only once a request
for it passed validation (a name the engines list; client input that names
nothing never makes a series), and loses them when no engine lists it any
more (an adapter unloaded), so a fleet that cycles through adapters does not
grow its scrape without end.
"""

from collections.abc import Collection
from contextlib import suppress

from prometheus_client import CollectorRegistry, Counter

_KINDS = ("prompt", "completion")


class ModelSeries:
    def __init__(self, registry: CollectorRegistry, outcomes: Collection[str]) -> None:
        self._outcomes = tuple(outcomes)
        self.requests = Counter(
            "gateway_model_requests",
            "Requests that passed validation, by the served model or adapter they went"
            " to and their final outcome.",
            ["model", "outcome"],
            registry=registry,
        )
        self.tokens = Counter(
            "gateway_model_tokens",
            "Tokens of completed or cancelled requests, by served model or adapter.",
            ["model", "kind"],
            registry=registry,
        )
        self._models: set[str] = set()

    def record(self, model: str, outcome: str, prompt: int | None, completion: int | None) -> None:
        if model not in self._models:
            self._models.add(model)
            for each in self._outcomes:
                self.requests.labels(model, each)
            for kind in _KINDS:
                self.tokens.labels(model, kind)
        self.requests.labels(model, outcome).inc()
        if outcome in ("completed", "cancelled"):
            if prompt:
                self.tokens.labels(model, "prompt").inc(prompt)
            if completion:
                self.tokens.labels(model, "completion").inc(completion)

    def keep_only(self, served: Collection[str]) -> None:
        """Drop the series of every model no engine serves any more."""
        for model in self._models - set(served):
            self._models.discard(model)
            for outcome in self._outcomes:
                with suppress(KeyError):
                    self.requests.remove(model, outcome)
            for kind in _KINDS:
                with suppress(KeyError):
                    self.tokens.remove(model, kind)
