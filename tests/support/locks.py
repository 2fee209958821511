"""The pinned versions of a requirements lock file (requirements/*.lock, as
uv writes them): one ``name==version`` a line, comments and options between."""

from pathlib import Path

from packaging.utils import canonicalize_name

from deploy.local import ROOT


def lock_pins(path: str | Path) -> dict[str, str]:
    """Each package of the lock at ``path`` (relative to the project, or
    absolute), by its canonical name, and its version; every one must be
    pinned."""
    pins: dict[str, str] = {}
    for line in (ROOT / path).read_text().splitlines():
        requirement = line.split(";")[0].strip()
        if not requirement or line[0] in " #-":
            continue
        name, _, version = requirement.partition("==")
        assert version, f"{path}: not pinned: {line}"
        pins[str(canonicalize_name(name.split("[")[0]))] = version
    return pins
