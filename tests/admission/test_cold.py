"""Scale from zero in the policy (``app.admission.cold``): requests for a
cold model held while no engine serves it, on a budget of their own, in
their place in the order; pure, the clock given."""

from app.admission.cold import ColdStarts
from app.admission.policy import AdmissionPolicy, PolicyConfig, Waiter
from app.engine.view import FixedView


def cold_policy(timeout: float = 60.0) -> AdmissionPolicy:
    p = AdmissionPolicy(PolicyConfig(cold_models=frozenset({"m"}), cold_start_timeout=timeout))
    # The pool's one engine, known but not up (loading, or scaled away).
    budget = p.add_engine(FixedView("e0", routable=False, models=frozenset({"m"})))
    budget.set_capacity(101, 16)
    return p


def engine(p: AdmissionPolicy) -> FixedView:
    found = p.engines["e0"].view
    assert isinstance(found, FixedView)
    return found


def queued(p: AdmissionPolicy, tenant: str, at: float, objective: float = 5.0) -> Waiter:
    w = Waiter(tenant, "normal", 32, arrival=at, deadline=at + objective, objective=objective)
    w.model = "m"
    p.enqueue(w, at)
    return w


def test_a_request_for_a_cold_model_is_held_on_the_cold_budget_not_its_objective() -> None:
    p = cold_policy(timeout=60.0)
    w = queued(p, "a", at=0.0, objective=5.0)
    assert w.held_from == 0.0
    # Past its objective it still waits: nothing is refused for a start.
    assert p.time_left(w, 30.0) == 30.0
    admitted, expired = p.pop_admissible(30.0)
    assert (admitted, expired) == ([], [])
    admitted, expired = p.pop_admissible(60.0)
    assert expired == [w]


def test_the_budget_counts_from_the_pools_last_change() -> None:
    p = cold_policy(timeout=60.0)
    w = queued(p, "a", at=0.0)
    p.pool_changed(50.0)  # an engine found, still loading: a new budget
    assert w.held_from == 0.0
    assert p.time_left(w, 100.0) == 10.0


def test_once_an_engine_serves_the_model_the_objective_counts_less_the_time_held() -> None:
    p = cold_policy()
    w = queued(p, "a", at=0.0, objective=5.0)
    engine(p).routable = True
    p.pool_changed(40.0)
    assert w.held_from is None
    assert p.time_left(w, 40.0) == 5.0
    admitted, _ = p.pop_admissible(40.0)
    assert [a for a, _ in admitted] == [w]


def test_held_requests_keep_the_fair_order_when_the_engine_comes() -> None:
    p = cold_policy()
    a = [queued(p, "a", at=float(i)) for i in range(4)]
    b = queued(p, "b", at=4.0)
    engine(p).routable = True
    p.pool_changed(40.0)
    order = [w for w, _ in p.pop_admissible(40.0)[0]]
    # Tenant b's one request goes second, not behind all of a's.
    assert order[:2] == [a[0], b]
    assert order[2:] == a[1:]


def test_a_model_not_cold_is_not_held() -> None:
    p = cold_policy()
    w = Waiter("a", "normal", 32, arrival=0.0, deadline=5.0, objective=5.0, model="other")
    p.enqueue(w, 0.0)
    assert w.held_from is None
    assert p.time_left(w, 0.0) == 5.0


def test_without_a_timeout_nothing_is_held() -> None:
    p = cold_policy(timeout=0.0)
    w = queued(p, "a", at=0.0)
    assert w.held_from is None


def test_an_engine_lost_holds_the_requests_still_waiting_for_it() -> None:
    p = cold_policy()
    engine(p).routable = True
    p.pool_changed(0.0)
    p.engines["e0"].set_capacity(1, 16)  # full: the request waits for room
    w = queued(p, "a", at=1.0)
    assert w.held_from is None
    engine(p).routable = False
    p.pool_changed(2.0)
    assert w.held_from == 2.0


def test_retry_after_is_the_slowest_of_the_last_starts_less_the_one_under_way() -> None:
    cold = ColdStarts({"m"}, timeout=10.0)
    assert cold.retry_after("m", 0.0, unknown=5.0) == 5.0
    w = Waiter("a", "normal", 1, arrival=0.0, model="m")
    cold.hold(w, 0.0)
    cold.pool_changed(42.0, lambda model: True, [w])
    assert cold.take_measured() == [("m", 42.0)]
    w2 = Waiter("a", "normal", 1, arrival=100.0, model="m")
    cold.hold(w2, 100.0)
    assert cold.retry_after("m", 110.0, unknown=5.0) == 32.0
    assert cold.retry_after("m", 150.0, unknown=5.0) == 1.0
