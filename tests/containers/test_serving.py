"""What a user of the CPU compose stack sees through the published gateway
port, with the official OpenAI SDK."""

import time

import httpx
import openai
import pytest

from app.observe.promtext import parse, total
from tests.containers import podman
from tests.containers.compose import ComposeProject
from tests.containers.metrics import FETCH, engines_total
from tests.support.engines import engine_idle
from tests.support.wait import wait_until

# The first test also waits for the stack to come up (see conftest.HEALTHY_WITHIN),
# the last one for it to go down.
pytestmark = pytest.mark.timeout(1800)

IDLE_WITHIN = 30.0


def client(stack: ComposeProject, gateway: str) -> openai.OpenAI:
    port = stack.gateway_port(gateway)
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120)


def served_model(sdk: openai.OpenAI) -> tuple[str, int]:
    """The served model's name and context length, as the engine reports
    them through the gateway."""
    model = sdk.models.list().data[0]
    context: int = getattr(model, "max_model_len", None) or 2048
    return model.id, context


def engines_idle(stack: ComposeProject) -> bool:
    """Every engine of the stack idle: their gauges summed, as one engine's."""
    return engine_idle(lambda name: engines_total(stack, name))


def test_a_streamed_chat_completion_through_every_gateway(stack: ComposeProject) -> None:
    gateways = stack.gateways()
    assert gateways, "no gateway in the compose configuration"
    for gateway in gateways:
        sdk = client(stack, gateway)
        model, _ = served_model(sdk)
        stream = sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me about the river."}],
            max_tokens=24,
            stream=True,
            # The random-weight model may end at its first token otherwise.
            extra_body={"ignore_eos": True},
        )
        text = ""
        finish = None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        assert text, f"{gateway}: no text streamed"
        assert finish in ("length", "stop"), f"{gateway}: stream ended without a finish reason"
        # Its prompt counted by the gateway itself, with the engine's own
        # tokenizer files (the model volume both read).
        for container in stack.containers(gateway):
            exposed = podman.exec_in(
                container,
                "python",
                "-c",
                FETCH,
                f"http://127.0.0.1:{stack.metrics_port(gateway)}/metrics",
            )
            samples = parse(exposed, names=["gateway_prompts_counted_total"])
            counted = total(samples, "gateway_prompts_counted_total", {"source": "tokenizer"})
            assert counted >= 1, f"{container}: prompts not counted with the model's files"


def test_a_client_leaving_mid_stream_frees_the_engine(stack: ComposeProject) -> None:
    gateway = stack.gateways()[0]
    sdk = client(stack, gateway)
    model, context = served_model(sdk)
    assert engines_idle(stack)
    before = engines_total(stack, "vllm:generation_tokens_total")
    # As long an answer as the model's context allows: seconds of work that
    # only a working cancellation cuts short.
    max_tokens = context - 64
    stream = sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story."}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = 0
    for chunk in stream:
        chunks += bool(chunk.choices and chunk.choices[0].delta.content)
        if chunks >= 5:
            break
    stream.close()
    left = time.monotonic()

    # Each check scrapes every engine container: not too often.
    idle = wait_until(lambda: engines_idle(stack), timeout=IDLE_WITHIN, interval=0.2)
    assert idle, "the engine kept working after the client left"
    idle_after = time.monotonic() - left
    generated = engines_total(stack, "vllm:generation_tokens_total") - before
    print(f"\ndisconnect: engine idle {idle_after:.1f} s after, {generated:.0f} tokens generated")
    assert 0 < generated < max_tokens, f"{generated:.0f} of {max_tokens} tokens generated"


def test_services_built_from_the_project_run_as_their_own_user(stack: ComposeProject) -> None:
    built = [name for name in stack.runnable() if stack.image_built_here(name)]
    assert set(stack.gateways()) <= set(built)
    for service in built:
        for container in stack.containers(service):
            image_user = podman.inspect(container)["Config"].get("User", "")
            assert image_user, f"{service}: the image names no user"
            # The server itself (PID 1), not just what `exec` would run as.
            status = podman.exec_in(container, "cat", "/proc/1/status")
            uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
            assert uid != "0", f"{service} runs as root"
            assert uid == image_user.split(":")[0], f"{service}: uid {uid}, image user {image_user}"


def test_the_gateway_reports_ready_on_the_published_port(stack: ComposeProject) -> None:
    for gateway in stack.gateways():
        port = stack.gateway_port(gateway)
        response = httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=10)
        assert response.status_code == 200, f"{gateway}: {response.text}"
