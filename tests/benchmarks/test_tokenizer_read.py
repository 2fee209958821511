"""The tokenizer-read benchmark's synthetic tokenizer, and its measurement
of this tree."""

from pathlib import Path

from tokenizers import Tokenizer

from benchmarks.tokenizer_read import measure, synthetic_tokenizer
from deploy.local import ROOT


def test_the_synthetic_tokenizer_has_the_vocabulary_asked_and_encodes(tmp_path: Path) -> None:
    path = synthetic_tokenizer(tmp_path, 2_000)
    tokenizer = Tokenizer.from_file(str(path))
    assert tokenizer.get_vocab_size() == 2_000
    assert tokenizer.encode("hello world").ids


def test_this_tree_reads_the_files_when_the_engine_is_found_and_only_then(
    tmp_path: Path,
) -> None:
    synthetic_tokenizer(tmp_path, 2_000)
    [row] = measure(str(ROOT), tmp_path, 1)
    # The engine found, then the first requests of the model and of two
    # adapters served from its directory: one read, ahead of them all.
    assert [reads for _, reads in row] == [1, 0, 0, 0]
