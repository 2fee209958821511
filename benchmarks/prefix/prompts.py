"""The prefix benchmark's requests: long shared documents and short
questions, as a chat or as the token ids of that chat."""

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Client
from loadtests.prompts import CORPUS, PromptFactory

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
# How many questions a run draws from (tokenized before it starts).
QUESTIONS = 256


class Documents:
    """Long documents drawn from the tiny model's corpus (a seed each)."""

    def __init__(self, count: int, chars: int, seed: int) -> None:
        text = CORPUS.read_text(encoding="utf-8").replace("\n", " ")
        sentences = [s.strip() + "." for s in text.split(". ") if len(s.strip()) > 20]
        rng = random.Random(seed)
        self.docs = []
        for _ in range(count):
            parts: list[str] = []
            while sum(len(p) + 1 for p in parts) < chars:
                parts.append(rng.choice(sentences))
            self.docs.append(" ".join(parts))

    @staticmethod
    def system(doc: str) -> str:
        return f"Answer from this document only.\n\n{doc}"


def chat_text(role: str, content: str) -> str:
    """One message as the tiny model's chat template renders it."""
    return f"<|{role}|>{content}<|end|>\n"


@dataclass
class Request:
    """One request's body and path, and its prompt's characters."""

    path: str
    body: dict[str, Any]
    chars: int


class Prompts:
    """A run's requests: document ``doc`` and a question drawn at random. As
    ``ids``, each is the token ids of the chat (the documents and questions
    tokenized apart by the engine — the template's markers split them — and
    joined); as ``chat``, the chat itself."""

    def __init__(self, form: str, docs: Documents, model: str, seed: int) -> None:
        self.form = form
        self.docs = docs
        self.model = model
        self._rng = random.Random(seed)
        factory = PromptFactory(seed=seed)
        self.questions = [factory.question() for _ in range(QUESTIONS)]
        self._doc_ids: list[list[int]] = []
        self._question_ids: list[list[int]] = []

    async def tokenize(self, engine: Client) -> None:
        """Token ids of every document and question (``ids`` prompts)."""
        if self.form != "ids":
            return
        system = [chat_text("system", Documents.system(d)) for d in self.docs.docs]
        asks = [chat_text("user", q) + "<|assistant|>" for q in self.questions]
        gate = asyncio.Semaphore(8)

        async def ids(text: str) -> list[int]:
            async with gate:
                body = {"model": self.model, "prompt": text, "add_special_tokens": False}
                async with engine.session.post(f"{engine.base_url}/tokenize", json=body) as r:
                    r.raise_for_status()
                    tokens: list[int] = (await r.json())["tokens"]
                    return tokens

        self._doc_ids = list(await asyncio.gather(*(ids(t) for t in system)))
        self._question_ids = list(await asyncio.gather(*(ids(t) for t in asks)))

    def request(self, doc: int, max_tokens: int) -> Request:
        k = self._rng.randrange(len(self.questions))
        system = Documents.system(self.docs.docs[doc])
        question = self.questions[k]
        chars = len(system) + 1 + len(question)
        common = {"model": self.model, "max_tokens": max_tokens, "ignore_eos": True}
        if self.form == "ids":
            prompt = self._doc_ids[doc] + self._question_ids[k]
            return Request(COMPLETIONS, {**common, "prompt": prompt}, chars)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        return Request(CHAT, {**common, "messages": messages}, chars)
