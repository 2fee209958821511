"""A process stopped (SIGSTOP) for a block: it answers nothing and does
nothing until the block ends, deterministically, and is continued
(SIGCONT) however the block ends."""

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
