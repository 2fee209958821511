"""Prompt token estimates, calibrated from what the engine reports."""

import httpx

from app.admission.estimate import PromptTokenEstimator
from loadtests.prompts import Messages, PromptFactory
from tests.support.engines import MODEL, Engine


def test_before_calibration_a_default_ratio_is_used() -> None:
    estimator = PromptTokenEstimator()
    assert estimator.estimate("completions", 400) == 101
    assert estimator.estimate("chat", 400) > estimator.estimate("completions", 400)


def test_the_fit_learns_ratio_and_template_overhead() -> None:
    estimator = PromptTokenEstimator()
    for chars in range(100, 2100, 100):
        estimator.observe("chat", chars, 30 + chars // 3)
    assert abs(estimator.estimate("chat", 1500) - 530) <= 5
    assert abs(estimator.estimate("chat", 150) - 80) <= 5


def test_prompts_of_one_length_give_a_ratio() -> None:
    estimator = PromptTokenEstimator()
    for _ in range(20):
        estimator.observe("completions", 300, 100)
    assert estimator.estimate("completions", 300) == 100


def chars_of(messages: Messages) -> int:
    return len("\n".join(str(m["content"]) for m in messages))


def prompt_tokens(http: httpx.Client, messages: Messages) -> int:
    reply = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 1}
    )
    tokens: int = reply.json()["usage"]["prompt_tokens"]
    return tokens


def test_estimates_stay_within_ten_percent_on_the_load_test_corpus(engine: Engine) -> None:
    """Calibrate on 30 load-test prompts, then estimate 30 others: the error
    against the engine's ``usage.prompt_tokens`` stays within 10%."""
    factory = PromptFactory(seed=7)
    estimator = PromptTokenEstimator()
    with httpx.Client(base_url=engine.url, timeout=60) as http:
        for _ in range(30):
            messages = factory.mixed()
            estimator.observe("chat", chars_of(messages), prompt_tokens(http, messages))
        errors = []
        for _ in range(30):
            messages = factory.mixed()
            actual = prompt_tokens(http, messages)
            estimate = estimator.estimate("chat", chars_of(messages))
            errors.append(abs(estimate - actual) / actual)
    errors.sort()
    print(f"\nprompt estimate error: mean {sum(errors) / len(errors):.1%}, max {errors[-1]:.1%}")
    assert sum(errors) / len(errors) <= 0.10
    assert errors[int(len(errors) * 0.9)] <= 0.10
