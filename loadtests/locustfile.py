"""Locust entry point: the user classes and the shape named by ``LOAD_SHAPE``.

Headless, through ``make load`` (see ``loadtests/run.py``), or with the web UI:

    LOAD_SHAPE=spike .venv/bin/locust -f loadtests/locustfile.py --host http://127.0.0.1:8000
    .venv/bin/locust -f loadtests/locustfile.py --class-picker --host http://127.0.0.1:8000

Without ``LOAD_SHAPE`` every shape is offered to the web UI's class picker.
"""

import os
import sys
from pathlib import Path

# Run as a file by locust: make the repository importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadtests.shapes import SHAPE_CLASSES
from loadtests.users import (
    AbandoningUser,
    BulkUser,
    ChatUser,
    PriorityChatUser,
    RAGUser,
    SummaryUser,
    TenantMixUser,
)

__all__ = [
    "AbandoningUser",
    "BulkUser",
    "ChatUser",
    "PriorityChatUser",
    "RAGUser",
    "SummaryUser",
    "TenantMixUser",
]

# Locust runs the shape classes it finds here that are not abstract: the one
# LOAD_SHAPE names, or all of them for the web UI's class picker.
_chosen = os.environ.get("LOAD_SHAPE")
for _name, _shape in SHAPE_CLASSES.items():
    if _chosen in (None, "", _name):
        _concrete = _shape.__name__.removesuffix("Shape")
        globals()[_concrete] = type(
            _concrete, (_shape,), {"abstract": False, "__module__": __name__}
        )
del _name, _shape
