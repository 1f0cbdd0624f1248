"""The faults of the parts around a loop, as the run's log records them (docs/faults.md).

The workbench writes each into the log of every run it is serving when it happens: the model
server exiting, restarting or given up on (app/llm/supervisor.py), model calls failing and
answering again (app/gateway/gateway.py), sandboxes that cannot start and start again, or stop
answering (sandbox/pool.py). `whale check` holds every rollout such a fault failed to have one
of these before it ended (app/read/invariants.py).
"""

import time
from collections.abc import Callable

FAULT_EVENTS = (
    "model_server_exited",
    "model_server_gave_up",
    "model_calls_failing",
    "sandbox_start_failing",
    "sandbox_lost",
)


class Outage:
    """A part that fails and comes back, told once each way: `{part}_failing` with the first
    failure's cause, `{part}_back` with how long it was down. Failures and successes in between
    tell nothing (a down model server fails every call in flight)."""

    def __init__(self, part: str, tell: Callable[[str, dict], None]):
        self.part = part
        self.tell = tell
        self.since: float | None = None  # when the first failure of this outage came

    def failed(self, why: str) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.tell(f"{self.part}_failing", {"why": why})

    def back(self) -> None:
        if self.since is not None:
            down_s = round(time.monotonic() - self.since, 1)
            self.since = None
            self.tell(f"{self.part}_back", {"down_s": down_s})
