"""The model's tokenizer files read in the gateway: what they count, where
they are looked for, and what is done when they are missing."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from app.tokens.local import ModelTokenizer, TemplateRefused, TokenizerFiles

WORDS = ["<s>", "<unk>", "<|user|>", "<|end|>", "<|assistant|>", "hello", "world", "你", "好"]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write_model(
    directory: Path, *, template: str | None = TEMPLATE, in_config: bool = False
) -> Path:
    """A word-level tokenizer that adds <s> to a text's start (a BOS), with
    its config and chat template as a model directory holds them."""
    vocab = {word: i for i, word in enumerate(WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<|user|>", "<|end|>", "<|assistant|>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config: dict[str, object] = {"bos_token": {"content": "<s>"}, "eos_token": "<|end|>"}
    if template is not None and in_config:
        config["chat_template"] = template
    elif template is not None:
        (directory / "chat_template.jinja").write_text(template)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


CHAT = {"messages": [{"role": "user", "content": "hello 你 好"}]}


async def test_a_completion_prompt_gets_the_bos_and_a_chat_only_what_its_template_writes(
    tmp_path: Path,
) -> None:
    model = ModelTokenizer.load(write_model(tmp_path / "m"))
    assert await model.text("hello world", add_special_tokens=True) == (0, 5, 6)
    assert await model.text("hello world", add_special_tokens=False) == (5, 6)
    # <|user|> hello 你 好 <|end|> <|assistant|>
    assert await model.chat(CHAT) == (2, 5, 7, 8, 3, 4)
    assert await model.chat({**CHAT, "add_special_tokens": True}) == (0, 2, 5, 7, 8, 3, 4)


async def test_a_long_prompt_is_counted_the_same_off_the_event_loop(tmp_path: Path) -> None:
    model = ModelTokenizer.load(write_model(tmp_path / "m"))
    text = "hello " * 5000
    assert await model.text(text, add_special_tokens=False) == (5,) * 5000


async def test_the_template_may_live_in_the_config(tmp_path: Path) -> None:
    model = ModelTokenizer.load(write_model(tmp_path / "m", in_config=True))
    assert model.renders(CHAT)
    assert await model.chat(CHAT) == await ModelTokenizer.load(write_model(tmp_path / "n")).chat(
        CHAT
    )


def test_files_without_a_template_render_no_chat(tmp_path: Path) -> None:
    model = ModelTokenizer.load(write_model(tmp_path / "m", template=None))
    assert not model.renders(CHAT)


async def test_a_template_that_raises_is_a_refusal(tmp_path: Path) -> None:
    model = ModelTokenizer.load(write_model(tmp_path / "m", template="{{ raise_exception('no') }}"))
    with pytest.raises(TemplateRefused, match="no"):
        await model.chat(CHAT)


def test_the_directory_is_the_models_own_or_holds_one_per_served_name(tmp_path: Path) -> None:
    write_model(tmp_path / "one")
    files = TokenizerFiles(tmp_path / "one")
    assert files.for_model("anything") is not None
    write_model(tmp_path / "many" / "org" / "model-a")
    files = TokenizerFiles(tmp_path / "many")
    assert files.for_model("org/model-a") is not None
    assert files.for_model("model-b") is None


def test_missing_or_broken_files_are_said_once_and_leave_the_model_to_the_engine(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json")
    files = TokenizerFiles(tmp_path / "broken")
    assert files.for_model("m") is None
    assert files.for_model("m") is None
    assert sum("cannot load the tokenizer" in r.message for r in caplog.records) == 1


def test_a_hugging_face_cache_is_looked_in_by_the_served_models_hub_id(tmp_path: Path) -> None:
    """The engine's download cache mounted in the gateway (compose on a GPU host)."""
    snapshots = tmp_path / "hub" / "models--org--model-a" / "snapshots"
    write_model(snapshots / "0123abcd")
    files = TokenizerFiles(tmp_path)
    assert files.for_model("org/model-a") is not None
    assert files.for_model("org/model-b") is None


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories ``ModelTokenizer.load`` reads from here on."""
    read: list[Path] = []
    load = ModelTokenizer.load

    def recorded(directory: Path) -> ModelTokenizer:
        read.append(directory)
        return load(directory)

    monkeypatch.setattr(ModelTokenizer, "load", staticmethod(recorded))
    return read


def test_names_that_find_the_same_files_share_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model and its LoRA adapters, served from the model's directory:
    each read of a large tokenizer.json holds the event loop for a few
    hundred milliseconds."""
    read = counted_reads(monkeypatch)
    model = write_model(tmp_path / "m")
    files = TokenizerFiles(model)
    tokenizers = [files.for_model(name) for name in ("m", "m-lora-1", "m-lora-2")]
    assert read == [model]
    assert tokenizers[0] is not None
    assert all(t is tokenizers[0] for t in tokenizers)


def test_prepare_reads_the_files_before_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = counted_reads(monkeypatch)
    model = write_model(tmp_path / "m")
    files = TokenizerFiles(model)
    files.prepare("m")
    assert read == [model]
    assert files.for_model("m") is not None
    assert read == [model]
