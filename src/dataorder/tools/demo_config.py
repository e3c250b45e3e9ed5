"""The demo's configuration and report: what the parent and every process share.

See :mod:`dataorder.tools.demo` for what the demo does.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from dataorder._validate import check_int, fail
from dataorder.core.keys import MAX_SEED
from dataorder.tools.demo_samplers import DEMO_SAMPLERS

__all__ = [
    "BUGS",
    "MAX_DEMO_PROCESSES",
    "MAX_DEMO_TIMEOUT",
    "MESH_DIMS",
    "MIN_DEMO_STEPS",
    "SAMPLERS",
    "DemoConfig",
    "DemoError",
    "DemoReport",
    "MeshShape",
    "PhaseSpec",
    "SamplerResult",
    "check_demo_world",
    "max_demo_processes",
]

#: The samplers the demo trains with, in report order: the names of the registry,
#: :data:`~dataorder.tools.demo_samplers.DEMO_SAMPLERS`.
SAMPLERS: tuple[str, ...] = tuple(DEMO_SAMPLERS)
#: Mistakes :class:`DemoConfig` can make on purpose (``inject_bug``), to show the checks fail.
BUGS: tuple[str, ...] = ("global-world", "no-resume", "skip-batches")
#: The job's mesh dims, in :class:`MeshShape` order; ``"dp"`` is data-parallel.
MESH_DIMS: tuple[str, ...] = ("dp", "tp", "cp")


#: The most processes one phase of the demo starts, however many cores the machine has: each
#: process imports torch (a few hundred MB), and the job is a demonstration, not a load test.
MAX_DEMO_PROCESSES = 64
#: The longest a phase may be given (``timeout``), in seconds: a day. (A deadline must also fit
#: ``datetime.timedelta``, which the process group's timeout is.)
MAX_DEMO_TIMEOUT = 86400.0
#: Global batches the shipped token rows (the smallest dataset, 410 rows) must hold, so both
#: phases train: ``micro_batch_size * lcm(dp before, dp after) <= 410 // MIN_DEMO_STEPS``.
MIN_DEMO_STEPS = 4
_TOKEN_ROWS = 410  # rows of tokens.npy (data/README.md); test_demo checks it


def max_demo_processes() -> int:
    """The processes one phase may start on this machine: 4 per core (``os.cpu_count()``), at
    least 8 (the default meshes, which run on 2 cores) and at most :data:`MAX_DEMO_PROCESSES`."""
    return min(MAX_DEMO_PROCESSES, max(8, 4 * (os.cpu_count() or 1)))


def check_demo_world(mesh: MeshShape, name: str, why: str = "") -> None:
    """Refuse a mesh of more processes than :func:`max_demo_processes`, naming ``name``.

    Raises:
        ValueError: ``"<name> must be a mesh of at most N processes on this machine ...;
            got <name>=dp,tp,cp"``, with ``why`` (what made the mesh) appended to the value.
    """
    cap = max_demo_processes()
    if mesh.world > cap:
        fail(
            name,
            f"a mesh of at most {cap} processes on this machine (4 per core, at least 8, at "
            f"most {MAX_DEMO_PROCESSES}; this one has {mesh.world})",
            f"{mesh.dp},{mesh.tp},{mesh.cp}{why}",
        )


class DemoError(RuntimeError):
    """The demo could not run to the end (a process failed or timed out)."""


@dataclass(frozen=True)
class MeshShape:
    """A ``(dp, tp, cp)`` device mesh shape; the job has ``dp * tp * cp`` processes."""

    dp: int
    tp: int
    cp: int

    def __post_init__(self) -> None:
        for name in MESH_DIMS:
            check_int(name, getattr(self, name), min_value=1)

    @classmethod
    def parse(cls, text: str, *, name: str = "mesh") -> MeshShape:
        """Parse ``"2,2,2"`` (dp, tp, cp).

        Raises:
            ValueError: If ``text`` is not three positive ints separated by commas.
        """
        parts = text.replace("x", ",").split(",")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3 or min(values) < 1:
            fail(name, "three positive ints dp,tp,cp such as 2,2,2", text)
        return cls(*values)

    @property
    def world(self) -> int:
        """Number of processes."""
        return self.dp * self.tp * self.cp

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(dp, tp, cp)``."""
        return (self.dp, self.tp, self.cp)

    def __str__(self) -> str:
        return f"dp={self.dp} tp={self.tp} cp={self.cp}"


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs.

    Attributes:
        first_mesh: Mesh of the phase before the restart.
        mesh: Mesh of the phase after it (another data-parallel size, to show an elastic resume).
        micro_batch_size: Samples per rank and micro-batch, for every sampler; the global
            batch it makes must leave :data:`MIN_DEMO_STEPS` global batches in the token rows.
        seed: The seed of every sampler and of the model initialisation, in ``[0, 2**63)``.
        timeout: Seconds each phase may take before its processes are killed, at most
            :data:`MAX_DEMO_TIMEOUT`.
        samplers: Which samplers to train with (a subset of :data:`SAMPLERS`).
        inject_bug: None, or a classic mistake to make on purpose, to see the checks fail
            (:data:`BUGS`): ``"global-world"`` builds every sampler with the global rank and
            world size instead of the data-parallel ones (TP/CP peers then read different
            data); ``"no-resume"`` restarts without loading the checkpoint (the first half of
            the epoch is read twice); ``"skip-batches"`` restarts from the checkpoint's model
            and optimizer but not its data order: every rank skips as many micro-batches as it
            had read before (a per-rank loader position), which on another data-parallel size
            is another place in the epoch (part of the epoch is read twice).
    """

    first_mesh: MeshShape = field(default_factory=lambda: MeshShape(4, 2, 1))
    mesh: MeshShape = field(default_factory=lambda: MeshShape(2, 2, 2))
    micro_batch_size: int = 4
    seed: int = 1234
    timeout: float = 120.0
    samplers: tuple[str, ...] = SAMPLERS
    inject_bug: str | None = None

    def __post_init__(self) -> None:
        for name in ("first_mesh", "mesh"):
            if not isinstance(getattr(self, name), MeshShape):
                fail(name, "a MeshShape", getattr(self, name), TypeError)
        check_int("micro_batch_size", self.micro_batch_size, min_value=1)
        check_int("seed", self.seed, min_value=0, max_value=MAX_SEED)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            fail("timeout", "a positive number of seconds", self.timeout, TypeError)
        if not 0 < self.timeout <= MAX_DEMO_TIMEOUT:  # NaN fails too
            fail(
                "timeout",
                f"a positive number of seconds, at most {MAX_DEMO_TIMEOUT:g}",
                self.timeout,
            )
        lcm = math.lcm(self.first_mesh.dp, self.mesh.dp)
        if lcm > _TOKEN_ROWS // MIN_DEMO_STEPS:  # not even a micro-batch of 1 fits
            fail(
                "mesh",
                f"a mesh whose data-parallel size has an lcm of at most "
                f"{_TOKEN_ROWS // MIN_DEMO_STEPS} with first_mesh's ({self.first_mesh.dp}), so "
                f"{MIN_DEMO_STEPS} global batches fit in the {_TOKEN_ROWS} token rows",
                self.mesh,
            )
        largest = _TOKEN_ROWS // MIN_DEMO_STEPS // lcm
        if self.micro_batch_size > largest:
            fail(
                "micro_batch_size",
                f"at most {largest}: the global batch, micro_batch_size x lcm(dp before, dp "
                f"after) = micro_batch_size x {math.lcm(self.first_mesh.dp, self.mesh.dp)}, must "
                f"leave {MIN_DEMO_STEPS} global batches in the {_TOKEN_ROWS} token rows",
                self.micro_batch_size,
            )
        unknown = [s for s in self.samplers if s not in SAMPLERS]
        if unknown or not self.samplers or len(set(self.samplers)) != len(self.samplers):
            fail("samplers", "distinct names among " + ", ".join(SAMPLERS), self.samplers)
        if self.inject_bug is not None and self.inject_bug not in BUGS:
            fail("inject_bug", "None or one of " + ", ".join(BUGS), self.inject_bug)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step in both phases: ``micro_batch_size x lcm(dp before, after)``.

        The phase with fewer data-parallel ranks accumulates gradients over more micro-batches.
        """
        return self.micro_batch_size * math.lcm(self.first_mesh.dp, self.mesh.dp)

    @property
    def dp_sizes(self) -> tuple[int, int]:
        """The data-parallel sizes before and after the restart."""
        return (self.first_mesh.dp, self.mesh.dp)

    def accumulation(self, mesh: MeshShape) -> int:
        """Micro-batches per optimizer step on ``mesh``."""
        return self.global_batch_size // (self.micro_batch_size * mesh.dp)


