"""The capacity surface (benchmarks/experiments/surface.py): its prompts share
no block, each point's two measures read the bursts right, and the page and
picture are written from a result. The bursts themselves run against a stack."""

from pathlib import Path

from app.capacity import plan_capacity, read_model_config
from benchmarks.experiments.burst import Run
from benchmarks.experiments.engine import EngineInfo
from benchmarks.experiments.surface import (
    Point,
    Surface,
    concurrency,
    distinct_prompts,
    gpu_plan,
    render,
)
from deploy.local import ROOT

TINY = ROOT / "tests" / "data" / "model_configs" / "gpt2.json"


def burst(n: int, running: int, preempted: int) -> tuple[int, Run]:
    return n, Run(
        requests=n,
        concurrency=n,
        seconds=1.0,
        output_tokens=n,
        latencies=[1.0] * n,
        failed=0,
        preemptions=preempted,
        engine_tokens=n,
        queue_time_mean=0.0,
        peak_running=running,
    )


def test_prompts_are_their_length_and_differ_from_the_first_token() -> None:
    prompts = distinct_prompts(40, 300, vocab=1024, salt=7)
    assert {len(p) for p in prompts} == {300}
    assert len({p[0] for p in prompts}) == 40
    assert all(10 <= token < 1024 for p in prompts for token in p)


def test_a_point_reads_what_ran_at_once_and_where_it_preempted() -> None:
    preempting = Point(100, 156, planned=11, bursts=[burst(11, 11, 0), burst(12, 12, 1)])
    assert (preempting.held, preempting.onset) == (11, 12)
    # Past what fits, the engine ran 23 and the rest waited: no preemption.
    queueing = Point(16, 112, planned=23, bursts=[burst(23, 23, 0), burst(24, 23, 0)])
    assert (queueing.held, queueing.onset) == (23, None)


def test_the_cap_bounds_the_surface() -> None:
    plan, _ = gpu_plan()
    assert concurrency(plan, 100, cap=None) > 256
    assert concurrency(plan, 100, cap=256) == 256
    assert concurrency(plan, 8192, cap=256) == plan.max_sequences(8192) < 256


def test_the_page_and_the_picture_are_written(tmp_path: Path) -> None:
    shape = read_model_config(TINY)
    probe = plan_capacity(shape, 0, 1024, 128)
    plan = plan_capacity(shape, 24 * probe.bytes_per_block, 1024, 128)
    gpu, text = gpu_plan()
    points = [Point(100, 156, 11, [burst(11, 11, 0), burst(12, 12, 1)])]
    info = EngineInfo(
        url="http://127.0.0.1:8001",
        model="tiny",
        max_model_len=1024,
        root=".models/tiny",
        cache={"num_gpu_blocks": "24", "block_size": "128", "num_gpu_blocks_override": "24"},
    )
    page = render(Surface(plan, None, gpu, text, points), info, "footer", tmp_path)
    assert (tmp_path / "surface-24-blocks.png").stat().st_size > 0
    assert "| 100 | 156 | 2 | 11 | 11 | +0 | 12 |" in page.read_text()
