"""Estimating a model's weights from its config.json
(``app.capacity.weights``), against the published parameter counts."""

import pytest

from app.capacity import read_model_config
from app.capacity.weights import estimate_parameters
from tests.support.model_configs import CONFIGS


def test_weights_estimates_match_published_parameter_counts() -> None:
    llama = estimate_parameters(read_model_config(CONFIGS / "llama-3-8b.json"))
    qwen = estimate_parameters(read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json"))
    assert llama == pytest.approx(8.03e9, rel=0.01)
    assert estimate_parameters(read_model_config(CONFIGS / "llama-2-7b.json")) == pytest.approx(
        6.74e9, rel=0.01
    )
    assert qwen == pytest.approx(0.494e9, rel=0.01)
