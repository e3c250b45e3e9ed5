"""The hang guard of the hostile-input sweeps: a call that does not return within its time
raises :class:`Hang` instead of stalling the suite (POSIX ``setitimer``; each sweep skips itself
where that is missing)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


class Hang(BaseException):
    """Raised by the timer in a call that does not return (BaseException: no ``except
    Exception`` in the library swallows it)."""


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the block if it runs longer than ``seconds``."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
