"""What one engine holds, from its KV cache events (``app.routing.block_index``):
pure, no engine. The engine's own block hashes here are arbitrary numbers —
the index keys blocks by their token ids and never computes vLLM's hash."""

from app.routing.block_index import BlockIndex, PromptBlocks, block_chain

SIZE = 4
# Twelve tokens: three blocks of four.
IDS = tuple(range(100, 112))


def blocks(ids: tuple[int, ...], first: int, last: int) -> list[int]:
    """The token ids of blocks ``first`` to ``last`` (inclusive)."""
    return list(ids[first * SIZE : (last + 1) * SIZE])


def holding_all_three(salt: str | None = None) -> BlockIndex:
    """An engine that cached the prompt's blocks in two steps, as vLLM reports
    them: the first block alone, then two more chained to it."""
    index = BlockIndex()
    extra = [[salt]] if salt else None
    assert index.stored([901], None, blocks(IDS, 0, 0), SIZE, extra)
    assert index.stored([902, 903], 901, blocks(IDS, 1, 2), SIZE)
    return index


def test_a_prompt_is_found_as_far_as_its_leading_blocks_are_held() -> None:
    index = holding_all_three()
    assert index.leading(PromptBlocks(IDS)) == 3
    # A longer prompt with the same start, and a partial last block.
    assert index.leading(PromptBlocks((*IDS, 7, 7, 7, 7, 7, 7))) == 3
    # The same tokens from the second block on: nothing (the first differs).
    other = (0, 0, 0, 0, *IDS[4:])
    assert index.leading(PromptBlocks(other)) == 0
    # Differing in the third block: the first two.
    assert index.leading(PromptBlocks((*IDS[:8], 1, 2, 3, 4))) == 2
    assert len(index) == 3


def test_the_cache_salt_keeps_prompts_of_other_salts_out() -> None:
    """vLLM puts a request's salt in its first block's extra keys; only a
    prompt of the same salt shares its blocks."""
    index = holding_all_three(salt="tenant-a")
    assert index.leading(PromptBlocks(IDS, "tenant-a")) == 3
    assert index.leading(PromptBlocks(IDS, "tenant-b")) == 0
    assert index.leading(PromptBlocks(IDS)) == 0
    unsalted = holding_all_three()
    assert unsalted.leading(PromptBlocks(IDS, "tenant-a")) == 0


def test_an_evicted_block_ends_what_is_held_there() -> None:
    index = holding_all_three()
    index.removed([902])
    assert index.leading(PromptBlocks(IDS)) == 1
    index.removed([901])
    assert index.leading(PromptBlocks(IDS)) == 0
    # A hash never seen is ignored.
    index.removed([12345])
    assert len(index) == 1


def test_a_block_cached_twice_is_held_until_both_copies_are_evicted() -> None:
    """Two requests that computed one prefix at once each cache a copy under
    the same hash; vLLM reports each copy's eviction."""
    index = holding_all_three()
    assert index.stored([901], None, blocks(IDS, 0, 0), SIZE)
    index.removed([901])
    assert index.leading(PromptBlocks(IDS)) == 3
    index.removed([901])
    assert index.leading(PromptBlocks(IDS)) == 0


def test_the_same_block_in_another_medium_or_group_is_counted_apart() -> None:
    index = holding_all_three()
    assert index.stored([901], None, blocks(IDS, 0, 0), SIZE, medium="CPU")
    index.removed([901])
    assert index.leading(PromptBlocks(IDS)) == 3  # still in the CPU tier
    index.removed([901], medium="CPU")
    assert index.leading(PromptBlocks(IDS)) == 0


def test_all_blocks_cleared_forgets_everything() -> None:
    index = holding_all_three()
    index.cleared()
    assert index.leading(PromptBlocks(IDS)) == 0
    assert len(index) == 0
    # A block whose parent it no longer knows cannot be keyed.
    assert not index.stored([904], 903, [1, 2, 3, 4], SIZE)


def test_blocks_it_cannot_key_are_left_out() -> None:
    index = BlockIndex()
    # A parent it never saw (stored before the index started listening).
    assert not index.stored([902], 901, blocks(IDS, 1, 1), SIZE)
    assert index.stored([901], None, blocks(IDS, 0, 0), SIZE)
    # A sub-block entry (vLLM's hybrid models): not of the engine's size.
    assert not index.stored([950], 901, [1, 2], 2)
    # Token ids that are not whole blocks of the hashes given.
    assert not index.stored([902, 903], 901, blocks(IDS, 1, 1), SIZE)
    assert index.leading(PromptBlocks(IDS)) == 1


def test_blocks_with_other_extra_keys_never_match_a_prompt_of_token_ids() -> None:
    """A LoRA adapter's or an image's blocks carry extra keys a prompt of
    token ids has none of: counted as not held (an under-count, never an
    over-count)."""
    index = BlockIndex()
    assert index.stored([901], None, blocks(IDS, 0, 0), SIZE, [["my-adapter"]])
    assert index.leading(PromptBlocks(IDS)) == 0


def test_the_chain_is_per_block_size_and_bounded() -> None:
    prompt = PromptBlocks(IDS)
    assert len(prompt.chain(4)) == 3
    assert len(prompt.chain(5)) == 2
    assert prompt.chain(4)[:2] == block_chain(IDS, 4, limit=2)
    assert prompt.chain(4) != prompt.chain(6)[:3]
