"""LoRA adapters through admission and routing: the engines' slots as they
report them, and the adapters of the requests admitted since (the engine's
next report comes a second later; a burst is placed before it)."""

from app.admission.policy import AdmissionPolicy, Reservation, Waiter
from app.engine.stats import LoraSlots
from app.engine.view import FixedView
from app.routing.router import Router
from app.routing.scorers import PRESETS
from tests.support.asgi import in_process_gateway
from tests.support.routing import prefix_router
from tests.support.scripted_engine import ScriptedEngine
from tests.support.wait import wait_for

ADAPTERS = frozenset({"a", "b"})


def policy(router: Router | None = None, blocks: int = 100) -> AdmissionPolicy:
    """Two engines serving the base model ``m`` and adapters ``a`` and ``b``,
    one LoRA slot each, nothing in it yet; routed as the gateway's default
    preset routes them (least loaded, the adapter)."""
    p = AdmissionPolicy(router=router or Router(PRESETS["least_loaded"]))
    for name in ("e0", "e1"):
        view = FixedView(
            name,
            routable=True,
            models=frozenset({"m"}) | ADAPTERS,
            adapters=ADAPTERS,
            lora=LoraSlots(1, frozenset(), frozenset()),
        )
        p.add_engine(view).set_capacity(blocks + 1, 100)
    return p


def request(model: str) -> Waiter:
    return Waiter("t", "normal", 100, arrival=0.0, deadline=30.0, model=model)


def burst(p: AdmissionPolicy, models: list[str]) -> list[tuple[Waiter, Reservation]]:
    for w in [request(m) for m in models]:
        p.enqueue(w, now=0.0)
    admitted, _ = p.pop_admissible(0.0)
    assert len(admitted) == len(models)
    return admitted


def engines_of(placed: list[tuple[Waiter, Reservation]], model: str) -> set[str]:
    return {r.engine for w, r in placed if w.model == model}


def test_a_mixed_burst_keeps_each_adapter_on_one_engine() -> None:
    placed = burst(policy(), ["a", "a", "b", "b"] * 6)
    assert len(engines_of(placed, "a")) == len(engines_of(placed, "b")) == 1
    assert engines_of(placed, "a") != engines_of(placed, "b")


def test_without_the_adapter_scorer_both_adapters_land_on_both_engines() -> None:
    by_load = Router({k: w for k, w in PRESETS["least_loaded"].items() if k != "adapter"})
    placed = burst(policy(by_load), ["a", "a", "b", "b"] * 6)
    assert engines_of(placed, "a") == engines_of(placed, "b") == {"e0", "e1"}


def test_an_adapter_spreads_when_its_engine_has_no_room() -> None:
    # Each engine holds 4 of these requests at once.
    p = policy(blocks=4)
    placed = burst(p, ["a"] * 6)
    assert [r.engine for _, r in placed] == ["e0"] * 4 + ["e1"] * 2


def test_an_adapter_is_not_spread_by_the_load_cap_of_prefix_routing() -> None:
    """Under prefix routing's load cap (1.25 times an engine's fair share,
    or 2 above it), a prompt's requests spread after about 5 of 6; an
    adapter's stay where it runs while that engine has room."""
    p = policy(prefix_router())
    placed = burst(p, ["a"] * 12)
    assert [r.engine for _, r in placed] == ["e0"] * 12


def test_what_the_engine_reports_running_counts_before_any_request_is_admitted() -> None:
    p = policy()
    p.engines["e1"].view.lora = LoraSlots(1, frozenset({"b"}), frozenset())  # type: ignore[misc]
    placed = burst(p, ["b", "a"])
    assert engines_of(placed, "b") == {"e1"}
    assert engines_of(placed, "a") == {"e0"}


def test_a_released_request_frees_its_adapters_slot() -> None:
    p = policy()
    ((_, held),) = burst(p, ["a"])
    assert held.engine == "e0"
    assert held.adapter == "a"
    p.release(held)
    assert p.engines["e0"].adapters == {}
    # e0's slot is free again: b may go there (the lower id, loads alike).
    assert engines_of(burst(p, ["b"]), "b") == {"e0"}


def test_base_model_requests_go_by_load_alone() -> None:
    p = policy()
    burst(p, ["a"] * 3)
    placed = burst(p, ["m"] * 4)
    assert {r.adapter for _, r in placed} == {None}
    assert sorted(r.engine for _, r in placed) == ["e0", "e1", "e1", "e1"]


def engine_metrics(engine: ScriptedEngine, capacity: int, deferred: int) -> str:
    """What vLLM exports while 4 requests run and ``capacity`` wait for room,
    ``deferred`` for a LoRA slot."""
    return engine._metrics() + (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="tiny"} 4.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="tiny"}} {capacity + deferred}.0\n'
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        f'vllm:num_requests_waiting_by_reason{{model_name="tiny",reason="capacity"}} {capacity}.0\n'
        f'vllm:num_requests_waiting_by_reason{{model_name="tiny",reason="deferred"}} {deferred}.0\n'
    )


async def test_requests_waiting_for_a_lora_slot_do_not_teach_a_sequence_cap() -> None:
    """An engine running one adapter's requests while the other's wait for
    its slot is not at its ``--max-num-seqs``: capping it at what it runs
    would halve it for good. Requests waiting for room are what teach it."""
    engine = ScriptedEngine()
    engine.metrics_text = engine_metrics(engine, capacity=0, deferred=4)
    async with in_process_gateway(engine, health_interval=0.02) as gateway:
        budget = gateway.services.admission.policy.engines[engine.url]  # type: ignore[attr-defined]
        ticks = engine.requests["/metrics"]
        assert await wait_for(lambda: engine.requests["/metrics"] >= ticks + 20, timeout=30)
        assert budget.sequence_cap is None
        # The engine's 8 requests are the gateway's (as if other replicas had
        # admitted them): only such a queue teaches a cap.
        budget.others_in_flight = 8
        engine.metrics_text = engine_metrics(engine, capacity=4, deferred=0)
        assert await wait_for(lambda: budget.sequence_cap == 4, timeout=30)
