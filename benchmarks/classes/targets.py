"""What each part measures against: vLLM direct (the anchor, and once more
in every round: the band two cells of one target differ by), the gateway
as ``make up`` sets it, and the gateway with admission off (the negative
control: the class still reaches the engine, nothing is queued or refused).

Pure: the targets, their names, and a gateway's settings."""

from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks.classes.requests import Marking
from deploy.stack import gateway_environment

# The engines the parts run on: ``make up``'s (priority scheduling), the
# same ordering by arrival (``fcfs``), and one with few sequences and
# plenty of KV cache, where sequences run out before blocks (``eviction``).
EngineKind = Literal["priority", "fcfs", "eviction"]
PARTS = ("mixed", "objectives", "tenants", "eviction")


@dataclass(frozen=True)
class Target:
    name: str
    engine: EngineKind
    marking: Marking
    # Settings beside make up's; None: vLLM direct, no gateway.
    gateway: dict[str, str] | None = field(default=None, hash=False)

    @property
    def direct(self) -> bool:
        return self.gateway is None


GATEWAY = Target("gateway", "priority", "header", {})
ADMISSION_OFF = Target("gateway-admission-off", "priority", "header", {"GATEWAY_ADMISSION": "off"})

TARGETS: dict[str, tuple[Target, ...]] = {
    "mixed": (
        Target("direct-fcfs", "fcfs", "none"),
        Target("direct-priority", "priority", "body"),
        Target("direct-priority-again", "priority", "body"),
        GATEWAY,
        ADMISSION_OFF,
    ),
    "objectives": (
        Target("direct", "priority", "body"),
        Target("direct-again", "priority", "body"),
        GATEWAY,
        ADMISSION_OFF,
    ),
    "tenants": (
        Target("direct", "priority", "body"),
        Target("direct-again", "priority", "body"),
        GATEWAY,
        ADMISSION_OFF,
    ),
    "eviction": (
        Target("direct-priority", "eviction", "body"),
        Target("direct-priority-again", "eviction", "body"),
        Target("gateway", "eviction", "header", {}),
    ),
}
# Each part's anchor: vLLM alone at its best for the part (ordering by
# priority where the part has classes), the figure to beat.
ANCHORS = {
    "mixed": "direct-priority",
    "objectives": "direct",
    "tenants": "direct",
    "eviction": "direct-priority",
}
NAMES = {
    "direct-fcfs": "vLLM direct, fcfs",
    "direct-priority": "vLLM direct, priority (anchor)",
    "direct-priority-again": "vLLM direct, priority, again",
    "direct": "vLLM direct (anchor)",
    "direct-again": "vLLM direct, again",
    "gateway": "gateway as `make up` sets it",
    "gateway-admission-off": "gateway, admission off",
}


def target(part: str, name: str) -> Target:
    for t in TARGETS[part]:
        if t.name == name:
            return t
    raise KeyError(f"{part}: no target {name}")


def gateway_settings(
    t: Target, engine_url: str, max_num_seqs: int, admin_port: int
) -> dict[str, str]:
    """A gateway's settings as ``make up`` gives them (its tokenizer files,
    as many sequences as the engine runs, the engine ordering by priority,
    its KV cache events), its admin port (``/metrics`` there, as make up
    serves them), and the target's own."""
    assert t.gateway is not None, f"{t.name} has no gateway"
    stack = gateway_environment({"ENGINE_MAX_NUM_SEQS": str(max_num_seqs)}, [engine_url])
    settings = {k: v for k, v in stack.items() if k.startswith("GATEWAY_")}
    return {**settings, "GATEWAY_ADMIN_PORT": str(admin_port), **t.gateway}


def layout(result: dict[str, Any]) -> str:
    """How the run laid the processes out (the summary's header)."""
    cpus = result.get("engine_cpus") or "the launcher's default cores"
    rest = result.get("client_cpus") or "any core"
    return (
        f"each engine on CPU {cpus} (as `make up`), the gateways and the client on {rest}"
        " (as `make up` pins its gateways); a fresh gateway for every run"
    )
