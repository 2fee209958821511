"""Classification, and score and rerank on a cross-encoder, through the
gateway against a real classifier engine: the tiny model with a one-label
``score`` head (``deploy/model/build_tiny_classifier.py``; ``make setup``
builds it), run by vLLM's pooling runner as a classifier under its own
served name. Plain HTTP: the ``openai`` SDK has no call for these routes.

On a classifier with one label, vLLM's score and rerank run each query and
document together as one sequence (a cross-encoder): what the gateway
reserves for each pair. This module starts an engine of its own (another
model from the session engine's and the embedding engine's), with the
session engine's small cache of 24 blocks."""

from collections.abc import Iterator

import httpx
import pytest

from deploy.local import ROOT
from tests.support.disconnects import leave_while_queued_and_running
from tests.support.engines import Engine
from tests.support.gateways import Gateway, access_line
from tests.support.pooling import KEY, one_at_a_time, pooling_engine

CLASSIFIER = "tiny-classifier"
MODEL_DIR = ROOT / ".models" / "tiny-classifier"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with pooling_engine(tmp_path_factory, "classifier", CLASSIFIER, "classify", MODEL_DIR) as e:
        yield e


@pytest.fixture(scope="module")
def keyed(classifier: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with one_at_a_time(tmp_path_factory, classifier) as gateway:
        yield gateway


async def post(gateway: Gateway, path: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        return await http.post(path, json=body, headers={"authorization": f"Bearer {KEY}"})


async def test_a_classification_is_answered_and_pays_its_inputs(keyed: Gateway) -> None:
    reply = await post(
        keyed, "/classify", {"model": CLASSIFIER, "input": ["first", "second 你好 🌍"]}
    )
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert len(answer["data"]) == 2
    # One label: each input's one probability.
    assert all(len(item["probs"]) == 1 for item in answer["data"])
    prompt = answer["usage"]["prompt_tokens"]
    assert prompt > 0
    line = access_line(keyed, reply.headers["x-request-id"])
    assert (line["route"], line["outcome"]) == ("classify", "completed")
    assert line["charged_tokens"] == line["used_tokens"] == prompt
    assert not line["completion_tokens"]


# Score and rerank on the cross-encoder: where, a body, and the route's name.
PAIRS = [
    ("/score", {"model": CLASSIFIER, "text_1": "a query", "text_2": ["one", "two"]}, "score"),
    ("/v1/score", {"model": CLASSIFIER, "data_1": ["q1", "q2"], "data_2": ["a", "b"]}, "score"),
    ("/rerank", {"model": CLASSIFIER, "query": "a query", "documents": ["x", "y", "z"]}, "rerank"),
]


@pytest.mark.parametrize(("path", "body", "route"), PAIRS, ids=[path for path, _, _ in PAIRS])
async def test_a_cross_encoder_scores_each_pair_as_reserved(
    keyed: Gateway, path: str, body: dict[str, object], route: str
) -> None:
    reply = await post(keyed, path, body)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    pairs = answer.get("data") or answer.get("results")
    assert pairs
    prompt = answer["usage"]["prompt_tokens"]
    line = access_line(keyed, reply.headers["x-request-id"])
    assert (line["route"], line["outcome"]) == (route, "completed")
    # Each pair one sequence on a cross-encoder, as the gateway reserved it.
    assert line["used_tokens"] == prompt
    assert line["charged_tokens"] >= prompt


async def test_a_classification_of_the_wrong_shape_is_refused_as_openai_says(
    keyed: Gateway,
) -> None:
    reply = await post(
        keyed, "/classify", {"model": CLASSIFIER, "messages": [{"role": "user", "content": "x"}]}
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "messages"


LEAVING = [
    ("/classify", {"model": CLASSIFIER, "input": "stalled"}),
    ("/rerank", {"model": CLASSIFIER, "query": "stalled", "documents": ["one"]}),
]


@pytest.mark.parametrize(("path", "body"), LEAVING, ids=[path for path, _ in LEAVING])
async def test_a_client_that_leaves_while_queued_or_running_is_cancelled_there(
    classifier: Engine, keyed: Gateway, path: str, body: dict[str, object]
) -> None:
    await leave_while_queued_and_running(classifier, keyed, path, body, KEY)
