"""What the request pipeline needs from admission control."""

from typing import Protocol

from app.record import RequestRecord
from app.validation import CompletionJob


class Ticket(Protocol):
    """An admitted request's hold on engine capacity."""

    def release(self, record: RequestRecord) -> None:
        """Give the capacity back; the record carries what the request used."""


class Admission(Protocol):
    async def admit(self, job: CompletionJob, record: RequestRecord) -> Ticket:
        """Wait until ``job`` may go to the engine, or raise a ``GatewayError``."""

    def start_draining(self) -> None:
        """Refuse queued and new requests from now on."""


class _Nothing:
    def release(self, record: RequestRecord) -> None:
        return None


class Unlimited:
    """``GATEWAY_ADMISSION=off``: everything goes straight to the engine."""

    async def admit(self, job: CompletionJob, record: RequestRecord) -> Ticket:
        return _Nothing()

    def start_draining(self) -> None:
        return None
