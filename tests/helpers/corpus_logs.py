"""Random logs of corpus changes, as a running job appends them: one strategy for the sample
blend's and the packed blend's property tests (tests/llm/test_mixlog_corpus.py,
tests/llm/packing/test_packed_corpus_changes.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from dataorder.llm.mixlog import MixtureLog

#: ``(step, method of MixtureLog, its arguments)``.
Action = tuple[int, str, tuple[Any, ...]]


def apply(log: MixtureLog, action: Action) -> None:
    """Append ``action`` to ``log`` (raises what the log raises)."""
    getattr(log, action[1])(action[0], *action[2])


def draw_actions(
    draw: Callable[[Any], Any],
    sizes: Sequence[int],
    weights: Sequence[float],
    steps: int,
    most: int,
) -> tuple[list[Action], MixtureLog]:
    """Entries for steps ``1 .. steps - 1`` (weights, grows by ``1 .. most``, retirements,
    additions of ``1 .. most`` documents), only those the log accepts, and the log that took
    them (its ``current_sizes`` are the sizes after every change)."""
    k = len(sizes)
    scratch = MixtureLog(list(weights), sizes=list(sizes))
    actions: list[Action] = []
    for step in range(1, steps):
        for _ in range(draw(st.integers(0, 2))):
            kind = draw(st.sampled_from(["grow", "grow", "retire", "add", "weights"]))
            d = draw(st.integers(0, k - 1))
            now = scratch.current_sizes or ()
            args: tuple[Any, ...]
            if kind == "grow":
                name, args = "grow", (d, now[d] + draw(st.integers(1, most)))
            elif kind == "retire":
                name, args = "retire", (d,)
            elif kind == "add":
                new = [draw(st.sampled_from([0.0, 0.5, 1.0])) for _ in range(k)]
                new[d] = 1.0
                name, args = "add_source", (d, draw(st.integers(1, most)), new)
            else:
                new = [draw(st.sampled_from([0.0, 1e-6, 1.0])) for _ in range(k)]
                name, args = "set_weights", (new,)
            try:
                apply(scratch, (step, name, args))
            except ValueError:
                continue  # refused (a retired or empty source's weight, ...): not in the plan
            actions.append((step, name, args))
    return actions, scratch
