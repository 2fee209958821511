"""Estimating a prompt's token count without asking the engine.

Calling the engine's ``/tokenize`` for every request would add a round trip
(and load on the engine's API process) in front of every admission. Instead
the gateway fits ``tokens ≈ intercept + slope × characters`` per route from
the ``usage.prompt_tokens`` the engine reports for completed requests. The
intercept absorbs the chat template's fixed cost; recent requests weigh more,
so the fit follows a changing workload. Until enough requests have completed,
a conservative default is used (4 characters per token plus a template
allowance: the route's ``template_tokens``). The error against the engine's
own count on the load-test corpus is checked by a test.
"""

from dataclasses import dataclass

from app.request.routes import ROUTES, Route

_DEFAULT_CHARS_PER_TOKEN = 4.0
_MIN_SAMPLES = 8
_DECAY = 0.99


@dataclass
class _Fit:
    w: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0
    count: int = 0

    def add(self, chars: float, tokens: float) -> None:
        self.w = self.w * _DECAY + 1.0
        self.x = self.x * _DECAY + chars
        self.y = self.y * _DECAY + tokens
        self.xx = self.xx * _DECAY + chars * chars
        self.xy = self.xy * _DECAY + chars * tokens
        self.count += 1

    def line(self) -> tuple[float, float] | None:
        """(intercept, slope), or None with too little data."""
        if self.count < _MIN_SAMPLES or self.x <= 0:
            return None
        spread = self.w * self.xx - self.x * self.x
        mean_x = self.x / self.w
        if spread > 1e-6 * (self.w * mean_x) ** 2:
            slope = (self.w * self.xy - self.x * self.y) / spread
            intercept = (self.y - slope * self.x) / self.w
            if 0.02 <= slope <= 2.0 and intercept >= 0:
                return intercept, slope
        # Prompts of (nearly) one length: a ratio is all the data supports.
        return 0.0, self.y / self.x


class PromptTokenEstimator:
    def __init__(self) -> None:
        self._fits: dict[str, _Fit] = {}

    def estimate(self, route: Route, chars: int) -> int:
        line = self._fits[route].line() if route in self._fits else None
        if line is None:
            intercept = ROUTES[route].template_tokens
            slope = 1.0 / _DEFAULT_CHARS_PER_TOKEN
        else:
            intercept, slope = line
        return max(1, round(intercept + slope * chars))

    def observe(self, route: Route, chars: int, tokens: int) -> None:
        if tokens > 0:
            self._fits.setdefault(route, _Fit()).add(float(chars), float(tokens))
