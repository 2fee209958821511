"""What the benchmark's users send: their prompts and bodies, and how a
request says its class, its objective and its tenant to each kind of target.

A request's class travels the way each target reads it: to a gateway as
``X-Priority`` (the gateway then hands the class's priority to the engine),
to vLLM direct as the body's ``priority`` (lower runs first), and to an
engine that orders by arrival not at all (vLLM refuses a priority there).
Everything else is the same for every target, so that what differs between
them is what stands in front of the engine."""

import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from app.admission.classes import default_table
from loadtests.prompts import CORPUS, PromptFactory

# How a target learns a request's class: the gateway's header, vLLM's body
# field, or nothing (an engine that runs first come, first served).
Marking = Literal["header", "body", "none"]
OBJECTIVE_HEADER = "x-slo-ttft-ms"

# The priority each class carries into the engine, from the gateway's own
# class table (the anchors send what the gateway would).
ENGINE_PRIORITY = {name: row.engine_priority for name, row in default_table().items()}


@dataclass(frozen=True)
class Kind:
    """One kind of request in a part: its label in the tables, its class,
    the TTFT objective it is judged by (seconds), whether it names that
    objective in a header, and the tenant it is sent for."""

    label: str
    priority: str
    objective: float
    objective_header: bool = False
    tenant: str | None = None

    def marks(self, marking: Marking) -> tuple[dict[str, str], dict[str, Any]]:
        """The headers and the body fields that say this kind to a target."""
        headers: dict[str, str] = {}
        fields: dict[str, Any] = {}
        if marking == "header":
            headers["X-Priority"] = self.priority
        elif marking == "body" and ENGINE_PRIORITY[self.priority] != 0:
            fields["priority"] = ENGINE_PRIORITY[self.priority]
        if self.objective_header:
            # Whole milliseconds (the gateway refuses anything else with a 400).
            headers[OBJECTIVE_HEADER] = str(round(self.objective * 1000))
        if self.tenant is not None:
            headers["X-Tenant-Id"] = self.tenant
        return headers, fields


def objectives_of(kinds: list[Kind]) -> dict[str, float]:
    return {k.label: k.objective for k in kinds}


def longest_objective(kinds: list[Kind]) -> float:
    """The drain a window ends with: every request sent in time has had its
    whole objective."""
    return max(k.objective for k in kinds)


def corpus_words() -> list[str]:
    return CORPUS.read_text(encoding="utf-8").split()


@dataclass
class Prompts:
    """Chat questions (a shared system prompt and a short question of their
    own) and bulk documents: a fixed number of words from the corpus each,
    from a random place, behind a serial number, so that every bulk prompt
    has the same length and none shares a cached prefix with another (each
    holds its own KV blocks, as distinct documents would)."""

    seed: int = 0
    words: list[str] = field(default_factory=corpus_words)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._chat = PromptFactory(seed=self.seed)
        self._serial = itertools.count(1)

    def chat(self) -> list[dict[str, Any]]:
        return self._chat.chat()

    def bulk(self, words: int) -> list[dict[str, Any]]:
        start = self._rng.randrange(len(self.words))
        text = [self.words[(start + i) % len(self.words)] for i in range(words)]
        return [
            {
                "role": "user",
                "content": f"Document {next(self._serial)}. Summarise it:\n\n" + " ".join(text),
            }
        ]


def body(model: str, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    """A completion of exactly ``max_tokens`` (``ignore_eos``): lengths the
    benchmark chooses, not the tiny model's random end of sequence."""
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "ignore_eos": True}
