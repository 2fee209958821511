"""Prompts for load tests, benchmarks and calibration, drawn from the text the
tiny model's tokenizer was trained on (``deploy/model/corpus.txt``).

Every prompt is different (a counter and a random choice of sentences), as in
real traffic. Where real deployments share text, these do too, so prefix
caching behaves as it would:

- ``chat``: one shared system prompt (cached after the first request), then a
  short question of its own;
- ``rag``: a long shared document (cached), then a varied question — the case
  where prefix caching saves the most;
- ``summary``: a long document of its own to summarise in a few words —
  nothing shared, so every request pays its full prefill;
- ``bulk``: a passage of its own (about 150 words) to rewrite at length —
  the batch work that shares an engine with interactive chat.

This module must not import locust: benchmarks and tests use it in-process.
"""

import itertools
import random
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "deploy" / "model" / "corpus.txt"

SYSTEM = (
    "You are a helpful assistant for a harbour town's visitor centre. Answer briefly and "
    "plainly, and say so when you do not know."
)
QUESTIONS = (
    "What should I know about",
    "Can you explain",
    "Give me a short note on",
    "How would you describe",
    "Why does it matter",
    "Tell me more about",
)

Messages = list[dict[str, Any]]


def _sentences() -> list[str]:
    text = CORPUS.read_text(encoding="utf-8")
    return [s.strip() + "." for s in text.replace("\n", " ").split(". ") if len(s.strip()) > 20]


class PromptFactory:
    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._sentences = _sentences()
        self._counter = itertools.count(1)
        document = self._rng.sample(self._sentences, 12)
        self.shared_document = " ".join(document)

    def _pick(self, count: int) -> str:
        return " ".join(self._rng.choice(self._sentences) for _ in range(count))

    def question(self) -> str:
        words = self._rng.choice(self._sentences).split()
        start = self._rng.randrange(max(1, len(words) - 6))
        topic = " ".join(words[start : start + self._rng.randint(3, 6)]).strip(".,")
        return f"{self._rng.choice(QUESTIONS)} {topic}? (#{next(self._counter)})"

    def chat(self) -> Messages:
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": self.question()},
        ]

    def rag(self) -> Messages:
        return [
            {
                "role": "system",
                "content": f"Answer from this document only.\n\n{self.shared_document}",
            },
            {"role": "user", "content": self.question()},
        ]

    def summary(self, sentences: int = 20) -> Messages:
        document = self._pick(self._rng.randint(sentences // 2, sentences))
        return [
            {
                "role": "user",
                "content": f"Summarise in one sentence (#{next(self._counter)}):\n\n{document}",
            }
        ]

    def bulk(self, words: int = 150) -> Messages:
        """A passage of at least ``words`` words, whole sentences, to rewrite."""
        picked: list[str] = []
        while sum(len(sentence.split()) for sentence in picked) < words:
            picked.append(self._rng.choice(self._sentences))
        passage = " ".join(picked)
        return [
            {
                "role": "user",
                "content": f"Rewrite this for a visitor leaflet (#{next(self._counter)}):\n\n"
                f"{passage}",
            }
        ]

    def completion(self, sentences: int = 3) -> str:
        return f"{self._pick(self._rng.randint(1, sentences))} (#{next(self._counter)})"

    def mixed(self) -> Messages:
        """One of the three chat shapes, for calibration and benchmarks."""
        return self._rng.choice((self.chat, self.rag, self.summary))()
