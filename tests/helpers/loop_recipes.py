"""Which loop recipes a contract case runs in the default suite and which in the slow one.

The loop recipes (:mod:`dataorder.testing.recipes`) resume a 3-epoch run after every batch
under each training loop: seconds per case, and each worker recipe (:data:`WORKER_RECIPES`)
seconds more. So the default suite (CI) runs them on few cases, and the slow suite
(``-m slow``) on the rest of the matrix. A case says which with a :class:`Loops`; the contract
table (tests/test_contract_table.py) runs ``loops.default`` inside its default test and
``loops.slow`` in a test marked slow, and checks the policy:

* at most one case of each source x batching runs loop recipes by default;
* one case in the whole table runs the worker recipes by default (:data:`EVERY_LOOP`), so the
  default suite still sees a loader's worker processes run a sampler ahead;
* every source x batching runs every plain loop (:data:`PLAIN`) on some case, at least in the
  slow suite;
* every recipe runs by default on some case, so the default suite still runs each loop once.

The plain loops cost a tenth of a second per case, but for :data:`COSTLY_PLAIN` (a peek also
checks loaders with worker processes; a Lightning ``Trainer`` per resume): the usual default
case of a source x batching runs the light ones (:data:`LIGHT_LOOPS`), and two cases of the
table run the costly ones by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dataorder.testing import RECIPES, WORKER_RECIPES

__all__ = [
    "COSTLY_PLAIN",
    "EVERY_LOOP",
    "LIGHT_LOOPS",
    "NO_LOOP",
    "PLAIN",
    "PLAIN_LOOPS",
    "SLOW_EVERY_LOOP",
    "SLOW_PLAIN_LOOPS",
    "Loops",
    "by_default",
    "policy_problems",
]

#: The recipes without worker processes, in :data:`RECIPES` order.
PLAIN: tuple[str, ...] = tuple(r for r in RECIPES if r not in WORKER_RECIPES)
#: The plain recipes that cost seconds per case: a peek is checked with workers too, and the
#: Lightning loops build a ``Trainer`` at every resume.
COSTLY_PLAIN: tuple[str, ...] = ("peek", "lightning", "lightning-reload")


@dataclass(frozen=True)
class Loops:
    """The loop recipes one contract case runs: ``default`` in the default suite, ``slow`` only
    in the slow one (names from :data:`RECIPES`, no name in both)."""

    default: tuple[str, ...] = ()
    slow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for part, names in (("default", self.default), ("slow", self.slow)):
            unknown = [r for r in names if r not in RECIPES]
            if unknown:
                raise ValueError(f"{part} must be names from RECIPES; got unknown {unknown}")
        both = sorted(set(self.default) & set(self.slow))
        if both:
            raise ValueError(f"a recipe runs either by default or slow, not both; got {both}")

    @property
    def every(self) -> tuple[str, ...]:
        """Every recipe the case runs, default and slow, in :data:`RECIPES` order."""
        return tuple(r for r in RECIPES if r in self.default or r in self.slow)


def by_default(*recipes: str, then: tuple[str, ...] = PLAIN) -> Loops:
    """``recipes`` by default, the rest of ``then`` in the slow suite."""
    return Loops(recipes, tuple(r for r in then if r not in recipes))


#: No loop recipe: the direct checks only.
NO_LOOP = Loops()
#: The case of its source x batching that runs the loops: the plain ones by default, the worker
#: ones in the slow suite.
PLAIN_LOOPS = Loops(PLAIN, WORKER_RECIPES)
#: The plain loops but the costly ones by default, those and the worker ones in the slow suite.
LIGHT_LOOPS = by_default(*(r for r in PLAIN if r not in COSTLY_PLAIN), then=RECIPES)
#: Every loop by default, the worker ones included: one case in the whole table.
EVERY_LOOP = Loops(RECIPES)
#: The plain loops, in the slow suite only: another case of a source x batching.
SLOW_PLAIN_LOOPS = Loops((), PLAIN)
#: Every loop, in the slow suite only.
SLOW_EVERY_LOOP = Loops((), RECIPES)


def policy_problems(cases: Sequence[tuple[str, Loops]]) -> list[str]:
    """What in ``cases`` (each ``(its source x batching, its loops)``) breaks the policy of the
    module docstring; ``[]`` if nothing does."""
    problems = []
    rows = dict.fromkeys(row for row, _ in cases)
    for row in rows:
        loops = [lo for r, lo in cases if r == row]
        if sum(bool(lo.default) for lo in loops) > 1:
            problems.append(f"{row}: more than one case runs loop recipes by default")
        missing = [r for r in PLAIN if not any(r in lo.every for lo in loops)]
        if missing:
            problems.append(f"{row}: no case runs the loops {missing}")
    workers = sum(bool(set(WORKER_RECIPES) & set(lo.default)) for _, lo in cases)
    if workers != 1:
        problems.append(f"{workers} cases run the worker recipes by default, not one")
    never = [r for r in RECIPES if not any(r in lo.default for _, lo in cases)]
    if never:
        problems.append(f"no case runs the loops {never} by default")
    return problems
