"""Build a tiny Whisper (speech to text) with random weights, from the tiny
model's tokenizer: what vLLM needs to serve ``/v1/audio/transcriptions``
and ``/v1/audio/translations`` on the CPU without a download.

vLLM builds Whisper's decoder prompt as ``<|startoftranscript|><|en|>
<|transcribe|><|notimestamps|>`` and constrains language detection to
``<|xx|>`` for every language Whisper knows, so the tokenizer here is the
tiny model's byte-level BPE with those special tokens added. The feature
extractor computes its mel filters itself (80 bins, 16 kHz, 30 s windows:
1,500 encoder positions). One encoder and one decoder layer of width 64.

On vLLM 0.32's CPU build, with the ``audio`` extra's packages in the
engine's environment (av, scipy, soundfile, soxr: ``make setup`` installs
them and builds this model), the engine starts (``Supported tasks:
['transcription']``) and answers uploads, streamed or not: the audio
routes' tests (tests/e2e/test_audio.py) run against it. Its words are noise.

    .venv-engine/bin/python deploy/model/build_tiny_whisper.py \\
        --base .models/tiny --out .models/tiny-whisper
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import (
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizerFast,
)
from transformers.models.whisper.tokenization_whisper import LANGUAGES

SEED = 1500
END = "<|endoftext|>"
SPECIAL = [
    END,
    "<|startoftranscript|>",
    *(f"<|{code}|>" for code in LANGUAGES),
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|prev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
]


def build(base: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer.from_file(str(base / "tokenizer.json"))
    bpe.add_special_tokens(SPECIAL)
    bpe.save(str(out / "tokenizer.json"))
    tokenizer = WhisperTokenizerFast(
        tokenizer_file=str(out / "tokenizer.json"),
        unk_token=END,
        bos_token=END,
        eos_token=END,
        pad_token=END,
    )
    end = tokenizer.convert_tokens_to_ids(END)
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=tokenizer.convert_tokens_to_ids("<|startoftranscript|>"),
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    torch.manual_seed(SEED)
    WhisperForConditionalGeneration(config).save_pretrained(out)
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    )
    processor.save_pretrained(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the tiny model's directory")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    build(args.base, args.out)


if __name__ == "__main__":
    main()
