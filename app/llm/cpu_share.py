"""How many threads the local model server decodes on: `WHALE_LOCAL_THREADS`.

A number fixes it. `auto` (the default) takes every core the process may run on while the rest
of the machine is idle, and gives them back as other work appears: once a second it reads how
busy those cores were (/proc/stat) less what this process itself used, and decodes on the cores
left over, at least one. Decoding threads that wait on each other thrash against a training job
or a test worker on the same cores: measured on two busy cores, two threads took 2.2 s per step
at a batch of 16 where one took 0.19 s.
"""

import os
import time

import torch

PERIOD_S = 1.0  # how often `auto` looks again
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _busy_s(cores: list[int]) -> float | None:
    """Seconds the given cores have spent busy since boot (all processes), or None if unknown."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    names = {f"cpu{c}" for c in cores}
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name in names:
            ticks = [int(x) for x in fields]
            busy += sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
    return busy / CLOCK_TICKS


def threads_setting(value: str | None) -> int | None:
    """The fixed thread count `WHALE_LOCAL_THREADS` asks for, or None for `auto`."""
    if value in (None, "", "auto"):
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"WHALE_LOCAL_THREADS={value!r}: use a positive number or 'auto'")
    return int(value)


class ThreadShare:
    """Sets torch's thread count for the calling thread (the decoding thread: OpenMP keeps the
    setting per thread), fixed or following the machine's load."""

    def __init__(self, setting: str | None = None):
        self.fixed = threads_setting(
            os.environ.get("WHALE_LOCAL_THREADS") if setting is None else setting
        )
        self.cores = _cores()
        self._looked = time.monotonic()
        self._busy = _busy_s(self.cores)
        self._own = sum(os.times()[:2])
        torch.set_num_threads(self.fixed or 1)  # `auto` starts polite and grows once it looked

    def adjust(self) -> None:
        """For `auto`, at most once per PERIOD_S: as many threads as cores the rest leaves idle."""
        now = time.monotonic()
        if self.fixed or now - self._looked < PERIOD_S or self._busy is None:
            return
        busy, own = _busy_s(self.cores), sum(os.times()[:2])
        others = ((busy - self._busy) - (own - self._own)) / (now - self._looked)
        self._looked, self._busy, self._own = now, busy, own
        threads = max(1, min(len(self.cores), round(len(self.cores) - others)))
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
