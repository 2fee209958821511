"""An admitted request's reservation on one engine, given back exactly once.

The flight holds it through the ``Hold`` protocol (``app.admission.base``);
giving it back carries what a completed request used, which the policy
learns its overcommit from.
"""

from collections.abc import Callable

from app.admission.base import AdmissionRequest
from app.admission.budget import Reservation
from app.admission.pace import Progress
from app.admission.refill import HandingOn
from app.request.record import RequestRecord
from app.routing.base import Choice

# Gives a reservation back, with (prompt, output) tokens a completed request used.
GiveBack = Callable[[Reservation, tuple[int, int] | None], None]
# Hands a reservation's sequence slots on before its end.
HandOn = Callable[[Reservation], None]
# A stream's engine answered after so many seconds; when to hand on.
Opened = Callable[[Reservation, float], HandingOn]
# A stream completed with so many tokens in so many events.
Streamed = Callable[[Reservation, int, int], None]
# A stream runs, and this says how far it has come.
Writing = Callable[[Reservation, Progress], None]


class KvHold:
    def __init__(
        self,
        give_back: GiveBack,
        reservation: Reservation,
        request: AdmissionRequest,
        hand_on: HandOn | None = None,
        opened: Opened | None = None,
        streamed: Streamed | None = None,
        writing: Writing | None = None,
    ) -> None:
        self._give_back = give_back
        self._hand_on = hand_on
        self._opened = opened
        self._streamed = streamed
        self._writing = writing
        self.reservation = reservation
        self._request = request

    @property
    def engine(self) -> str:
        return self.reservation.engine

    @property
    def choice(self) -> Choice | None:
        return self.reservation.choice

    def opened(self, travel: float) -> HandingOn:
        if self._opened is None:
            return HandingOn()
        return self._opened(self.reservation, travel)

    def streamed(self, tokens: int, events: int) -> None:
        if self._streamed is not None:
            self._streamed(self.reservation, tokens, events)

    def writing(self, progress: Progress) -> None:
        if self._writing is not None:
            self._writing(self.reservation, progress)

    def hand_on(self) -> None:
        if self._hand_on is not None and not self.reservation.released:
            self._hand_on(self.reservation)

    def release(self, record: RequestRecord) -> None:
        if self.reservation.released:
            return
        used = None
        if record.outcome == "completed" and record.completion_tokens is not None:
            request = self._request
            prompt = (record.prompt_tokens or request.demand.prompt_tokens) * request.job.n
            used = (prompt, record.completion_tokens)
        self._give_back(self.reservation, used)
