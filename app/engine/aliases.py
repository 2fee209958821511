"""Model aliases (``GATEWAY_MODEL_ALIASES``): a public name for the served
name(s) behind it, the fleet's rather than one engine's (vLLM's own
``--served-model-name`` gives one engine several names).

``chat=llama-v2|llama-v1,default=tiny``: a request for ``chat`` goes to the
first of ``llama-v2`` and ``llama-v1`` that an engine up serves — so an
upgrade rolls out by serving the new name beside the old, and a fleet falls
back to the old while none serves the new. The request is sent on with the
served name (the engine knows no alias), so answers name the served model.
An alias none of whose names is served is a model that does not exist. An
alias that is also a served name is the alias: the settings decide.
"""

from collections.abc import Collection, Mapping

Aliases = Mapping[str, tuple[str, ...]]


def parse_aliases(text: str | None) -> dict[str, tuple[str, ...]]:
    """``alias=name|name,alias=name``; a mistake is said plainly."""
    aliases: dict[str, tuple[str, ...]] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        alias, sep, names = part.partition("=")
        alias = alias.strip()
        served = tuple(n.strip() for n in names.split("|"))
        if not sep or not alias or not all(served):
            raise ValueError(
                f"model alias {part.strip()!r}: write it as alias=served-name (or"
                " alias=first|fallback)"
            )
        if alias in aliases:
            raise ValueError(f"model alias {alias!r} is given twice")
        if alias in served:
            raise ValueError(f"model alias {alias!r} names itself")
        aliases[alias] = served
    return aliases


def resolve(aliases: Aliases, model: str, served: Collection[str]) -> str:
    """The served name a request for ``model`` goes to: for an alias, the
    first of its names in ``served``; otherwise (or none served) ``model``."""
    for name in aliases.get(model, ()):
        if name in served:
            return name
    return model
