"""Engine calls under way, and waiting for the ones under way now: each step
set up by hand (a call is a ``calling()`` block held open), no sleeps."""

from collections.abc import Callable
from contextlib import ExitStack, suppress

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from app.request.transit import Transit


async def test_with_no_call_under_way_nobody_waits() -> None:
    transit = Transit()
    with anyio.fail_after(1):
        await transit.answered(within=60)
    with transit.calling():
        pass
    with anyio.fail_after(1):
        await transit.answered(within=60)
    assert transit.under_way == 0


async def test_a_waiter_waits_for_the_calls_under_way_until_they_are_answered() -> None:
    transit = Transit()
    with ExitStack() as first, ExitStack() as second:
        first.enter_context(transit.calling())
        second.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            done = await _waiter(transit, group)
            assert transit.waiting
            first.close()
            await _passes(20)
            assert not done.is_set(), "a call under way was not waited for"
            second.close()
            await _answered(done)
    assert transit.under_way == 0
    assert not transit.waiting


async def test_calls_started_after_a_waiter_do_not_hold_it() -> None:
    """A steady stream of calls cannot keep a waiter waiting."""
    transit = Transit()
    with ExitStack() as before, ExitStack() as after:
        before.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            done = await _waiter(transit, group)
            after.enter_context(transit.calling())
            before.close()
            await _answered(done)
            assert transit.under_way == 1


async def test_a_later_waiter_waits_for_the_earlier_calls_too() -> None:
    """Calls are answered out of order: the second waiter's own calls
    answered first, it still waits for the first waiter's."""
    transit = Transit()
    with ExitStack() as early, ExitStack() as late:
        early.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            first_done = await _waiter(transit, group)
            late.enter_context(transit.calling())
            second_done = await _waiter(transit, group)
            late.close()
            await _passes(20)
            assert not second_done.is_set(), "the earlier call was not waited for"
            early.close()
            await _answered(first_done)
            await _answered(second_done)


async def test_a_call_that_hangs_holds_a_waiter_only_so_long() -> None:
    transit = Transit()
    with transit.calling():
        with anyio.fail_after(5):
            await transit.answered(within=0.05)
        assert transit.under_way == 1


async def test_a_call_that_fails_counts_as_answered() -> None:
    transit = Transit()
    failed = anyio.Event()

    async def call() -> None:
        with suppress(ConnectionError), transit.calling():
            await failed.wait()
            raise ConnectionError("engine gone")

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await _until(lambda: transit.under_way == 1)
        done = await _waiter(transit, group)
        failed.set()
        await _answered(done)


async def _waiter(transit: Transit, group: TaskGroup) -> anyio.Event:
    """A task waiting for the calls under way now; set once it returned.
    It is waiting when this returns: it runs from its start up to its wait."""
    done = anyio.Event()

    async def wait(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        await transit.answered(within=60)
        done.set()

    await group.start(wait)
    return done


async def _answered(done: anyio.Event) -> None:
    with anyio.fail_after(5):
        await done.wait()


async def _passes(n: int) -> None:
    """Let every ready task run ``n`` times."""
    for _ in range(n):
        await anyio.lowlevel.checkpoint()


async def _until(check: Callable[[], bool]) -> None:
    """Let the tasks run until ``check`` holds."""
    for _ in range(10_000):
        if check():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("condition never became true")
