"""The bucket sampler's checkpoints, and NeMo Automodel's ``{"epoch", "batches_yielded"}``.

:class:`BucketCheckpoints` is the part of
:class:`~dataorder.diffusion.bucket_sampler.SequentialBucketSampler` that reads and writes
states: dataorder's state (:mod:`dataorder.core.state`, through
:class:`~dataorder.core.cursor.CursorSampler`), plus, with ``compat="nemo"``, NeMo's own format
both ways (NOTE [ NeMo bucket states ]).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

from dataorder._validate import check_int
from dataorder.core.cursor import CursorBatchSampler
from dataorder.core.state import Scalar

__all__ = ["BucketCheckpoints"]


class BucketCheckpoints(CursorBatchSampler[list[int]]):
    """State handling of the bucket sampler (a base class; the sampler sets the attributes).

    Attributes:
        _compat: ``"default"`` or ``"nemo"``.
    """

    _compat: str

    @property
    @abc.abstractmethod
    def num_replicas(self) -> int:
        """Data-parallel size."""

    # NOTE [ NeMo bucket states ]
    #     NeMo Automodel's sampler saves ``{"epoch": e, "batches_yielded": k}`` and, on load,
    #     skips ``k`` batches of the next pass. With ``compat="nemo"`` (NeMo's order) such a state
    #     loads here and the cursor goes to step ``k`` of epoch ``e``, which is where NeMo's
    #     sampler continues in a loop that calls ``set_epoch(e)`` (NeMo applies the skip to
    #     whatever epoch is set when the pass starts: B2). ``k`` is taken as NeMo wrote it: after
    #     a NeMo resume its count restarts from 0 (B1), so such a checkpoint resumes where NeMo
    #     would, not where the run really was. Our states carry ``batches_yielded`` in that mode
    #     (counted from the epoch's start), so NeMo's sampler can load them too.
    #     The state stays within MAX_STATE_BYTES (NOTE [ State size ] in dataorder.core.state)
    #     at the largest legal values because the mode's order records ``config.num_replicas``
    #     (it is not elastic) and the state does not repeat it as ``layout.num_replicas`` (a
    #     state that does, as older ones did, still loads). NeMo seeds
    #     torch with ``seed + epoch``, which must stay below 2**64: seeds are capped at 2**63 - 1
    #     and epochs at ``dataorder.core.state.MAX_EPOCH``, so no legal pair overflows.

    #: The keys of NeMo's bucket-sampler state (NOTE [ NeMo bucket states ]).
    _NEMO_KEYS: ClassVar[frozenset[str]] = frozenset({"epoch", "batches_yielded"})

    def state_dict(self) -> dict[str, Scalar]:
        """The cursor (see :class:`~dataorder.core.cursor.CursorSampler`); with
        ``compat="nemo"`` also NeMo's ``batches_yielded`` (NOTE [ NeMo bucket states ])."""
        state = super().state_dict()
        if self._compat == "nemo":
            state["batches_yielded"] = self.epoch_plan().step_of(self._position)
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Place the cursor where ``state_dict`` says (see
        :meth:`~dataorder.core.cursor.CursorSampler.load_state_dict`). With ``compat="nemo"``
        NeMo's ``{"epoch", "batches_yielded"}`` loads too (NOTE [ NeMo bucket states ]).

        Raises:
            ValueError: As the base class; also for a NeMo state without ``compat="nemo"``.
        """
        if isinstance(state_dict, Mapping) and set(state_dict) == self._NEMO_KEYS:
            self._load_nemo(state_dict)
            return
        if isinstance(state_dict, Mapping):
            state_dict = self._without_repeated_layout(state_dict)
        if isinstance(state_dict, Mapping) and "batches_yielded" in state_dict:
            ours = {k: v for k, v in state_dict.items() if k != "batches_yielded"}
            epoch, progress = self._checked_state(ours)
            saved = ours.get("layout.num_replicas", ours.get("config.num_replicas"))
            if saved == self.num_replicas:
                step = self.epoch_plan(epoch).step_of(progress)
                if state_dict["batches_yielded"] != step:
                    raise ValueError(
                        "state['batches_yielded'] must be the steps done at state['bucket'], "
                        f"state['consumed'] = {step}; got {state_dict['batches_yielded']!r}"
                    )
            self._apply_state(epoch, progress)
            return
        super().load_state_dict(state_dict)

    def _without_repeated_layout(self, state: Mapping[Any, Any]) -> Mapping[Any, Any]:
        """``state`` without the ``layout.*`` fields its config also records (older NeMo-mode
        states repeated ``num_replicas``: NOTE [ NeMo bucket states ]); never mutated."""
        repeated = [
            k
            for k in self.order_config()
            if f"layout.{k}" in state and k not in self.layout_info() and f"config.{k}" in state
        ]
        for k in repeated:
            if state[f"layout.{k}"] != state[f"config.{k}"]:
                raise ValueError(
                    f"state['layout.{k}'] must equal state['config.{k}']; got "
                    f"{state[f'layout.{k}']!r} and {state[f'config.{k}']!r} (an edited state)"
                )
        if not repeated:
            return state
        return {k: v for k, v in state.items() if k not in {f"layout.{r}" for r in repeated}}

    def _load_nemo(self, state: Mapping[str, Any]) -> None:
        if self._compat != "nemo":
            raise ValueError(
                f"a NeMo Automodel sampler state ({dict(state)!r}) continues NeMo's order: build "
                "this sampler with compat='nemo' to load it"
            )
        epoch = check_int("state['epoch']", state["epoch"], min_value=0)
        plan = self.epoch_plan(epoch)
        k = check_int("state['batches_yielded']", state["batches_yielded"], min_value=0)
        # NeMo skips min(k, the epoch's batches): a count past the end leaves an empty pass
        self._place(epoch, plan.progress_at(min(k, plan.num_steps)), loaded=True)
