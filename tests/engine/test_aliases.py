"""Model aliases as the settings write them (``app.engine.aliases``)."""

import pytest

from app.engine.aliases import parse_aliases, resolve


def test_an_alias_goes_to_the_first_of_its_names_served() -> None:
    aliases = parse_aliases(" chat = llama-v2 | llama-v1 , default=tiny,")
    assert aliases == {"chat": ("llama-v2", "llama-v1"), "default": ("tiny",)}
    assert resolve(aliases, "chat", {"llama-v1", "llama-v2"}) == "llama-v2"
    assert resolve(aliases, "chat", {"llama-v1"}) == "llama-v1"
    # None served: the alias stays itself, a model that does not exist.
    assert resolve(aliases, "chat", {"tiny"}) == "chat"
    assert resolve(aliases, "tiny", {"tiny"}) == "tiny"
    assert parse_aliases(None) == parse_aliases("") == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("chat", "write it as alias=served-name"),
        ("=tiny", "write it as alias=served-name"),
        ("chat=tiny|", "write it as alias=served-name"),
        ("chat=a,chat=b", "given twice"),
        ("chat=chat|tiny", "names itself"),
    ],
)
def test_a_mistake_is_said_plainly(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_aliases(text)
