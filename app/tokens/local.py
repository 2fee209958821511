"""Counting a prompt with the model's own tokenizer files, in the gateway.

The files are the ones vLLM loads: ``tokenizer.json`` (read by the
``tokenizers`` library, the same fast tokenizer transformers wraps),
``tokenizer_config.json`` for the special tokens, and the chat template
(``chat_template.jinja``, or ``chat_template`` in the config). They are given
to the gateway as a directory (``GATEWAY_TOKENIZER_DIR``): the model's own
directory, one holding a directory per served model name, or a Hugging Face
cache (the engine's downloads, mounted), where a served model named by its
hub id is found.

Counting runs in the event loop for short prompts (tens of microseconds)
and in a worker thread for long ones, so a long prompt does not stall every
stream the loop relays.
"""

import json
import logging
from pathlib import Path
from typing import Any

import anyio.to_thread
import jinja2
from tokenizers import Tokenizer

from app.tokens.template import ChatTemplate

log = logging.getLogger("gateway")

# Characters above which encoding leaves the event loop.
_THREAD_CHARS = 8192
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token")


class TemplateRefused(Exception):
    """The chat template raised on the request (vLLM answers it 400)."""


class ModelTokenizer:
    """One model's tokenizer and chat template."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate | None) -> None:
        self._tokenizer = tokenizer
        self.template = template

    @classmethod
    def load(cls, directory: Path) -> "ModelTokenizer":
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_file = directory / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_file.read_text()) if config_file.exists() else {}
        special = {name: _token_text(config.get(name)) for name in _SPECIAL}
        template_file = directory / "chat_template.jinja"
        source = (
            template_file.read_text() if template_file.exists() else config.get("chat_template")
        )
        template = (
            ChatTemplate(source, {k: v for k, v in special.items() if v is not None})
            if isinstance(source, str)
            else None
        )
        return cls(tokenizer, template)

    def renders(self, body: dict[str, Any]) -> bool:
        return self.template is not None and self.template.renders(body)

    async def chat(self, body: dict[str, Any]) -> tuple[int, ...]:
        """The token ids of a chat request that ``renders`` here."""
        assert self.template is not None
        try:
            text = self.template.render(body)
        except jinja2.TemplateError as refused:
            raise TemplateRefused(str(refused)) from refused
        # vLLM adds no special tokens of its own to a rendered chat unless asked.
        return await self.text(text, add_special_tokens=bool(body.get("add_special_tokens")))

    async def text(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        if len(text) > _THREAD_CHARS:
            encoding = await anyio.to_thread.run_sync(
                lambda: self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
            )
        else:
            encoding = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return tuple(encoding.ids)


class TokenizerFiles:
    """The tokenizers under ``GATEWAY_TOKENIZER_DIR``: each served name
    looked for once, each directory's files read once — a model and its LoRA
    adapters, or every name served from the model's own directory, share
    one read.

    A large model's ``tokenizer.json`` (a 128k-token vocabulary) takes a few
    hundred milliseconds to read, all of it holding the GIL (the
    ``tokenizers`` library does not release it, so a worker thread would
    stall the event loop as long). So the read is done ahead: ``prepare``
    when an engine names the model, not at the model's first request."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._models: dict[str, ModelTokenizer | None] = {}
        self._directories: dict[Path, ModelTokenizer | None] = {}

    def prepare(self, model: str) -> None:
        """Read ``model``'s tokenizer now, unless it was read already."""
        self.for_model(model)

    def for_model(self, model: str) -> ModelTokenizer | None:
        """The model's tokenizer, or None if its files are not here (said once)."""
        if model not in self._models:
            directory = self._find(model)
            if directory is None:
                log.warning(
                    "no tokenizer.json for model %r in %s or %s: its prompts are counted by"
                    " the engine",
                    model,
                    self._root / model,
                    self._root,
                )
                self._models[model] = None
            else:
                if directory not in self._directories:
                    self._directories[directory] = _read(directory)
                self._models[model] = self._directories[directory]
        return self._models[model]

    def _find(self, model: str) -> Path | None:
        for directory in (self._root / model, self._root, *self._hub_snapshots(model)):
            if (directory / "tokenizer.json").is_file():
                return directory
        return None

    def _hub_snapshots(self, model: str) -> list[Path]:
        """The model's snapshots in a Hugging Face cache at the root (the
        engine's download cache, mounted: ``models--org--name/snapshots``,
        or under ``hub/``), the newest first."""
        name = "models--" + model.replace("/", "--")
        found = [
            snapshot
            for cache in (self._root, self._root / "hub")
            for snapshot in (cache / name / "snapshots").glob("*")
            if snapshot.is_dir()
        ]
        return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)


def _read(directory: Path) -> ModelTokenizer | None:
    try:
        return ModelTokenizer.load(directory)
    except Exception as exc:  # tokenizers raises plain Exceptions
        log.warning("cannot load the tokenizer in %s: %s", directory, exc)
        return None


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string, or an
    object with its ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None
