"""What a request asks of the engine's KV cache, and refusing up front what
can never fit.

A prompt given as token ids (or counted) is counted exactly; a text
prompt's tokens are estimated (``PromptTokenEstimator``). The estimate is good on average but can
be wrong for odd text (a long run of one character is a few tokens per many
characters), so a text prompt is only *certainly* as long as
``CERTAIN_SHARE`` of its estimate: requests are refused on that lower bound,
and near the limit the engine decides, as it would without the gateway.
"""

import math
from dataclasses import dataclass

from app.admission.estimate import PromptTokenEstimator
from app.request.errors import TooLong
from app.request.routes import ROUTES
from app.request.validation import CompletionJob, Prompt

# A text prompt has at least this share of its estimated tokens.
CERTAIN_SHARE = 0.5


@dataclass(frozen=True)
class Demand:
    """One request's worst case: ``seq_tokens`` holds prompt + output tokens
    of the sequence of each prompt (no output for an embedding); each runs
    ``n`` times. A continued response's earlier turns count as prompt."""

    seq_tokens: tuple[int, ...]
    n: int
    prompt_tokens: int

    @property
    def tokens(self) -> int:
        return sum(self.seq_tokens) * self.n

    @property
    def sequences(self) -> int:
        return len(self.seq_tokens) * self.n

    @property
    def worst_usage(self) -> int:
        """The most tokens the engine's ``usage`` can report for it: each
        prompt once, every output token of every sequence."""
        return self.prompt_tokens + (sum(self.seq_tokens) - self.prompt_tokens) * self.n


def demand_of(job: CompletionJob, estimator: PromptTokenEstimator) -> Demand:
    seq_tokens = []
    prompt_total = 0
    for prompt in job.prompts:
        tokens = _estimate(job, prompt, estimator)
        output = 0
        if job.generates:
            output = job.max_tokens or max(1, (job.max_model_len or tokens + 1) - tokens)
        seq_tokens.append(prompt.encoder + tokens + output)
        prompt_total += prompt.encoder + tokens
    return Demand(seq_tokens=tuple(seq_tokens), n=job.n, prompt_tokens=prompt_total)


def refuse_if_it_can_never_fit(
    job: CompletionJob,
    estimator: PromptTokenEstimator,
    caches: list[tuple[int, int]],
) -> None:
    """Raise ``TooLong`` (a 400) if the request certainly exceeds the model's
    context, or if its smallest possible demand — each prompt plus one
    token, for each of its sequences — exceeds the whole KV cache of every
    engine that serves its model (``caches``: blocks and block size of each
    engine whose cache is known)."""
    certain = [_certain(job, prompt, estimator) for prompt in job.prompts]
    limit = job.max_model_len
    longest = max(certain)
    if limit is not None and longest + job.generates > limit:
        about = "" if all(p.ids for p in job.prompts) else "at least "
        raise TooLong(
            f"the prompt is {about}{longest} tokens; the model's context is {limit} tokens"
            " (prompt plus at least one generated token)",
            param=ROUTES[job.route].prompt_param,
        )
    if not caches:
        return

    def smallest(block_size: int) -> int:
        # An encoder's positions are cached in blocks of their own.
        return (
            sum(
                math.ceil((tokens + job.generates) / block_size)
                + math.ceil(prompt.encoder / block_size)
                for tokens, prompt in zip(certain, job.prompts, strict=True)
            )
            * job.n
        )

    if all(smallest(block_size) > blocks for blocks, block_size in caches):
        blocks, block_size = max(caches, key=lambda cache: cache[0] * cache[1])
        raise TooLong(
            f"the request needs at least {smallest(block_size)} KV blocks of {block_size}"
            f" tokens ({job.sequences} sequence(s)); the largest engine's whole cache is"
            f" {blocks} blocks",
            param="n" if job.n > 1 else None,
        )


def _estimate(job: CompletionJob, prompt: Prompt, estimator: PromptTokenEstimator) -> int:
    if prompt.ids:
        return job.history_tokens + prompt.counted
    return job.history_tokens + estimator.estimate(job.route, len(prompt.text))


def _certain(job: CompletionJob, prompt: Prompt, estimator: PromptTokenEstimator) -> int:
    if prompt.ids:
        return job.history_tokens + prompt.counted
    estimated = estimator.estimate(job.route, len(prompt.text))
    return job.history_tokens + math.floor(estimated * CERTAIN_SHARE)
