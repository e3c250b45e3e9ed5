"""What a sampler declares: the fields, layout, extras and compat modes its states are built from.

:class:`~dataorder.core.assembly.AssembledSampler` derives a sampler's state, ``from_state``,
``describe_progress`` and its kind's registration from one :class:`Schema` (the table in
:mod:`dataorder.core.assembly` says what comes from what). This module holds the declaration's
parts; :mod:`dataorder.core.assembly` re-exports every one of them, so either import works.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dataorder._validate import fail
from dataorder.core.batching import BATCHES, BatchRule
from dataorder.core.state import Scalar

__all__ = [
    "Decode",
    "Detail",
    "Extra",
    "Field",
    "Foreign",
    "Given",
    "Layout",
    "Mode",
    "Modes",
    "OrderStrategy",
    "Schema",
    "flag",
    "recorded",
]

#: A state's config value -> the constructor keywords it gives back.
Decode = Callable[[Scalar], Mapping[str, Any]]


@dataclass(frozen=True)
class Field:
    """One ``config.<name>`` field of the state.

    Attributes:
        name: The field (without ``config.``).
        read: The sampler's value (an int or a str); None leaves the field out of the state.
        args: For a recorded constructor argument, the keywords its value gives back to the
            constructor in :meth:`AssembledSampler.from_state`; None for a field that is only
            compared on load (a digest, a construction version).
        label: How a state that differs in this field names it, when its key is not the name
            of the argument a user set (``config.interleaved`` is ``interleave_unit``), or when
            the field is left out of some states: then the label says when.
        optional: Whether some states leave the field out (its ``read`` gives None); only an
            optional field may be absent from a state ``from_state`` rebuilds.
    """

    name: str
    read: Callable[[Any], Scalar | None]
    args: Decode | None = None
    label: str | None = None
    optional: bool = False


def _scalar(name: str, value: object) -> Scalar:
    if isinstance(value, bool):  # a flag recorded through recorded(): always 0/1
        return int(value)
    if isinstance(value, int | str):
        return value
    fail(name, "an int or str", value, TypeError)


def recorded(arg: str, *, none_as: int | None = None) -> Field:
    """A constructor argument recorded as ``config.<arg>`` and read from the sampler's attribute
    of that name. ``none_as`` records ``None`` as that int (and reads it back as ``None``)."""

    def read(sampler: Any) -> Scalar:
        value = getattr(sampler, arg)
        return none_as if value is None and none_as is not None else _scalar(arg, value)

    def args(value: Scalar) -> Mapping[str, Any]:
        return {arg: None if none_as is not None and value == none_as else value}

    return Field(arg, read, args)


def flag(arg: str, *, name: str | None = None) -> Field:
    """A bool constructor argument, recorded as 0 or 1."""
    key = name or arg

    def read(sampler: Any) -> Scalar:
        return int(bool(getattr(sampler, arg)))

    def args(value: Scalar) -> Mapping[str, Any]:
        if value != 0 and value != 1:
            fail(f"state['config.{key}']", "0 or 1", value)
        return {arg: bool(value)}

    return Field(key, read, args)


@dataclass(frozen=True)
class Given:
    """A constructor argument a state does not hold (or holds only as a digest, which loading
    the state then checks): :meth:`AssembledSampler.from_state` takes it from the caller.

    Attributes:
        name: The constructor keyword.
        what: What the caller must give, for the error when it is missing; or a function of
            the state's configuration (without ``config.``) that says it.
        required: Whether the constructor cannot do without it (else its default applies); or
            a function of the state's configuration that says whether this state needs it.
    """

    name: str
    what: str | Callable[[Mapping[str, object]], str]
    required: bool | Callable[[Mapping[str, object]], bool] = True

    def needed(self, config: Mapping[str, object]) -> bool:
        """Whether a state with ``config`` cannot be rebuilt without it."""
        return self.required(config) if callable(self.required) else self.required

    def describe(self, config: Mapping[str, object]) -> str:
        """What the caller must give for a state with ``config``."""
        return self.what(config) if callable(self.what) else self.what


@dataclass(frozen=True)
class Layout:
    """The data-parallel layout a sampler records (``layout.*``, never the rank).

    Attributes:
        rank: The constructor keyword of the data-parallel rank.
        size: The constructor keyword, attribute and layout field of the data-parallel size.
        others: Further layout fields, each a constructor keyword and attribute of the same
            name (``micro_batch_size``).
    """

    rank: str
    size: str
    others: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """Every layout field, in the order a state lists them."""
        return (*self.others, self.size)


#: ``check(sampler, value, epoch, progress, saved_layout)``: refuse a saved value, naming it.
ExtraCheck = Callable[[Any, object, int, Mapping[str, int], Mapping[str, int]], None]


@dataclass(frozen=True)
class Extra:
    """A key a sampler (or its strategy) adds to its state beside the progress.

    Attributes:
        name: The state key.
        save: ``save(sampler, epoch, progress)``: its value with the sampler's cursor at
            ``(epoch, progress)`` (a state is written for any position, not only the live
            cursor's: :meth:`~dataorder.core.cursor.CursorSampler.state_after`); None leaves it
            out of the state (a sampler configured without what it records).
        check: Called on load with the saved value, after the rest of the state was checked;
            raises ValueError naming ``state[name]``.
        required: Whether a state without it is refused (else it is checked when present); or
            a function of the sampler that says it.
    """

    name: str
    save: Callable[[Any, int, Mapping[str, int]], Scalar | None]
    check: ExtraCheck
    required: bool | Callable[[Any], bool] = True

    def needed(self, sampler: Any) -> bool:
        """Whether ``sampler`` refuses a state without this key."""
        return self.required(sampler) if callable(self.required) else self.required


@dataclass(frozen=True)
class Foreign:
    """Another library's checkpoint of the same order, which a compat strategy loads.

    Attributes:
        keys: The keys that identify it (exactly these).
        what: What it is, for messages ("a torchdata StatefulDistributedSampler state").
        place: ``place(sampler, state) -> (epoch, progress)``: where it puts the cursor;
            raises ValueError for a value out of range.
    """

    keys: frozenset[str]
    what: str
    place: Callable[[Any, Mapping[str, Any]], tuple[int, dict[str, int]]]


@dataclass(frozen=True)
class Detail:
    """A line of :meth:`AssembledSampler.describe_progress` (what ``dataorder inspect`` shows)."""

    label: str
    text: Callable[[Any], str]


class OrderStrategy(Protocol):
    """Which data each global position of an epoch holds: one protocol for every family.

    A strategy is built once, with the seed bound, when its sampler is built. Each family adds
    its own question (a Megatron order maps a rank's positions to samples, a bucket order says
    which bucket and which place); what every strategy answers is here.
    """

    @property
    def name(self) -> str:
        """The name a state records for it (``config.order`` or ``config.compat``)."""
        ...

    @property
    def elastic(self) -> bool:
        """Whether a state saved on another data-parallel layout may be loaded."""
        ...

    def config(self) -> dict[str, Scalar]:
        """The fields the order depends on beyond its name (construction versions, a layout it
        bakes in), recorded in the state's configuration."""
        ...


@dataclass(frozen=True)
class Mode:
    """One compat mode of a family: what ``compat=`` chooses.

    Attributes:
        name: The ``compat=`` value (``"default"`` for the family's own order).
        build: Builds the strategy, from arguments the family's sampler passes (the seed is
            always one: a strategy binds it when it is built).
        records: The names its states record, each with the constructor keywords that choose
            it again (``{"sharded": {"compat": None, "data_sharding": True}}``).
        summary: One line for the docs and the command line's help.
        extras: Keys its states add (:class:`Extra`).
        foreign: The other libraries' checkpoints it loads (:class:`Foreign`).
        layout_in_config: Whether the mode's strategy records the layout in the configuration
            (it bakes the layout in), so the state does not repeat it as ``layout.*`` (a state
            that does still loads, if both agree).
    """

    name: str
    build: Callable[..., Any]
    records: Mapping[str, Mapping[str, Any]]
    summary: str
    extras: tuple[Extra, ...] = ()
    foreign: tuple[Foreign, ...] = ()
    layout_in_config: bool = False


@dataclass(frozen=True)
class Modes:
    """A family's compat registry: its :class:`Mode`\\ s, and the state field that names them.

    Attributes:
        family: The family, for messages ("the Megatron random sampler").
        field: The ``config.*`` field that records the strategy's name (``"order"``).
        modes: The modes, the family's own first.
        arg: The constructor keyword that chooses a mode.
        none: Whether ``None`` chooses the family's own mode too (the Megatron samplers'
            spelling).
    """

    family: str
    field: str
    modes: tuple[Mode, ...]
    arg: str = "compat"
    none: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The values ``compat=`` takes (what the command line offers)."""
        return tuple(m.name for m in self.modes)

    def choose(self, value: object) -> Mode:
        """The mode ``value`` names (``None`` means the family's own, the first).

        Raises:
            ValueError: If no mode has that name; the message lists them.
        """
        if value is None and self.none:
            return self.modes[0]
        if not isinstance(value, str) or value not in self.names:
            what = "one of " + ", ".join(repr(n) for n in self.names)
            fail(self.arg, f"None or {what}" if self.none else what, value)
        return next(m for m in self.modes if m.name == value)

    def mode_of(self, recorded_name: str) -> Mode:
        """The mode whose states record ``recorded_name``."""
        for mode in self.modes:
            if recorded_name in mode.records:
                return mode
        known = sorted(n for m in self.modes for n in m.records)
        fail(
            f"state['config.{self.field}']", "one of " + ", ".join(map(repr, known)), recorded_name
        )

    def args_of(self, recorded_name: Scalar) -> Mapping[str, Any]:
        """The constructor keywords that choose the order a state recorded."""
        return self.mode_of(str(recorded_name)).records[str(recorded_name)]


@dataclass(frozen=True)
class Schema:
    """What a sampler's state holds and how the sampler is rebuilt from it.

    Attributes:
        kind: The state's ``kind``.
        fields: The sampler's ``config.*`` fields (:class:`Field`), in the order a state lists
            them (the first field that differs is the one an error names).
        layout: The data-parallel layout (:class:`Layout`).
        batching: What one rank's item at one step is (:mod:`dataorder.core.batching`).
        batching_of: ``rule(sampler)``, for a rule that depends on the configuration (packed rows
            of ``seq_len`` tokens); it replaces ``batching``, which then only says whether an
            item is a batch.
        modes: The compat registry of the order strategy, or None for a sampler with one order.
        given: What :meth:`AssembledSampler.from_state` takes from the caller (:class:`Given`).
        extras: Keys the state adds after the progress (:class:`Extra`).
        details: Lines :meth:`AssembledSampler.describe_progress` adds (:class:`Detail`).
        progress: The global progress counters (each starts at 0 every epoch).
        position: ``position(sampler)``: where the cursor is, in words; default: the plan's
            ``describe(progress, epoch)``.
        steps: What a step is called in messages ("micro-steps", "indices", "batches").
        elastic: Whether a state from another layout loads, unless the order strategy says.
    """

    kind: str
    fields: tuple[Field, ...]
    layout: Layout
    batching: BatchRule = BATCHES
    batching_of: Callable[[Any], BatchRule] | None = None
    modes: Modes | None = None
    given: tuple[Given, ...] = ()
    extras: tuple[Extra, ...] = ()
    details: tuple[Detail, ...] = ()
    progress: tuple[str, ...] = ("consumed",)
    position: Callable[[Any], str] | None = None
    steps: str = "steps"
    elastic: bool = True