@dataclass(frozen=True)
class PhaseSpec:
    """What every process of one phase is told: the config, the phase, its mesh, where to meet
    (the parent's store port) and where to write."""

    config: DemoConfig
    phase: int
    mesh: MeshShape
    port: int
    workdir: str


# -- results --------------------------------------------------------------------------------------
@dataclass
class SamplerResult:
    """What one sampler did over both phases, and the verdict of every check.

    Attributes:
        name: One of :data:`SAMPLERS`.
        steps: Optimizer steps before and after the restart.
        micro_batches: Micro-batches per rank before and after the restart.
        checks: Check name -> passed.
        details: Check name -> one line saying what was found.
        dataset_size: Units in the dataset (``unit``): its samples, or its tokens.
        lost: Units never read beyond what the sampler reports as dropped.
        repeated: Extra reads (or padding units) beyond what the sampler reports as padding.
        dropped: Units the sampler reports as dropped in the epoch.
        padded: Padding units the sampler reports in the epoch.
        loss: Mean training loss of the first and of the last step.
        notes: What the phase shows beyond the checks (a fitted bucket plan, a mixture's
            schedule), one line each.
        unit: What the counts count: ``"sample"``, or ``"token"`` for packed rows.
    """

    name: str
    steps: tuple[int, int]
    micro_batches: tuple[int, int]
    checks: dict[str, bool]
    details: dict[str, str]
    dataset_size: int
    lost: int
    repeated: int
    dropped: int
    padded: int
    loss: tuple[float, float]
    notes: list[str] = field(default_factory=list)
    unit: str = "sample"

    @property
    def ok(self) -> bool:
        """True if every check passed."""
        return all(self.checks.values())


@dataclass
class DemoReport:
    """The outcome of :func:`run_demo`.

    Attributes:
        config: What ran.
        results: One per sampler.
        seconds: Wall time of each phase and in total.
        outputs: Name -> path of what was written (report, plot, checkpoints).
    """

    config: DemoConfig
    results: list[SamplerResult]
    seconds: dict[str, float]
    outputs: dict[str, str]

    @property
    def ok(self) -> bool:
        """True if every check of every sampler passed."""
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the report."""
        out = asdict(self)
        out["ok"] = self.ok
        out["config"]["global_batch_size"] = self.config.global_batch_size
        return out
