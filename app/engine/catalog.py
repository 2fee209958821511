"""What the fleet serves, by name: the union of the model lists of the
engines requests may go to now, the models a pool that scales to zero serves
while none of its engines is up (``app.engine.cold_models``), and the
aliases the settings give (``app.engine.aliases``)."""

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from app.engine.aliases import Aliases, resolve
from app.engine.monitor import EngineMonitor

# A name not known is looked up again when the engines' lists are older.
_STALE_AFTER = 5.0


class ModelCatalog:
    def __init__(
        self,
        engines: Callable[[], list[EngineMonitor]],
        aliases: Aliases,
        cold: Mapping[str, int | None] | None = None,
    ) -> None:
        self._engines = engines
        self.aliases = aliases
        self.cold = dict(cold or {})

    def is_cold(self, name: str) -> bool:
        """Whether ``name`` (or the alias) is a cold model no engine up serves now."""
        if not self.cold:
            return False
        served = resolve(self.aliases, name, self.table())
        return served in self.cold and not any(
            served in monitor.models for monitor in self._engines()
        )

    def table(self) -> dict[str, int | None]:
        """Served name to context length (the longest where engines differ:
        the engine that serves it decides)."""
        table: dict[str, int | None] = {}
        for monitor in self._engines():
            for name, length in monitor.models.items():
                known = table.get(name)
                table[name] = max(length, known) if length and known else (length or known)
        # A cold model's configured length, until an engine serving it says its own.
        return self.cold | table

    async def lookup(self, name: str) -> tuple[str, dict[str, int | None]]:
        """The served name a request for ``name`` goes to (an alias
        resolved) and the table; the engines' lists are read again first if
        the name is not served and they are more than a few seconds old (a
        model or an adapter may have been added)."""
        table = self.table()
        served = resolve(self.aliases, name, table)
        if served not in table:
            stale = [m for m in self._engines() if m.models_age > _STALE_AFTER]
            if stale:
                await asyncio.gather(*(m.refresh_models() for m in stale))
                table = self.table()
                served = resolve(self.aliases, name, table)
        return served, table

    def resolve(self, name: str) -> str:
        return resolve(self.aliases, name, self.table())

    def listing(self) -> dict[str, Any]:
        """``/v1/models``: each served model as the first engine that serves
        it lists it (an adapter with its ``parent``), with the longest
        context any gives it; then each alias one of whose names is served,
        its ``root`` the served name it goes to now."""
        entries: dict[str, dict[str, Any]] = {}
        for monitor in self._engines():
            for name, length in monitor.models.items():
                entry = entries.setdefault(
                    name,
                    {"id": name, "object": "model", "owned_by": "vllm"}
                    | monitor.entries.get(name, {}),
                )
                if length is not None:
                    entry["max_model_len"] = max(length, entry.get("max_model_len") or 0)
        for name, length in self.cold.items():
            if name not in entries:
                entries[name] = {"id": name, "object": "model", "owned_by": "vllm"}
                if length is not None:
                    entries[name]["max_model_len"] = length
        for alias in self.aliases:
            served = resolve(self.aliases, alias, entries)
            if served in entries:
                entries[alias] = {
                    **entries[served],
                    "id": alias,
                    "root": served,
                    "owned_by": "vllm-gateway",
                }
        return {"object": "list", "data": list(entries.values())}
