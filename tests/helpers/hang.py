"""The hang guard of the hostile-input sweeps: a call that does not return within its time
raises :class:`Hang` instead of stalling the suite (POSIX ``setitimer``; each sweep skips itself
where that is missing).

NOTE [ The hang guard counts CPU time ]
The budget is CPU time of this process (``ITIMER_PROF``), not wall time: the suite runs on two
xdist workers on CI's two cores, beside mypy and other jobs, so a call that answers in
milliseconds can wait seconds of wall time for a core, and a wall-time budget would call it a
hang. A spinning loop (the hangs these sweeps look for) spends CPU time at once and is caught at
the budget. A call blocked without spending CPU (a sleep, a lock, a pipe) is caught by the wall
time backstop, :data:`WALL_FACTOR` times the budget. pytest-timeout's own timer (``ITIMER_REAL``,
SIGALRM) is put back, less the time spent here, when the block ends.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from types import FrameType

#: The wall-time backstop for a block that waits without spending CPU, in budgets.
WALL_FACTOR = 10.0


class Hang(BaseException):
    """Raised by the timer in a call that does not return (BaseException: no ``except
    Exception`` in the library swallows it)."""


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the block if it spends more than ``seconds`` of CPU time, or
    waits ``WALL_FACTOR * seconds`` of wall time."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous_prof = signal.signal(signal.SIGPROF, alarm)
    previous_alarm = signal.signal(signal.SIGALRM, alarm)
    started = time.monotonic()
    wall = WALL_FACTOR * seconds
    outer, _ = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, if it set one
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, min(wall, outer) if outer > 0 else wall)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous_prof)
        signal.signal(signal.SIGALRM, previous_alarm)
        if outer > 0:
            left = outer - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
