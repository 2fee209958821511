"""Cold models (``GATEWAY_COLD_MODELS``): what a pool that scales to zero
serves while none of its engines is up.

``tiny=2048,chat-large=32768``: each a served name and its context length
(``name`` alone: the length is not known, as for an engine that lists none).
While no engine serves one of them, the gateway still knows it: it is listed
in ``/v1/models``, a request for it is validated against its length, and,
with ``GATEWAY_COLD_START_TIMEOUT``, held while an engine starts
(docs/scale-from-zero.md). A name an engine serves is the engine's: its own
length decides. A model neither configured here nor served stays a 404 at once.
"""


def parse_cold_models(text: str | None) -> dict[str, int | None]:
    """``name=length,name``; a mistake is said plainly."""
    models: dict[str, int | None] = {}
    for part in (text or "").split(","):
        entry = part.strip()
        if not entry:
            continue
        name, sep, length = (s.strip() for s in entry.partition("="))
        if not name or (sep and not length.isdigit()) or (sep and int(length) < 1):
            raise ValueError(
                f"cold model {entry!r}: write it as name=context-length (or the name alone)"
            )
        if name in models:
            raise ValueError(f"cold model {name!r} is given twice")
        models[name] = int(length) if sep else None
    return models
