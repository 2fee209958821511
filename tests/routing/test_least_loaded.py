"""The least-loaded picker (``app.routing.least_loaded``), on its own: pure,
no engines; and, with prefix affinity beside it, nothing chosen where
nothing fits."""

from app.routing.least_loaded import LeastLoaded
from app.routing.prefix import PrefixAffinity
from tests.routing.test_prefix import engines


def test_least_loaded_takes_the_smallest_reserved_fraction_then_the_id() -> None:
    router = LeastLoaded()
    choice = router.choose(None, engines(3, 1, 2))
    assert choice is not None
    assert choice.engine == "e1"
    tie = router.choose(None, engines(1, 1))
    assert tie is not None
    assert tie.engine == "e0"


def test_nothing_fits_nothing_is_chosen() -> None:
    assert LeastLoaded().choose(None, engines(0, 0, fits=False)) is None
    assert PrefixAffinity().choose(7, engines(0, 0, fits=False)) is None
