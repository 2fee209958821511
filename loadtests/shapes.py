"""Locust load shapes following ``loadtests/schedule.py``."""

from locust import LoadTestShape

from loadtests.schedule import Stage, schedule


class ScheduledShape(LoadTestShape):
    """Runs the stages of one schedule, then stops the test.

    Every shape here is abstract (locust's shape classes are not, by default):
    the locustfile makes concrete the one ``LOAD_SHAPE`` names.
    """

    abstract = True
    shape = "degradation"

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[Stage] = schedule(self.shape)

    def tick(self) -> tuple[int, float] | None:
        now = self.get_run_time()
        for stage in self.stages:
            if now < stage.end:
                return stage.users, stage.spawn_rate
        return None


class DegradationShape(ScheduledShape):
    """Stepped concurrency with a hold per step: the material's sweep."""

    abstract = True
    shape = "degradation"


class ClassesShape(ScheduledShape):
    """The degradation's steps, its users of two classes (chat and bulk)."""

    abstract = True
    shape = "classes"


class SpikeShape(ScheduledShape):
    abstract = True
    shape = "spike"


class RampShape(ScheduledShape):
    abstract = True
    shape = "ramp"


class SoakShape(ScheduledShape):
    abstract = True
    shape = "soak"


SHAPE_CLASSES: dict[str, type[ScheduledShape]] = {
    "degradation": DegradationShape,
    "classes": ClassesShape,
    "spike": SpikeShape,
    "ramp": RampShape,
    "soak": SoakShape,
}
