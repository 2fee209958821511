"""What the request pipeline needs from admission control."""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.admission.demand import Demand
from app.admission.forecast import QueuePlace
from app.engine.stats import EngineStats
from app.engine.view import EngineView, adapters_of
from app.relay.lane import Lane, NoLane
from app.request.errors import EngineUnavailable
from app.request.identity import Identity
from app.request.record import RequestRecord
from app.request.validation import CompletionJob
from app.routing.base import Choice, EngineLoad, RouteRequest
from app.routing.prefix_key import PromptKeys
from app.routing.router import Router


@dataclass(frozen=True)
class AdmissionRequest:
    """What admission decides on: the checked request, its worst-case
    demand on the KV cache, who it is for, its prompt's keys (made once per
    request: routing key, prefix pieces, blocks), and the one engine it may
    go to, if any (it continues state held there)."""

    job: CompletionJob
    demand: Demand
    identity: Identity
    keys: PromptKeys = field(default_factory=PromptKeys)
    pinned: str | None = None


class Hold(Protocol):
    """An admitted request's hold on one engine."""

    @property
    def choice(self) -> Choice:
        """Where the router placed it (its ``engine``) and why."""

    @property
    def lane(self) -> Lane:
        """What its engine call tells admission (``app.relay.lane``)."""

    def release(self, record: RequestRecord) -> None:
        """Give the capacity back; the record carries what the request used."""


class Admission(Protocol):
    async def admit(
        self, request: AdmissionRequest, record: RequestRecord, excluded: Iterable[str] = ()
    ) -> Hold:
        """Wait until the request may go to an engine (not one of
        ``excluded``: a retry), or raise a ``GatewayError``."""

    @property
    def queued(self) -> int:
        """Requests waiting for admission now."""

    def place(self, request_id: str) -> QueuePlace | None:
        """Where the request of ``request_id`` (its engine request id) stands
        in the queue; None when it is not queued."""

    def start_draining(self) -> None:
        """Refuse queued and new requests from now on."""

    def status(self) -> dict[str, Any]:
        """What an operator reads of admission (``/status``): its queue and,
        per engine, what it holds there."""

    def add_engine(self, view: EngineView) -> None:
        """An engine joined: ``view`` says, from now on, whether it is up and
        what it serves."""

    def on_engine_change(self, engine: str) -> None:
        """The engine's view changed (up, down, its models): look again."""

    def on_engine_stats(self, engine: str, stats: EngineStats) -> None: ...

    def forget_engine(self, engine: str) -> None: ...


@dataclass
class _Engine:
    view: EngineView
    in_flight: int = 0
    # The LoRA adapters of the requests in flight there, with how many use each.
    adapters: Counter[str] = field(default_factory=Counter)


@dataclass(eq=False)
class _CountedHold:
    owner: "Unlimited"
    engine: str
    choice: Choice
    released: bool = field(default=False)
    adapter: str | None = None
    # Nothing follows a request here: no queue, no budget.
    lane: Lane = field(default_factory=NoLane)

    def release(self, record: RequestRecord) -> None:
        if not self.released:
            self.released = True
            state = self.owner.engines.get(self.engine)
            if state is not None:
                state.in_flight -= 1
                if self.adapter is not None:
                    state.adapters[self.adapter] -= 1
                    if state.adapters[self.adapter] <= 0:
                        del state.adapters[self.adapter]


class Unlimited:
    """``GATEWAY_ADMISSION=off``: no queue and no budget — a request goes
    straight to an engine that is up and serves its model, the router
    choosing among them by the requests this gateway has in flight there."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self.engines: dict[str, _Engine] = {}

    async def admit(
        self, request: AdmissionRequest, record: RequestRecord, excluded: Iterable[str] = ()
    ) -> Hold:
        loads = [
            EngineLoad(
                id=url,
                in_flight=state.in_flight,
                up=state.view.routable,
                models=state.view.models,
                adapters=adapters_of(state.view, state.adapters),
            )
            for url, state in self.engines.items()
        ]
        route = RouteRequest(
            request.job.model,
            request.keys.affinity,
            frozenset(excluded),
            request.pinned,
            request.keys.blocks,
        )
        choice = self._router.choose(route, loads)
        if not isinstance(choice, Choice):  # nothing waits here: may_wait is off
            raise EngineUnavailable("no engine is available for this model", retry_after=1)
        state = self.engines[choice.engine]
        state.in_flight += 1
        model = request.job.model
        adapter = model if model in state.view.adapters else None
        if adapter is not None:
            state.adapters[adapter] += 1
        return _CountedHold(self, choice.engine, choice, adapter=adapter)

    @property
    def queued(self) -> int:
        return 0  # nothing waits here

    def place(self, request_id: str) -> QueuePlace | None:
        return None  # nothing waits here

    def start_draining(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        engines = {url: {"in_flight": state.in_flight} for url, state in self.engines.items()}
        return {"admission": "off", "queue": None, "engines": engines}

    def add_engine(self, view: EngineView) -> None:
        self.engines.setdefault(view.url, _Engine(view)).view = view

    def on_engine_change(self, engine: str) -> None:
        return None  # nothing waits here: the next request reads the view

    def on_engine_stats(self, engine: str, stats: EngineStats) -> None:
        return None

    def forget_engine(self, engine: str) -> None:
        self.engines.pop(engine, None)
