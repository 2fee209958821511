"""``GET /status``: the gateway's state as an operator asks for it, without
Prometheus — each engine (in routing or not, ejected, its models; with
admission on its capacity, budget, overcommit, learned sequence cap and what
is held there), the queue by priority and by tenant, the service classes,
the keys loaded, the shared state, the version.

It names tenants and engines' addresses, so it is served on the admin port
only (``GATEWAY_ADMIN_PORT``; without one it is not served at all). Each
part is asked of the component that owns it, so this module only puts them
side by side.
"""

from typing import Any

from app import __version__
from app.serve.services import Services


def gateway_status(services: Services) -> dict[str, Any]:
    admission = services.admission.status()
    held: dict[str, Any] = admission.get("engines") or {}
    engines = [{**engine, **held.get(engine["url"], {})} for engine in services.engines.status()]
    return {
        "version": __version__,
        "draining": services.drain.draining,
        "admission": admission["admission"],
        "engines": engines,
        "queue": admission["queue"],
        # Scale from zero: requests held for an engine, by model (None: no cold models).
        "cold_start": admission.get("cold_start"),
        # The classes requests are ordered by, and whether the engines order by them too.
        "classes": {
            name: {
                "rank": c.rank,
                "objective_seconds": c.objective,
                "sheddable": c.sheddable,
                "engine_priority": c.engine_priority,
            }
            for name, c in services.classes.items()
        },
        "engine_scheduling": services.settings.engine_scheduling,
        "receiving": services.receiving.count,
        "keys": None if services.keys is None else services.keys.status(),
        "shared_state": None if services.shared is None else services.shared.status(),
    }
