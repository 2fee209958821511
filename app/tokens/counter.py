"""Counting a request's prompt tokens before it is admitted or charged.

What a request reserves in the KV cache and what it is charged against its
key's token limit start from its prompt's tokens. Estimated from the text's
length, a prompt denser in tokens than in characters (emoji, CJK, code) is
under-counted several times over, and a client who knows it gets more than
its limit. So prompts are counted with the model's own tokenizer and chat
template, from the source ``GATEWAY_PROMPT_TOKENS`` names:

- ``engine``: the engine's ``/tokenize`` (``app.tokens.engine``), one round
  trip to an engine that serves the model, always right;
- ``tokenizer``: the model's tokenizer files in the gateway
  (``app.tokens.local``, ``GATEWAY_TOKENIZER_DIR``), no round trip; what the
  files cannot render exactly (``app.tokens.template``) goes to the engine;
- ``estimate``: the length estimate alone (``app.admission.estimate``);
- ``auto`` (the default): the files when ``GATEWAY_TOKENIZER_DIR`` names
  them, else the engine.

A prompt given as token ids is counted already. A Responses call is counted
as the chat messages vLLM renders its input into (``app.bodies.responses``);
one whose input is not plain messages is estimated. When a source fails (the
engine is slow, unreachable or has no such route), the prompt is estimated
as before, and ``gateway_prompts_counted_total{source="estimate"}`` says so;
the request is not failed for it. When the engine refuses the request
(its template or validation rejects it, a 4xx) the request gets that answer:
the completion would get the same.
"""

import logging
from dataclasses import replace
from typing import Any

from prometheus_client import Counter

from app.engine.client import EngineClient
from app.engine.pool import EnginePool
from app.request.errors import EngineStatusError, GatewayError, InvalidRequest
from app.request.routes import ROUTES
from app.request.validation import CompletionJob, Prompt
from app.settings import Settings
from app.tokens.engine import EngineTokenize
from app.tokens.local import ModelTokenizer, TemplateRefused, TokenizerFiles

log = logging.getLogger("gateway")


def counting_note(settings: Settings) -> str | None:
    """What an operator should know at start-up of how prompts are counted:
    counted by the engine, each request first pays a round trip to the
    engine's API server (which, on a CPU engine, shares the engine's cores:
    docs/benchmarks.md, "Counting prompts: the engine, the files, the
    estimate"). None when nothing needs saying."""
    if settings.prompt_count_source != "engine":
        return None
    return (
        "prompts are counted by the engines' /tokenize: one round trip per request to the"
        " engine's API server before it is admitted; give the gateway the model's tokenizer"
        " files (GATEWAY_TOKENIZER_DIR) to count them itself"
    )


class PromptCounter:
    def __init__(
        self, settings: Settings, engines: EnginePool, client: EngineClient, counted: Counter
    ) -> None:
        self._source = settings.prompt_count_source
        self._files = (
            TokenizerFiles(settings.tokenizer_dir)
            if self._source == "tokenizer" and settings.tokenizer_dir is not None
            else None
        )
        self._engine = EngineTokenize(client, settings.prompt_count_timeout)
        self._engines = engines
        self._counted = counted
        self._failing = False
        if self._files is not None:
            engines.on_change(self._prepare)

    def _prepare(self, url: str) -> None:
        """Read the tokenizers of the models the engines serve, ahead of
        their first requests: told as an engine comes up, this runs before
        its readiness can be answered."""
        assert self._files is not None
        for engine in self._engines.up_engines():
            for model in engine.model_names:
                self._files.prepare(model)

    async def count(
        self, job: CompletionJob, body: dict[str, Any], request_id: str
    ) -> CompletionJob:
        """``job`` with every prompt's token ids, where a source could count
        them (else left to the estimate)."""
        if all(prompt.ids for prompt in job.prompts):
            return job
        counted_as = ROUTES[job.route].counted_as
        if counted_as == "never":
            self._counted.labels("estimate").inc(len(job.prompts))
            return job
        if counted_as == "converted_chat":
            if job.tokenize_body is None:
                self._counted.labels("estimate").inc()
                return job
            body = job.tokenize_body
        if self._source == "estimate":
            self._counted.labels("estimate").inc(sum(1 for p in job.prompts if not p.ids))
            return job
        local = self._files.for_model(job.model) if self._files is not None else None
        prompts = []
        for index, prompt in enumerate(job.prompts):
            # A batch of conversations: each counted as the chat it is alone.
            own = {**body, "messages": body["messages"][index]} if counted_as == "chats" else body
            ids = prompt.ids or await self._count_one(job, prompt, own, local, request_id)
            prompts.append(replace(prompt, ids=ids) if ids else prompt)
        return replace(job, prompts=tuple(prompts))

    async def _count_one(
        self,
        job: CompletionJob,
        prompt: Prompt,
        body: dict[str, Any],
        local: ModelTokenizer | None,
        request_id: str,
    ) -> tuple[int, ...]:
        chat = ROUTES[job.route].counted_as != "text"
        # vLLM's defaults: a completion's prompt gets the tokenizer's special
        # tokens (BOS), a rendered chat only what its template writes.
        special = bool(body.get("add_special_tokens", not chat))
        if local is not None and (not chat or local.renders(body)):
            try:
                ids = await (
                    local.chat(body)
                    if chat
                    else local.text(prompt.text, add_special_tokens=special)
                )
            except TemplateRefused as refused:
                raise InvalidRequest(
                    f"the model's chat template refused the request: {refused}"
                ) from None
            self._counted.labels("tokenizer").inc()
            return ids
        engine = self._engines.engine_for(job.model)
        if engine is not None:
            try:
                if chat:
                    ids = await self._engine.chat(engine, job.model, body, request_id)
                else:
                    ids = await self._engine.text(
                        engine, job.model, prompt.text, special, request_id
                    )
            except EngineStatusError as refused:
                if refused.outcome == "rejected" and refused.status != 404:
                    raise  # the engine refuses this request: so would its completion
                self._failed(engine, refused)
            except GatewayError as failed:
                self._failed(engine, failed)
            else:
                if self._failing:
                    self._failing = False
                    log.info("prompts are counted by the engines' /tokenize again")
                self._counted.labels("engine").inc()
                return ids
        self._counted.labels("estimate").inc()
        return ()

    def _failed(self, engine: str, error: GatewayError) -> None:
        if not self._failing:
            self._failing = True
            log.warning(
                "cannot count prompts with %s/tokenize (%s): estimating them until it answers",
                engine,
                error.message,
            )
