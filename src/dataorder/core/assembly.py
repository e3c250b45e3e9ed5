"""A sampler assembled from declared parts: its order strategy, batching rule and state schema.

Every dataorder sampler is a :class:`~dataorder.core.cursor.CursorSampler` (the loop contract
and the state path, written once) whose class declares a :class:`Schema`. A sampler writes two
things itself: its constructor (validation, in its users' argument names) and ``_make_plan``
(how its order fills the core partition for one epoch). The cursor's hooks are answered from the
declaration, here; the cursor's state methods are never overridden (NOTE [ The state path ]):

=========================  =====================================================================
derived                    from
=========================  =====================================================================
``order_config()``         the schema's :class:`Field`\\ s, then the order strategy's own fields
``layout_info()``          the schema's :class:`Layout`
``state_dict()``           the cursor's writer, with the declared :class:`Extra` keys (the
                           sampler's, after the progress; the strategy's, at the end)
``load_state_dict()``      the cursor's reader, with the same keys checked, and the
                           :class:`Foreign` checkpoints a compat strategy of the family loads
                           (torchdata's, NeMo's)
``from_state()``           the constructor's keywords from the state's fields, the layout and
                           the caller's :class:`Given` values (an unknown keyword is an error),
                           then ``load_state_dict()``
``describe_progress()``    the cursor's lines, with the schema's ``position`` words, its
                           ``steps`` label and the declared :class:`Detail`\\ s
``batching``               the declared :class:`~dataorder.core.batching.BatchRule`
the registry of kinds      :data:`SAMPLERS`: a class that declares a schema is registered when it
                           is defined (``dataorder inspect`` rebuilds any state through it)
=========================  =====================================================================

A compat mode is a strategy in a :class:`Modes` registry, one per family: the name the user
passes (``compat="nemo"``), the factory, and the names its states record. Constructors, the
docs and the command line's choices all read the registry.

NOTE [ Adding a sampler or a compat mode ]
    *A sampler*: one new module with the class, which subclasses :class:`AssembledSampler`,
    declares ``schema = Schema(...)`` and writes its constructor and ``_make_plan``; plus one
    registration, its name in its subpackage's ``__all__`` (which the top level re-exports).
    The state, ``from_state``, ``dataorder inspect`` and the contract suite follow from the
    declaration; a new kind of batch brings its :class:`~dataorder.core.batching.BatchRule`.
    *A compat mode*: one new module with the strategy class (it says what it records, which
    foreign checkpoints it loads and whether it is elastic), plus one :class:`Mode` line in its
    family's :class:`Modes`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from dataorder._validate import check_int, fail
from dataorder.core.batching import BatchRule
from dataorder.core.cursor import CursorSampler
from dataorder.core.schema import (
    Detail,
    Extra,
    Field,
    Foreign,
    Given,
    Layout,
    Mode,
    Modes,
    OrderStrategy,
    Schema,
    flag,
    recorded,
)
from dataorder.core.state import Scalar, split_state

__all__ = [
    "SAMPLERS",
    "AssembledSampler",
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

T_co = TypeVar("T_co", covariant=True)

#: Every assembled sampler class, by the ``kind`` its states record.
SAMPLERS: dict[str, type[AssembledSampler[Any]]] = {}


def _config_value(config: Mapping[str, object], name: str) -> Scalar:
    """``config[name]`` of a state being rebuilt, an int or a str (an edited state may hold
    anything; the fingerprint check on load refuses it anyway, this names it first)."""
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | str):
        fail(f"state['config.{name}']", "an int or str", value)
    return value


def _layout_value(layout: Mapping[str, object], config: Mapping[str, object], name: str) -> object:
    """The saved ``layout.<name>`` (or ``config.<name>``, where a strategy records the layout
    in its configuration: :attr:`Mode.layout_in_config`); a state with neither is refused
    here, not by a constructor left to guess (a data-parallel size of None is detected)."""
    if name in layout:
        return layout[name]
    baked = config.get(name)  # 0: an order that does not bake the layout in
    if isinstance(baked, int) and not isinstance(baked, bool) and baked > 0:
        return baked
    raise ValueError(f"state is missing keys ['layout.{name}']")


#: The keywords :meth:`AssembledSampler.from_state` takes for the rank and the size of every
#: sampler, whatever its constructor calls them (NOTE [ from_state's layout keywords ]).
_LAYOUT_ALIASES = MappingProxyType({"rank": "rank", "dp_size": "size"})

# NOTE [ from_state's layout keywords ]
#     ``from_state`` takes the rank and the data-parallel size under the constructor's own
#     keywords (the schema's :class:`Layout`: ``data_parallel_rank``/``data_parallel_size`` for
#     the Megatron, blended and packed samplers, ``rank``/``num_replicas`` for the torch and
#     bucket samplers), so a call reads like the constructor it stands for. ``rank=`` and
#     ``dp_size=`` stay accepted for every sampler, without a warning: code that rebuilds a
#     state of any kind (``dataorder inspect``, the resume sweep) needs one spelling that does
#     not depend on the class. Both spellings at once must agree (same type and value), else
#     the call is refused naming both.


def _layout_keywords(
    owner: str, layout: Layout, rank: object, dp_size: object, given: dict[str, Any]
) -> list[tuple[str, object]]:
    """``[(name, value)]`` of the rank and the size ``from_state`` was given: under the
    constructor's keyword (popped from ``given``) or its alias ``rank``/``dp_size``; None where
    neither was given. ``name`` is the keyword the caller used, for messages.

    Raises:
        TypeError: If an alias and the constructor's keyword give different values.
    """
    out: list[tuple[str, object]] = []
    for alias, value in (("rank", rank), ("dp_size", dp_size)):
        own: str = getattr(layout, _LAYOUT_ALIASES[alias])
        name = alias
        mine = given.pop(own, None) if own != alias else None
        if mine is not None:
            if value is not None and not (type(value) is type(mine) and value == mine):
                raise TypeError(
                    f"{owner}.from_state() got {alias}={value!r} and {own}={mine!r}: {alias} "
                    f"is another name for {own}; give one of them"
                )
            name, value = own, mine
        out.append((name, value))
    return out


# -- the assembled sampler ------------------------------------------------------------------------
class AssembledSampler(CursorSampler[T_co]):
    """A :class:`~dataorder.core.cursor.CursorSampler` whose state follows from its
    :class:`Schema` (see the module docstring).

    A subclass declares ``schema``, sets ``self._strategy`` in its constructor when the schema
    has ``modes`` (the strategy the constructor chose), and writes ``_make_plan``.
    """

    schema: ClassVar[Schema]
    _strategy: OrderStrategy | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        schema = cls.__dict__.get("schema")
        if schema is None:
            return
        if schema.kind in SAMPLERS and SAMPLERS[schema.kind] is not cls:
            raise TypeError(
                f"{cls.__qualname__} declares kind {schema.kind!r}, which "
                f"{SAMPLERS[schema.kind].__qualname__} already records"
            )
        cls.state_kind = schema.kind
        cls.progress_keys = schema.progress
        cls.config_labels = MappingProxyType(
            {f.name: f.label for f in schema.fields if f.label is not None}
        )
        cls.steps_label = schema.steps
        SAMPLERS[schema.kind] = cls

    # -- what the declaration gives ---------------------------------------------------------------
    @property
    def batching(self) -> BatchRule:
        """What one rank's item at one step is, and what its slots cover."""
        of = self.schema.batching_of
        return self.schema.batching if of is None else of(self)

    @property
    def elastic(self) -> bool:
        """Whether a state saved on another data-parallel layout loads here."""
        strategy = self._strategy
        return self.schema.elastic if strategy is None else strategy.elastic

    def _current_mode(self) -> Mode | None:
        modes, strategy = self.schema.modes, self._strategy
        if modes is None or strategy is None:
            return None
        return modes.mode_of(strategy.name)

    def order_config(self) -> dict[str, Scalar]:
        """The state's ``config.*``: the strategy's name, the schema's fields, then the
        strategy's own fields."""
        config: dict[str, Scalar] = {}
        modes, strategy = self.schema.modes, self._strategy
        if modes is not None and strategy is not None:
            config[modes.field] = strategy.name
        for f in self.schema.fields:
            value = f.read(self)
            if value is not None:
                config[f.name] = value
        if strategy is not None:
            config.update(strategy.config())
        return config

    def _layout_in_config(self) -> tuple[str, ...]:
        """Layout fields the configuration records instead (:attr:`Mode.layout_in_config`)."""
        mode, strategy = self._current_mode(), self._strategy
        if mode is None or not mode.layout_in_config or strategy is None:
            return ()
        config = strategy.config()  # the strategy is what records it (not order_config: digests)
        return tuple(name for name in self.schema.layout.fields if name in config)

    def layout_info(self) -> dict[str, int]:
        """The state's ``layout.*`` (never the rank), less what the configuration records
        instead (:attr:`Mode.layout_in_config`)."""
        skip = self._layout_in_config()
        return {
            name: int(getattr(self, name)) for name in self.schema.layout.fields if name not in skip
        }

    def _extra_keys(self) -> tuple[tuple[Extra, ...], tuple[Extra, ...]]:
        """The schema's :class:`Extra` keys, then the current mode's."""
        mode = self._current_mode()
        return self.schema.extras, () if mode is None else mode.extras

    def _read_foreign(self, state: Mapping[str, Any]) -> tuple[int, dict[str, int]] | None:
        """Where another library's checkpoint puts the cursor (the :class:`Foreign` formats of
        the family's modes: the current mode's is read, another's refused); None if ``state``
        is none of them."""
        modes = self.schema.modes
        if modes is None:
            return None
        current = self._current_mode()
        for mode in modes.modes:
            for foreign in mode.foreign:
                if set(state) != foreign.keys:
                    continue
                if mode is not current:
                    raise ValueError(
                        f"{foreign.what} ({dict(state)!r}) continues {mode.summary}: build this "
                        f"sampler with {modes.arg}={mode.name!r} to load it"
                    )
                return foreign.place(self, state)
        return None

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        *,
        rank: int | None = None,
        dp_size: int | None = None,
        **given: Any,
    ) -> Any:
        """Rebuild the sampler that wrote ``state``, on a rank, positioned where it was.

        The rank and the size take the constructor's keywords (``data_parallel_rank=``,
        ``data_parallel_size=``; ``rank=``, ``num_replicas=``), or ``rank=`` and ``dp_size=``
        for any sampler (NOTE [ from_state's layout keywords ]).

        Args:
            state: A ``state_dict()`` of this class.
            rank: The data-parallel rank to build (default 0); the constructor's keyword for
                it is accepted too.
            dp_size: Another data-parallel size (an elastic resume); default: the state's. The
                constructor's keyword for it is accepted too.
            **given: The constructor's rank and size keywords, another value of a layout field
                (``micro_batch_size=``), and what the state does not hold (the schema's
                :class:`Given` values, e.g. ``dataset=``).

        Raises:
            TypeError: If a keyword is not one this sampler takes from the caller, or the rank
                or the size is given twice (an alias and the constructor's keyword) with
                different values.
            ValueError: If the state is not of this class, a value it does not hold is missing,
                or the values or the layout cannot continue it.
        """
        schema = cls.schema
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict; got {type(state).__name__}")
        kind = state.get("kind")
        if kind != schema.kind:
            other = SAMPLERS.get(kind) if isinstance(kind, str) else None
            hint = f" (rebuild a {kind!r} state with {other.__name__}.from_state)" if other else ""
            raise ValueError(
                f"state['kind'] must be {schema.kind!r}; got state['kind']={kind!r}{hint}"
            )
        lay = schema.layout
        (rank_name, rank_given), (size_name, size_given) = _layout_keywords(
            cls.__name__, lay, rank, dp_size, given
        )
        allowed = {g.name for g in schema.given} | set(lay.others)
        unknown = sorted(set(given) - allowed)
        if unknown:
            names = dict.fromkeys((lay.rank, lay.size, *_LAYOUT_ALIASES))
            raise TypeError(
                f"{cls.__name__}.from_state() takes {', '.join(names)}"
                + "".join(f", {name}" for name in sorted(allowed))
                + f"; got unexpected keyword {', '.join(map(repr, unknown))}"
            )
        rank = check_int(rank_name, 0 if rank_given is None else rank_given, min_value=0)
        if size_given is not None:
            dp_size = check_int(size_name, size_given, min_value=1)
        config, layout, _ = split_state(state)
        absent = [
            f"config.{f.name}" for f in schema.fields if not f.optional and f.name not in config
        ]
        if absent:  # before a constructor's default stands in for it and refuses something else
            raise ValueError(f"state is missing keys {absent}")
        kwargs: dict[str, Any] = {}
        if schema.modes is not None:
            kwargs.update(schema.modes.args_of(_config_value(config, schema.modes.field)))
        for f in schema.fields:
            if f.args is not None and f.name in config:
                kwargs.update(f.args(_config_value(config, f.name)))
        for name in lay.others:  # a value given is checked by the constructor, 0 included
            value = given.pop(name, None)
            kwargs[name] = _layout_value(layout, config, name) if value is None else value
        kwargs[lay.size] = _layout_value(layout, config, lay.size) if dp_size is None else dp_size
        kwargs[lay.rank] = rank
        for g in schema.given:
            value = given.get(g.name)
            if value is not None:
                kwargs[g.name] = value
            elif g.needed(config):
                fail(g.name, g.describe(config), None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what the saving run was told already
            sampler = cls(**kwargs)
        sampler.load_state_dict(state)
        return sampler

    def _describe_position(self, position: Mapping[str, int]) -> str | None:
        """The schema's ``position`` words, if it declares them."""
        return None if self.schema.position is None else self.schema.position(self)

    def _progress_details(self) -> list[tuple[str, str]]:
        """The schema's :class:`Detail` lines."""
        return [(d.label, d.text(self)) for d in self.schema.details]
