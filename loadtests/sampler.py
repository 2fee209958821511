"""Sampling the engine's (and the gateway's) ``/metrics`` once a second during
a run, so a report has real engine data even where no Prometheus runs."""

import json
import threading
import time
from pathlib import Path

import httpx

from app.observe.promtext import parse, total

ENGINE = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
)
GATEWAY = (
    "gateway_queue_depth",
    "gateway_requests_in_flight",
    "gateway_rejections_total",
    "gateway_kv_tokens_budget",
    "gateway_kv_tokens_capacity",
)


def read(client: httpx.Client, url: str, names: tuple[str, ...]) -> dict[str, float]:
    samples = parse(client.get(f"{url}/metrics", timeout=5).text, names)
    return {name: total(samples, name) for name in names}


class Sampler(threading.Thread):
    def __init__(self, engine_url: str, gateway_url: str | None, out: Path) -> None:
        super().__init__(daemon=True)
        self._engine = engine_url
        self._gateway = gateway_url
        self._out = out
        self._stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client() as client, self._out.open("a", encoding="utf-8") as out:
            while not self._stop_event.is_set():
                sample: dict[str, float] = {"t": time.time()}
                try:
                    sample.update(read(client, self._engine, ENGINE))
                    if self._gateway:
                        sample.update(read(client, self._gateway, GATEWAY))
                except httpx.HTTPError:
                    pass
                else:
                    out.write(json.dumps(sample) + "\n")
                self._stop_event.wait(1.0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
