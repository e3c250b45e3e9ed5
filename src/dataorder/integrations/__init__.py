"""dataorder in the training stacks people run: one small module per stack.

=============================================  ================================================
module                                         what it gives the stack
=============================================  ================================================
:mod:`dataorder.integrations.common`           the sampler inside a loader, its consumed state
                                               (worker snapshots accounted for), a restore that
                                               drops a stale iterator, a cross-rank check
:mod:`dataorder.integrations.dcp`              ``OrderState``: the order as a
                                               ``torch.distributed.checkpoint`` app state
:mod:`dataorder.integrations.nemo_automodel`   loader configs for NeMo Automodel's diffusion
                                               and LLM recipes (YAML ``_target_``)
:mod:`dataorder.integrations.megatron_lm`      a ``--dataloader-type external`` provider built
                                               from ``consumed_train_samples``
:mod:`dataorder.integrations.hf_trainer`       a ``Trainer`` subclass: no double sharding, the
                                               epoch kept after a resume, the state checked
:mod:`dataorder.integrations.torchtitan`       a ``ParallelAwareDataloader`` whose state is
                                               global, so it resumes on another DP size
:mod:`dataorder.integrations.torchft`          a loader that serves a replica its share of the
                                               step torchft is on, whoever takes part
=============================================  ================================================

None of the stacks is a dependency: each module imports its stack when it is used, and says
which ``pip install`` line is missing if it is not there. Importing a module never needs the
stack. How to use each one, what is exact and what the stack cannot do: docs/integrations.md.
"""
