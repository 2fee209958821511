"""Build a tiny cross-encoder from the tiny model: the same tokenizer and
transformer, and a one-label ``score`` head (``LlamaForSequenceClassification``,
``num_labels=1``) with random weights from a fixed seed.

vLLM serves ``/classify`` only on a classifier, and score and rerank on a
classifier only with one label (a cross-encoder: each query and document run
together as one sequence). A causal model converted with ``--convert
classify`` needs that ``score`` weight in its checkpoint to load, so the
tests' classifier engine serves this one. Nothing is downloaded.

Run it with the engine's Python after the tiny model is built:

    .venv-engine/bin/python deploy/model/build_tiny_classifier.py \
        --base .models/tiny --out .models/tiny-classifier
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

SEED = 4321
# What the tokenizer and template files are called in the tiny model's directory.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def build(base: Path) -> LlamaForSequenceClassification:
    config = LlamaConfig.from_pretrained(base)
    config.architectures = ["LlamaForSequenceClassification"]
    config.num_labels = 1
    torch.manual_seed(SEED)
    classifier = LlamaForSequenceClassification(config)
    causal = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    # The transformer itself is the tiny model's; only the head is new.
    classifier.model.load_state_dict(causal.model.state_dict())
    return classifier.to(torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the tiny model's directory")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    build(args.base).save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (args.base / name).exists():
            shutil.copy(args.base / name, out / name)
    (out / "BUILD_INFO.json").write_text(
        json.dumps({"seed": SEED, "base": str(args.base), "num_labels": 1}, indent=2) + "\n"
    )
    print(f"tiny classifier written to {out} (one label, from {args.base})")


if __name__ == "__main__":
    main()
