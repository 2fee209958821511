"""Where the shared state's Redis is, from the settings, and how it is shown."""

import pytest
from pydantic import ValidationError

from app.settings import Settings
from app.state.address import ClusterAddress, SentinelAddress, redis_address, shown


def test_without_redis_there_is_no_address() -> None:
    assert redis_address(Settings()) is None


def test_a_url_is_the_address() -> None:
    assert redis_address(Settings(redis_url="redis://redis:6379/0")) == "redis://redis:6379/0"


def test_sentinels_take_the_place_of_a_url_with_their_passwords() -> None:
    # compose sets a URL for its own Redis: sentinels given beside it win.
    settings = Settings(
        redis_url="redis://redis:6379/0",
        redis_sentinels="s1:26379,s2:26379",
        redis_sentinel_service="gateway",
        redis_password="data-secret",
        redis_sentinel_password="sentinel-secret",
    )
    assert redis_address(settings) == SentinelAddress(
        (("s1", 26379), ("s2", 26379)),
        "gateway",
        password="data-secret",
        sentinel_password="sentinel-secret",
    )


def test_an_address_is_shown_without_its_password() -> None:
    assert shown("redis://app:hunter2@redis:6379/0") == "redis://redis:6379/0"
    sentinels = SentinelAddress((("s1", 26379), ("::1", 26380)), "mymaster", password="hunter2")
    assert shown(sentinels) == "sentinel://s1:26379,[::1]:26380/mymaster"
    cluster = ClusterAddress("redis://:hunter2@node-1:7000")
    assert shown(cluster) == "cluster+redis://node-1:7000"


def test_a_cluster_is_found_from_the_node_its_url_names() -> None:
    settings = Settings(redis_url="redis://node-1:7000", redis_cluster=True)
    assert redis_address(settings) == ClusterAddress("redis://node-1:7000")


@pytest.mark.parametrize(
    "given",
    [
        {"redis_cluster": True},
        {"redis_cluster": True, "redis_url": "redis://a:1", "redis_sentinels": "s:26379"},
    ],
)
def test_a_cluster_needs_a_node_url_and_no_sentinels(given: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="GATEWAY_REDIS_CLUSTER needs"):
        Settings(**given)  # type: ignore[arg-type]
