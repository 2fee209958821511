"""Who a request is for: its tenant, its priority class and, with keys on,
the key that vouched for both. The one definition of the priority names."""

import re
from dataclasses import dataclass
from typing import Literal, get_args

Priority = Literal["high", "normal", "low"]
# In the order admission serves them.
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
DEFAULT_PRIORITY: Priority = "normal"
ANONYMOUS = "anonymous"

# Tenant ids from the X-Tenant-Id header (no keys configured).
TENANT_PATTERN = re.compile(r"[A-Za-z0-9._:@\-]{1,64}")


def parse_priority(value: str | None) -> Priority | None:
    """The priority a header names (``None`` if it names none we know)."""
    name = (value or DEFAULT_PRIORITY).strip().lower()
    for priority in PRIORITIES:
        if name == priority:
            return priority
    return None


@dataclass(frozen=True)
class Identity:
    tenant: str
    priority: Priority
    key_id: str | None = None
