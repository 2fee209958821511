"""The simulated replicas' parts that run without Redis."""

import asyncio

from benchmarks.shared_state_replicas import Pinger


class DroppingClient:
    """A client whose PING drops a cancellation that lands while it is out,
    as redis-py's does on Python 3.11 when the cancellation lands as the
    command's send completes (its ``asyncio.wait_for`` returns the result
    instead)."""

    def __init__(self) -> None:
        self.out = asyncio.Event()

    async def ping(self) -> bool:
        self.out.set()
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            pass
        finally:
            self.out.clear()
        return True


async def test_the_pinger_stops_when_a_ping_drops_the_cancellation() -> None:
    client = DroppingClient()
    pinger = Pinger(client, rate=1e6)
    pinger.start()
    # Stopped while a PING is out: a cancellation would be dropped there.
    await client.out.wait()
    stopping = asyncio.create_task(pinger.stop())
    try:
        done, _ = await asyncio.wait({stopping}, timeout=30)
        assert stopping in done, "the pinger still PINGs after it was stopped"
        assert pinger.rtts
    finally:
        # A pinger that ignored stop() must not PING on in the session.
        pinger._stopping = True
        await stopping
