"""The overhead benchmark's gateways get their files wherever they run from."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.overhead.main import parser
from benchmarks.overhead.targets import OverheadBench, relay_cpus, resolved_paths


def test_a_relative_tokenizer_directory_is_the_one_where_the_benchmark_runs(
    tmp_path: Path,
) -> None:
    """A gateway runs in its own source tree (``--gateway-src``): a relative
    path would name a directory there, and without its tokenizer files the
    gateway would count prompts by the engine, another gateway than asked."""
    (tmp_path / ".models" / "tiny").mkdir(parents=True)
    env = {"GATEWAY_TOKENIZER_DIR": "./.models/tiny", "GATEWAY_MAX_CONCURRENCY": "128"}
    resolved = resolved_paths(env, tmp_path)
    assert Path(resolved["GATEWAY_TOKENIZER_DIR"]) == tmp_path / ".models" / "tiny"
    assert Path(resolved["GATEWAY_TOKENIZER_DIR"]).is_absolute()
    assert resolved["GATEWAY_MAX_CONCURRENCY"] == "128"
    assert env["GATEWAY_TOKENIZER_DIR"] == "./.models/tiny"


def test_an_absolute_path_is_kept(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys: []\n")
    assert resolved_paths({"GATEWAY_KEYS_FILE": str(keys)}, Path("/")) == {
        "GATEWAY_KEYS_FILE": str(keys)
    }


def test_a_path_that_does_not_exist_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"GATEWAY_TOKENIZER_DIR=\.models/none"):
        resolved_paths({"GATEWAY_TOKENIZER_DIR": ".models/none"}, tmp_path)


class _Started:
    """Stands in for the benchmark's processes: keeps what a gateway was
    started with."""

    def __init__(self) -> None:
        self.gateways: list[tuple[dict[str, str], Path]] = []

    def gateway(self, name: str, env: dict[str, str], src: Path | None = None) -> Any:
        assert src is not None
        self.gateways.append((env, src))
        return SimpleNamespace(url="http://127.0.0.1:1")


@pytest.mark.parametrize("target", ["makeup", "before"])
def test_every_gateway_gets_the_tokenizer_directory_where_the_benchmark_runs(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".models" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    args = parser().parse_args(
        [
            "--gateway-src",
            "reports/wt-new",
            "--before-src",
            "reports/wt-old",
            "--gateway-env",
            "GATEWAY_TOKENIZER_DIR=./.models/tiny",
        ]
    )
    started = _Started()
    bench = OverheadBench(args, started, "pinned")  # type: ignore[arg-type]
    bench.engines = [SimpleNamespace(url="http://127.0.0.1:2")]  # type: ignore[list-item]
    bench._gateway(target)
    ((env, src),) = started.gateways
    assert env["GATEWAY_TOKENIZER_DIR"] == str(tmp_path / ".models" / "tiny")
    assert src == Path("reports/wt-old" if target == "before" else "reports/wt-new")


def test_pinned_the_client_and_the_relays_keep_to_the_cores_make_up_leaves_its_gateways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    # The engine on every core but the last, the rest on the last.
    assert relay_cpus("pinned") == {3}
    # Not pinned: wherever the scheduler puts them.
    assert relay_cpus("unpinned") is None


def test_vllm_direct_again_is_the_engine_with_nothing_in_front() -> None:
    """``again`` measures the engine as ``direct`` does: its URL, no relay's CPU."""
    bench = OverheadBench.__new__(OverheadBench)
    bench.engines = [SimpleNamespace(url="http://127.0.0.1:8000", pid=0)]  # type: ignore[list-item]
    bench.proxies = {"makeup": SimpleNamespace(url="http://127.0.0.1:9000")}  # type: ignore[dict-item]
    assert bench.url("again") == bench.url("direct") == "http://127.0.0.1:8000"
    assert bench.url("makeup") == "http://127.0.0.1:9000"
