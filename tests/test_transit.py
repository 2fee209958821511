"""Engine calls under way, and waiting for the ones under way now: each step
set up by hand (a call is a ``calling()`` block held open), no sleeps."""

from collections.abc import Callable
from contextlib import ExitStack, suppress

import anyio
import anyio.lowlevel

from app.transit import Transit


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
    done = anyio.Event()

    async def wait() -> None:
        await transit.answered(within=60)
        done.set()

    with ExitStack() as first, ExitStack() as second:
        first.enter_context(transit.calling())
        second.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await _until(lambda: transit.waiting)
            first.close()
            await _passes(20)
            assert not done.is_set(), "a call under way was not waited for"
            second.close()
            with anyio.fail_after(5):
                await done.wait()
    assert transit.under_way == 0
    assert not transit.waiting


async def test_calls_started_after_a_waiter_do_not_hold_it() -> None:
    """A steady stream of calls cannot keep a waiter waiting."""
    transit = Transit()
    done = anyio.Event()

    async def wait() -> None:
        await transit.answered(within=60)
        done.set()

    with ExitStack() as before, ExitStack() as after:
        before.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await _until(lambda: transit.waiting)
            after.enter_context(transit.calling())
            before.close()
            with anyio.fail_after(5):
                await done.wait()
            assert transit.under_way == 1


async def test_a_later_waiter_waits_for_the_earlier_calls_too() -> None:
    """Calls are answered out of order: the second waiter's own calls
    answered first, it still waits for the first waiter's."""
    transit = Transit()
    first_done, second_done = anyio.Event(), anyio.Event()

    async def wait(done: anyio.Event) -> None:
        await transit.answered(within=60)
        done.set()

    with ExitStack() as early, ExitStack() as late:
        early.enter_context(transit.calling())
        async with anyio.create_task_group() as group:
            group.start_soon(wait, first_done)
            await _until(lambda: transit.waiting)
            late.enter_context(transit.calling())
            group.start_soon(wait, second_done)
            await _passes(20)
            late.close()
            await _passes(20)
            assert not second_done.is_set(), "the earlier call was not waited for"
            early.close()
            with anyio.fail_after(5):
                await first_done.wait()
                await second_done.wait()


async def test_a_call_that_hangs_holds_a_waiter_only_so_long() -> None:
    transit = Transit()
    with transit.calling():
        with anyio.fail_after(5):
            await transit.answered(within=0.05)
        assert transit.under_way == 1


async def test_a_call_that_fails_counts_as_answered() -> None:
    transit = Transit()
    done = anyio.Event()

    async def wait() -> None:
        await transit.answered(within=60)
        done.set()

    failed = anyio.Event()

    async def call() -> None:
        with suppress(ConnectionError), transit.calling():
            await failed.wait()
            raise ConnectionError("engine gone")

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await _until(lambda: transit.under_way == 1)
        group.start_soon(wait)
        await _until(lambda: transit.waiting)
        failed.set()
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
