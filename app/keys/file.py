"""The keys file (``GATEWAY_KEYS_FILE``): YAML, one entry per key.

```yaml
keys:
  - id: acme-batch
    tenant: acme
    sha256: "<hex SHA-256 of the key>"
    priorities: [normal, low]
    requests_per_minute: 600
    tokens_per_minute: 200000
    max_concurrent: 16
    shared_prefix_cache: false
    models: [tiny, "acme-*"]
```

Only the key's hash is stored, never the key. Limits are optional (absent:
unlimited); ``priorities`` defaults to ``[normal]``; ``models`` (absent:
every model and adapter the engines serve) names what the key may call,
each entry a name or a shell-style pattern (``acme-*``) — another tenant's
LoRA adapter is then, to this key, a model that does not exist; ``shared_prefix_cache``
(default false) lets the key's requests share the engine's prefix cache with
other tenants' keys that share it (``app.request.owned_fields``). A file that does not
parse, or whose entries are wrong (a duplicate id or hash, a hash that is not
64 hex digits, an unknown priority), is refused as a whole with a message
naming the entry.
"""

from fnmatch import fnmatchcase
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.request.identity import DEFAULT_PRIORITY, TENANT_PATTERN, Priority


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:@\-]+$")
    tenant: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    priorities: tuple[Priority, ...] = (DEFAULT_PRIORITY,)
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    max_concurrent: int | None = Field(None, ge=1)
    # Share the engine's prefix cache with every other key marked so (a
    # fleet-wide system prompt) instead of keeping it to the tenant.
    shared_prefix_cache: bool = False
    # The models and adapters it may call: names or shell-style patterns
    # (None: all of them).
    models: tuple[str, ...] | None = None

    def may_call(self, model: str) -> bool:
        return self.models is None or any(fnmatchcase(model, p) for p in self.models)

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        if not TENANT_PATTERN.fullmatch(value):
            raise ValueError("1 to 64 letters, digits or ._:@-")
        return value

    @field_validator("models")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not all(name.strip() for name in value):
            raise ValueError("a model name or pattern may not be empty")
        return value

    @field_validator("priorities")
    @classmethod
    def _some(cls, value: tuple[Priority, ...]) -> tuple[Priority, ...]:
        if not value:
            raise ValueError("at least one priority")
        return value


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[KeyEntry] = Field(default_factory=list)


class KeysFileError(ValueError):
    """The file cannot be used; the message says where and why."""


def read_keys(path: Path) -> list[KeyEntry]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KeysFileError(f"{path}: {exc}") from exc
    try:
        entries = _KeysFile.model_validate(raw if raw is not None else {}).keys
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise KeysFileError(f"{path}: {where}: {first['msg']}") from None
    for field in ("id", "sha256"):
        seen: set[str] = set()
        for entry in entries:
            value = getattr(entry, field)
            if value in seen:
                shown = value if field == "id" else f"{value[:8]}…"
                raise KeysFileError(f"{path}: two keys have the {field} {shown}")
            seen.add(value)
    return entries
