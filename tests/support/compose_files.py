"""What the compose files read: every ``${NAME}`` in them, for the offline
checks of the compose files (tests/deploy/) and the container runs
(tests/containers/), each over the files it uses."""

import re
from collections.abc import Iterable

from deploy.local import ROOT


def compose_variables(files: Iterable[str]) -> set[str]:
    """Every ${NAME} the compose ``files`` (paths from the repository root) read."""
    names: set[str] = set()
    for name in files:
        names |= set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", (ROOT / name).read_text()))
    return names
