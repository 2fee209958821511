"""An admitted request's reservation on one engine, given back exactly once.

The flight holds it through the ``Hold`` protocol (``app.admission.base``):
where it went (``choice``), the lane its engine call reports on
(``app.admission.lane``), and ``release``, which carries what a completed
request used (the policy learns its overcommit from it) and when its first
token came (what a first token takes after admission).
"""

from collections.abc import Callable

from app.admission.base import AdmissionRequest
from app.admission.budget import Reservation
from app.admission.lane import KvLane
from app.request.record import RequestRecord
from app.routing.base import Choice

# Gives a reservation back, with (prompt, output) tokens a completed request used.
GiveBack = Callable[[Reservation, tuple[int, int] | None], None]
# A stream's first token came so many seconds after its admission.
FirstToken = Callable[[float], None]


class KvHold:
    def __init__(
        self,
        give_back: GiveBack,
        reservation: Reservation,
        request: AdmissionRequest,
        lane: KvLane,
        first_token: FirstToken,
    ) -> None:
        self._give_back = give_back
        self._first_token = first_token
        self.reservation = reservation
        self.lane = lane
        self._request = request

    @property
    def choice(self) -> Choice:
        return self.reservation.choice or Choice(self.reservation.engine)

    def release(self, record: RequestRecord) -> None:
        if self.reservation.released:
            return
        if record.first_token_at is not None and record.admitted_at is not None:
            self._first_token(record.first_token_at - record.admitted_at)
        used = None
        if record.outcome == "completed" and record.completion_tokens is not None:
            request = self._request
            prompt = (record.prompt_tokens or request.demand.prompt_tokens) * request.job.n
            used = (prompt, record.completion_tokens)
        self._give_back(self.reservation, used)
