"""A real process the tests talk to over HTTP: its URL, the process (its
log, its signals) and its ``/metrics``."""

from dataclasses import dataclass

from deploy.local import ManagedProcess, metric


@dataclass
class Service:
    url: str
    process: ManagedProcess

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.url, name, **labels)
