"""Loading and unloading a LoRA adapter across the engines, through their
own API (vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``,
served when the engine runs with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``).

Idempotent, so an operator (or a script) may repeat it safely: an engine
that says the adapter is loaded already counts as loaded, one that says it
cannot find an adapter being unloaded as unloaded. Each engine's answer is
reported. After a change the engine's model list is read again at once, so
the adapter is routable (or gone) without waiting for the next refresh.

Which engines: all that are up, or the ``count`` of them with the most free
LoRA slots (where it loads without making another adapter wait), then by
URL, the same choice on every replica.
"""

import asyncio
import json
from dataclasses import dataclass
from typing import Literal

from app.engine.client import EngineClient
from app.engine.monitor import EngineMonitor
from app.request.errors import EngineStatusError, GatewayError

Result = Literal["loaded", "already_loaded", "unloaded", "not_loaded", "failed"]
# What vLLM 0.32 answers where the change is already so.
_ALREADY_LOADED = "has already been loaded"
_NOT_FOUND = "cannot be found"
_TIMEOUT = 60.0


@dataclass(frozen=True)
class EngineAnswer:
    engine: str
    result: Result
    # The engine's words where it failed (or said the change was already so).
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.result != "failed"


def chosen(monitors: list[EngineMonitor], count: int | None) -> list[EngineMonitor]:
    """All of ``monitors``, or the ``count`` with the most free LoRA slots."""
    if count is None:
        return monitors

    def free_slots(monitor: EngineMonitor) -> int:
        lora = monitor.lora
        return 0 if lora is None else lora.slots - len(lora.active)

    return sorted(monitors, key=lambda m: (-free_slots(m), m.url))[:count]


async def load_adapter(
    client: EngineClient, monitors: list[EngineMonitor], name: str, path: str, request_id: str
) -> list[EngineAnswer]:
    body = {"lora_name": name, "lora_path": path}
    return list(
        await asyncio.gather(
            *(_change(client, m, "/v1/load_lora_adapter", body, request_id) for m in monitors)
        )
    )


async def unload_adapter(
    client: EngineClient, monitors: list[EngineMonitor], name: str, request_id: str
) -> list[EngineAnswer]:
    body = {"lora_name": name}
    return list(
        await asyncio.gather(
            *(_change(client, m, "/v1/unload_lora_adapter", body, request_id) for m in monitors)
        )
    )


async def _change(
    client: EngineClient,
    monitor: EngineMonitor,
    path: str,
    body: dict[str, str],
    request_id: str,
) -> EngineAnswer:
    loading = path == "/v1/load_lora_adapter"
    try:
        answer = await client.open(
            monitor.url, path, json.dumps(body).encode(), request_id, stream=False, timeout=_TIMEOUT
        )
        answer.close()
        result: Result = "loaded" if loading else "unloaded"
        detail = None
    except EngineStatusError as error:
        result, detail = _refusal(loading, error), error.message
    except GatewayError as error:
        return EngineAnswer(monitor.label, "failed", error.message)
    if result != "failed":
        await monitor.refresh_models()
    return EngineAnswer(monitor.label, result, detail)


def _refusal(loading: bool, error: EngineStatusError) -> Result:
    """What an engine's refusal means: the change already made, or a failure
    (a 404 without vLLM's words is an engine that does not allow run-time
    changes: its route is not there)."""
    if loading and error.status == 400 and _ALREADY_LOADED in error.message:
        return "already_loaded"
    if not loading and error.status == 404 and _NOT_FOUND in error.message:
        return "not_loaded"
    return "failed"
