"""The admission controller around the policy: what it does on its own
clock. In process, no engine."""

import asyncio

from app.admission.controller import AdmissionController
from app.admission.estimate import PromptTokenEstimator
from app.admission.fairqueue import Waiter
from app.admission.policy import Reservation
from app.engine.view import FixedView
from app.metrics import GatewayMetrics
from app.routing.block_index import BlockIndex, PromptBlocks
from app.routing.cached import ReportedCache
from app.settings import Settings
from tests.support.routing import prefix_router


def queued(
    controller: AdmissionController, tokens: int, **fields: object
) -> "asyncio.Future[Reservation]":
    """A request put in the queue as ``admit`` puts it; done when admitted."""
    waiter = Waiter("t", "normal", tokens, arrival=asyncio.get_running_loop().time(), **fields)  # type: ignore[arg-type]
    waiter.deadline = waiter.arrival + 30
    waiter.model = "m"
    return controller.enqueue(waiter)


async def test_a_request_waiting_for_its_prefixs_engine_is_admitted_when_its_wait_ends() -> None:
    """Nothing happens after it starts waiting — no release, no arrival, no
    engine tick — and it is admitted elsewhere all the same once its wait
    is over: the controller looks again then."""
    indexes = {"e0": BlockIndex(), "e1": BlockIndex()}
    router = prefix_router(ReportedCache(indexes))
    settings = Settings(routing_affinity_wait=0.2, max_request_share=1.0)
    controller = AdmissionController(settings, GatewayMetrics(), PromptTokenEstimator(), router)
    for url in indexes:
        controller.add_engine(FixedView(url, routable=True, models=frozenset({"m"})))
        controller.policy.engines[url].set_capacity(11, 100)
    prompt = PromptBlocks(tuple(range(8)))
    assert indexes["e0"].stored([1, 2], None, list(prompt.ids), 4)
    for index in indexes.values():
        index.live = True
    filler = queued(controller, 1000, prompt=prompt)
    held = queued(controller, 100, prompt=prompt, affinity=7)
    controller.on_engine_change("e0")
    first = await asyncio.wait_for(filler, 1)
    assert first.engine == "e0"
    assert not held.done()
    reservation = await asyncio.wait_for(held, 5)
    assert reservation.engine == "e1"
    assert reservation.choice is not None
    assert reservation.choice.waited_for == "e0"
