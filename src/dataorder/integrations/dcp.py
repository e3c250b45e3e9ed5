"""``torch.distributed.checkpoint`` (DCP): the data order as one more entry of the app state.

::

    from dataorder.integrations.dcp import OrderState

    app_state = {"model": model_sd, "optim": optim_sd, "data": OrderState(loader)}
    dcp.save(app_state, checkpoint_id=path)          # every rank
    ...
    dcp.load(app_state, checkpoint_id=path)          # every rank, any data-parallel size
    start_epoch = sampler.epoch                      # then set_epoch(e) every epoch as usual

Why a plain sampler state is not enough in DCP, and what :class:`OrderState` does about it:

* DCP pickles every non-tensor leaf and keeps **one** rank's copy of each key (its save planner
  de-duplicates). A state that differs per rank (torch's ``DistributedSampler`` position,
  torchdata's ``StatefulDistributedSampler``) silently keeps one arbitrary rank's value; per-rank
  keys are dropped when the job shrinks and missing when it grows. A dataorder state is global:
  the same ints on every rank, so the de-duplicated copy is every rank's, at any size.
* With worker processes the sampler runs ahead of training; :class:`OrderState` saves the
  consumed state (NOTE [ The consumed state ] in :mod:`dataorder.integrations.common`).
* ``dcp.load`` calls ``state_dict()`` first, to build its template. A torchdata
  ``StatefulDataLoader`` without a live iterator starts one then, and with workers that iterator
  prefetches from the old position. ``load_state_dict`` drops it, so the loader's next
  ``iter()`` starts at the loaded position.

torch is imported lazily; ``OrderState`` satisfies torch's ``Stateful`` protocol by its two
methods (DCP checks the protocol, not a base class).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dataorder._validate import fail
from dataorder.integrations.common import consumed_state, find_sampler, restore
from dataorder.llm.mixlog import MixtureLog

__all__ = ["OrderState"]

#: The key of the sampler state inside :meth:`OrderState.state_dict`.
STATE_KEY = "sampler"

#: The key of the mixture log (:meth:`~dataorder.llm.mixlog.MixtureLog.to_bytes`) beside it.
LOG_KEY = "mixture_log"


class OrderState:
    """A DCP ``Stateful`` holding the data order of a loader or sampler.

    Args:
        loader_or_sampler: A dataorder sampler, or a ``DataLoader`` / ``StatefulDataLoader``
            whose ``sampler`` or ``batch_sampler`` is one (a plain ``DataLoader`` is exact
            only without workers: its sampler runs ahead of training otherwise).
        log: The :class:`~dataorder.llm.mixlog.MixtureLog` the sampler draws from, if any: it
            is saved beside the state, and a load first brings the live log up to the saved
            one (which must continue it; the first differing entry is named otherwise).

    The state is ``{"sampler": <the dataorder state>}``: a flat dict of ints and strings,
    identical on every rank (checked on a live job by
    :func:`dataorder.integrations.common.check_same_on_all_ranks`); with a log, also
    ``"mixture_log"``: the log's bytes (the same entries on every rank, as every rank appends
    the same ones; the segment bases saved with them are this process's samplers', so two ranks'
    bytes may differ there, and either restores the same order: NOTE [ Saved segment bases ]).

    Raises:
        TypeError: If no dataorder sampler is found in ``loader_or_sampler``.
    """

    def __init__(self, loader_or_sampler: object, *, log: Any = None) -> None:
        self.sampler = find_sampler(loader_or_sampler)
        self.target = loader_or_sampler
        if log is not None and not isinstance(log, MixtureLog):
            fail("log", "a MixtureLog or None", log, TypeError)
        self.log = log

    def state_dict(self) -> dict[str, Any]:
        """``{"sampler": state}``, the consumed state (the same on every rank); with a log, and
        ``"mixture_log"``: its bytes."""
        out: dict[str, Any] = {STATE_KEY: consumed_state(self.target)}
        if self.log is not None:
            out[LOG_KEY] = self.log.to_bytes()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Place the sampler at the saved state and drop the loader's running iterator.

        Absolute: loading the same state twice, or two states in a row, leaves the last one.

        Raises:
            TypeError: If ``state_dict`` is not ``{"sampler": state}``.
            ValueError: If the sampler refuses the state (naming the field).
        """
        keys = {STATE_KEY} if self.log is None else {STATE_KEY, LOG_KEY}
        if not isinstance(state_dict, Mapping) or set(state_dict) != keys:
            fail("state_dict", f"a dict with the keys {sorted(keys)}", state_dict, TypeError)
        if self.log is not None:
            saved = MixtureLog.from_bytes(
                bytes(state_dict[LOG_KEY]), name="state_dict['mixture_log']"
            )
            self.log.extend_to(saved)
        restore(self.target, state_dict[STATE_KEY])

    def __repr__(self) -> str:
        return f"OrderState({type(self.target).__name__})"
