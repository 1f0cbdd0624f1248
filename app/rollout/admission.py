"""Admission: how many rollouts are in flight, set by the model server's own queue.

A rollout started while the server already has requests waiting only adds to the wait: with the
harness clock paused during model calls (sandbox/pool.py) it no longer fails for it, but it holds
a sandbox, and a call that waits past the client's timeout is an infrastructure failure. So the
evaluator asks for a slot before each rollout, and the window of slots follows the queue that the
model server reports on its Prometheus `/metrics` (vLLM's `vllm:num_requests_waiting`, the local
server's `whale:num_requests_waiting`, summed over replicas):

- requests waiting beyond `max_waiting`: the window shrinks to what the server is serving now
  (rollouts in flight minus requests waiting), so the next rollout starts when one ends;
- no queue and every slot taken: the window doubles, up to `upper`, where it also starts.

`upper` is WHALE_CONCURRENCY (32) where it is set or the server's batch is unknown; on vLLM it
is what the servers can batch (`max_num_seqs` times replicas, `in_flight_cap`), so the rollouts
of a GPU-sized step fill the batch, and the queue still holds the window back.

"Waiting" is vLLM's: requests the server could not schedule at its next step (the batch is
full), not requests that will join it then.

A backend without such metrics (a hosted endpoint) is admitted up to `upper`, as before. One
Admission serves every evaluation of the process, since they share the model server; while a
colocated training turn has vLLM asleep it gives no slot at all (`paused`).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp

log = logging.getLogger(__name__)

QUEUE_METRICS = ("vllm:num_requests_waiting", "whale:num_requests_waiting")


def waiting_requests(metrics_text: str) -> int | None:
    """The requests waiting in a server's queue, from its Prometheus text; None if it says not."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in QUEUE_METRICS:
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return int(total) if seen else None


def in_flight_cap(concurrency: int, explicit: bool, batch: int | None) -> tuple[int, str]:
    """The most rollouts in flight at once, and why: WHALE_CONCURRENCY when it is set, else what
    the model servers batch (`batch`, when known), never less than the default."""
    if explicit or not batch:
        return concurrency, "WHALE_CONCURRENCY" if explicit else "the default (WHALE_CONCURRENCY)"
    if batch <= concurrency:
        return concurrency, "the default (WHALE_CONCURRENCY)"
    return batch, "what the vLLM servers batch (max_num_seqs x replicas)"


class ServerQueue:
    """Reads the queue length of the model servers at `api_urls` (their `.../v1` URLs)."""

    def __init__(self, api_urls: list[str]):
        self.urls = [u.rstrip("/").removesuffix("/v1") + "/metrics" for u in api_urls]
        self.available = True  # False once a server has no queue metric: stop asking
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self) -> int | None:
        if not self.available:
            return None
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        total = 0
        for url in self.urls:
            try:
                async with self._session.get(url) as response:
                    text = await response.text() if response.status == 200 else ""
            except (aiohttp.ClientError, TimeoutError):
                return None  # unreachable now: the rollouts' own calls will say so
            waiting = waiting_requests(text)
            if waiting is None:
                log.info("admission: %s reports no queue; rollouts are not held back", url)
                self.available = False
                return None
            total += waiting
        return total

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class Admission:
    def __init__(
        self,
        upper: int,
        queue: Callable[[], Awaitable[int | None]] | None = None,
        max_waiting: int = 0,
        poll_s: float = 0.25,
    ):
        self.upper = upper
        self.queue = queue
        self.max_waiting = max_waiting
        self.poll_s = poll_s
        self.window = upper
        self.in_flight = 0
        self.peak = 0  # most rollouts in flight at once (reported by benchmarks and tests)
        self.held_s = 0.0  # time rollouts waited for a slot, summed
        self._changed = asyncio.Condition()
        self._polled = 0.0
        self.closed = False  # paused(): no slot is given until it ends
        self._pausing = asyncio.Lock()  # one paused() at a time

    @asynccontextmanager
    async def slot(self):
        """Hold one rollout slot while the block runs."""
        asked = time.monotonic()
        async with self._changed:
            while self.closed or self.in_flight >= min(self.window, self.upper):
                try:
                    await asyncio.wait_for(self._changed.wait(), self.poll_s)
                except TimeoutError:
                    pass
                if not self.closed:
                    await self._poll()
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        self.held_s += time.monotonic() - asked
        try:
            yield
        finally:
            async with self._changed:
                self.in_flight -= 1
                # one waiter takes the freed slot; all of them only while a paused() waits for
                # none in flight (waking thousands of queued rollouts per release costs CPU)
                if self.closed:
                    self._changed.notify_all()
                else:
                    self._changed.notify()

    @asynccontextmanager
    async def paused(self):
        """No rollout holds a slot while the block runs: those in flight finish first, new ones
        wait until it ends. What a colocated training turn holds while vLLM sleeps (a sleeping
        server refuses every call); the turns of several runs take turns."""
        async with self._pausing:
            try:
                async with self._changed:
                    self.closed = True
                    await self._changed.wait_for(lambda: self.in_flight == 0)
                yield
            finally:
                async with self._changed:
                    self.closed = False
                    self._changed.notify_all()

    async def _poll(self) -> None:
        """Move the window by what the server's queue says (at most once per poll_s)."""
        if self.queue is None or time.monotonic() - self._polled < self.poll_s:
            return
        self._polled = time.monotonic()
        waiting = await self.queue()
        if waiting is None:
            self.window = self.upper
        elif waiting > self.max_waiting:
            self.window = max(1, self.in_flight - waiting)
        elif self.in_flight >= self.window:
            self.window = min(self.upper, self.window * 2)
