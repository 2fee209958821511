"""Build the tiny random-weight model that the local stack and the tests serve.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on ``corpus.txt``
next to this file, and the weights are random with a fixed seed, so two builds
give the same files.

The text the model writes is gibberish, but the serving mechanics around it
(continuous batching, paged KV cache, preemption, abort, metrics) are real vLLM.

Output lengths.  A random model almost never picks EOS (one token in ~1,000),
so every answer would run to ``max_tokens``.  Real traffic finishes at varied
lengths, and the admission controller's overcommit only matters when it does.
The model therefore carries an *EOS channel*: residual dimension 0 holds the
same constant for every token (the embedding sets it, and no layer writes to
it), so after the final RMSNorm it is nearly constant too, and one weight in
the LM head turns it into a fixed bias on the EOS logit.  The chance of EOS at
each step is ``--eos-rate``, which gives a roughly geometric length
distribution with mean ``1 / eos_rate``.  Requests with ``ignore_eos`` are
unaffected, which is what the tests use for exact lengths.

Run it with the engine's Python (it needs torch, transformers, tokenizers):

    .venv-engine/bin/python deploy/model/build_tiny_model.py --out .models/tiny
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
SEED = 1234
VOCAB_SIZE = 1024
HIDDEN = 128
MAX_POSITIONS = 4096
EOS_CHANNEL_VALUE = 1.0
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def train_tokenizer(corpus: Path) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpus.read_text(encoding="utf-8").splitlines()
    tokenizer.train_from_iterator(lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        pad_token=EOS,
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def eos_logit_bias(eos_rate: float, vocab: int) -> float:
    """Logit offset that makes EOS win with probability ``eos_rate`` when the
    other ``vocab - 1`` logits are close to zero (they are: random weights)."""
    return math.log(eos_rate * (vocab - 1) / (1.0 - eos_rate))


@torch.no_grad()
def build_model(vocab: int, eos_id: int, eos_rate: float) -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    model = LlamaForCausalLM(config)
    model.eval()

    # The EOS channel (see the module docstring).
    model.model.embed_tokens.weight[:, 0] = EOS_CHANNEL_VALUE
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[0, :] = 0.0
        layer.mlp.down_proj.weight[0, :] = 0.0
    model.lm_head.weight[:, 0] = 0.0
    if eos_rate > 0:
        probe = torch.randint(len(SPECIAL_TOKENS), vocab, (4, 256))
        hidden = model.model(input_ids=probe).last_hidden_state
        channel = float(hidden[..., 0].mean())
        model.lm_head.weight[eos_id, 0] = eos_logit_bias(eos_rate, vocab) / channel
    return model.to(torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus.txt")
    parser.add_argument(
        "--eos-rate",
        type=float,
        default=0.01,
        help="chance of EOS at each step without ignore_eos (0 = never); mean length is 1/rate",
    )
    args = parser.parse_args()

    tokenizer = train_tokenizer(args.corpus)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    model = build_model(len(tokenizer), eos_id, args.eos_rate)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    (out / "BUILD_INFO.json").write_text(
        json.dumps(
            {"seed": SEED, "vocab_size": len(tokenizer), "eos_rate": args.eos_rate}, indent=2
        )
        + "\n"
    )
    print(f"tiny model written to {out} (vocab {len(tokenizer)}, eos_rate {args.eos_rate})")


if __name__ == "__main__":
    main()
