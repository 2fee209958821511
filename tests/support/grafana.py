"""Grafana's provisioned Prometheus datasource, read as Grafana reads it (no
Grafana runs here): the address an exemplar's trace id opens, for the
offline compose checks (tests/deploy/) and the container step, which opens
it on the running trace backend (tests/containers/)."""

import re
from collections.abc import Mapping
from typing import Any

import yaml

from deploy.local import ROOT

DATASOURCE = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
# Grafana's own variable in a data link: the exemplar label's value.
RAW_VALUE = "${__value.raw}"


def provisioned(value: str, environ: Mapping[str, str]) -> str:
    """A provisioning file's value as Grafana reads it: ``$NAME`` and
    ``${NAME}`` are Grafana's environment (empty when unset), ``$$`` is a
    literal ``$`` (the file is split on ``$$``, each part expanded, the parts
    joined with ``$``)."""

    def expand(part: str) -> str:
        # As Go's os.ExpandEnv: ${anything up to the brace}, or $ and a name.
        return re.sub(
            r"\$\{([^}]*)\}|\$(\w+)",
            lambda m: environ.get(m.group(1) if m.group(1) is not None else m.group(2), ""),
            part,
        )

    return "$".join(expand(part) for part in value.split("$$"))


def exemplar_destinations() -> list[dict[str, Any]]:
    """The Prometheus datasource's exemplar links, as written."""
    (source,) = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    found: list[dict[str, Any]] = source["jsonData"]["exemplarTraceIdDestinations"]
    return found


def exemplar_link(label: str, trace_id: str, environ: Mapping[str, str]) -> str:
    """Where Grafana, with ``environ`` as its environment, sends the browser
    from an exemplar whose ``label`` is ``trace_id``."""
    (destination,) = [d for d in exemplar_destinations() if d["name"] == label]
    return provisioned(destination["url"], environ).replace(RAW_VALUE, trace_id)
