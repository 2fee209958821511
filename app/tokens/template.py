"""A model's chat template, rendered as vLLM renders it.

vLLM renders a chat request with the template of the model's tokenizer files
through transformers (``apply_chat_template``): a sandboxed Jinja environment
with ``trim_blocks``, ``lstrip_blocks`` and loop controls, a ``tojson`` that
keeps non-ASCII text, ``raise_exception`` and ``strftime_now``; the tokenizer's
special tokens (``bos_token``, ``eos_token``, …) and the request's
``chat_template_kwargs`` as variables. Before that, vLLM turns each message's
text parts into one string joined by newlines, for templates that print a
message's content as a string.

Only what renders exactly as vLLM would is rendered here (``renders``):
anything else — images or audio, tools, a template of the request's own,
continuing the final message, a template that walks content parts, the
``developer`` role that vLLM rewrites for templates without it — is the
engine's to count (``app.tokens.counter``). A wrong count here would be a
wrong reservation and a wrong charge; a round trip is only slower.
"""

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Fields of a chat request that change the rendered prompt in ways this
# module does not reproduce.
_ENGINE_ONLY_FIELDS = ("tools", "chat_template", "continue_final_message", "documents")
# Message fields the template sees besides role and content (a tool call's
# arguments are rewritten by vLLM before rendering: not reproduced).
_PLAIN_ROLES = frozenset({"system", "user", "assistant"})
# A template that iterates over a message's content takes content parts
# (vLLM's "openai" content format), not one string.
_WALKS_CONTENT = re.compile(r"""for\s+\w+\s+in\s+\w+(?:\[['"]content['"]\]|\.content)""")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        self.source = source
        self._special = special_tokens
        self._string_content = not _WALKS_CONTENT.search(source)

    def renders(self, body: dict[str, Any]) -> bool:
        """Whether this request renders here exactly as in vLLM."""
        if not self._string_content or any(body.get(f) for f in _ENGINE_ONLY_FIELDS):
            return False
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            return False
        messages = body.get("messages")
        return isinstance(messages, list) and all(_plain(m) for m in messages)

    def render(self, body: dict[str, Any]) -> str:
        """The prompt text of a chat request that ``renders``; raises
        ``jinja2.TemplateError`` where the template refuses it."""
        conversation = [
            {**message, "content": _content_text(message.get("content"))}
            for message in body["messages"]
        ]
        variables: dict[str, Any] = {
            **self._special,
            **(body.get("chat_template_kwargs") or {}),
            "messages": conversation,
            "tools": None,
            "documents": None,
            "add_generation_prompt": body.get("add_generation_prompt", True),
        }
        return _compiled(self.source).render(**variables)


def _plain(message: Any) -> bool:
    """A message of a plain role whose content is text only."""
    if not isinstance(message, dict) or message.get("role") not in _PLAIN_ROLES:
        return False
    if set(message) - {"role", "content", "name"}:
        return False
    content = message.get("content")
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    )


def _content_text(content: Any) -> str:
    """A message's content as vLLM gives it to a string-content template."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content)
