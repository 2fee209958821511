"""Free ports for the processes the launcher and the tests start."""

import pytest

from deploy import local


def test_a_port_whose_neighbour_would_pass_65535_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A Redis Cluster node's bus is its port + 10,000: a port above 55,535
    # has none. The first port offered is such a one; the system's follow.
    system = local.free_port
    offered: list[int] = []

    def free_port() -> int:
        offered.append(60_000 if not offered else system())
        return offered[-1]

    monkeypatch.setattr(local, "free_port", free_port)
    port = local.free_port_with(10_000)
    assert offered[0] == 60_000
    assert port != 60_000
    assert port + 10_000 <= 65_535
