"""``python -m app.capacity``: the planner's command line
(``app.capacity.__main__``), its figures as text and JSON, and its errors."""

import json
import math

import pytest

from app.capacity.__main__ import main
from app.capacity.plan import GIB
from tests.support.model_configs import CONFIGS


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(CONFIGS / "llama-3-8b.json")
    args = ["--config", config, "--kv-cache-gib", "60", "--max-model-len", "8192"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "KV per token: 131,072 bytes" in out
    assert "30,720 of 16 tokens" in out
    assert "at full context (8,192 tokens): 59 sequences at once" in out
    assert "Maximum concurrency for 8,192 tokens per request: 60.00x" in out
    assert "not modelled:" in out
    assert "sliding-window" in out

    assert main([*args, "--block-size", "128", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["num_blocks"] == 3840
    assert figures["max_sequences_full_context"] == 59


def test_command_line_from_gpu_memory(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(CONFIGS / "qwen2.5-0.5b-instruct.json")
    args = ["--config", config, "--gpu-memory-gib", "16", "--gpu-memory-utilization", "0.9"]
    assert main([*args, "--weights-gib", "1", "--max-model-len", "4096", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    # 16 × 0.9 − 1 = 13.4 GiB of 12,288-byte tokens, in blocks of 16.
    assert figures["kv_cache_bytes"] == math.floor(16 * GIB * 0.9) - GIB
    assert figures["kv_tokens"] == figures["kv_cache_bytes"] // (16 * 12_288) * 16
    # Without --weights-gib the weights are estimated from the config.
    assert main(args) == 0
    assert "estimated: 0.49 B parameters" in capsys.readouterr().out


def test_command_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    mla = str(CONFIGS / "deepseek-v2-lite.json")
    assert main(["--config", mla, "--kv-cache-gib", "1"]) == 2
    assert "latent attention" in capsys.readouterr().err
    missing = str(CONFIGS / "no-such-model.json")
    assert main(["--config", missing, "--kv-cache-gib", "1"]) == 2
    assert "error:" in capsys.readouterr().err
