"""Online data mixing from a MixtureLog: an EXP3 controller, a kill, an elastic resume, one order.

A tiny regression model trains on three synthetic sources of different difficulty (a line, a
sine, a noisy sine). Every 4 steps an EXP3 bandit (ODM, arXiv 2312.02406: the reward of a source
is its training loss, so the sources the model has not learned yet get more weight) decides the
weights of the next step and appends them to a :class:`~dataorder.llm.mixlog.MixtureLog`. The
data-parallel ranks are simulated in this process (each is a ``BlendedSampler`` over the same
log; the global batch is their micro-batches in rank order, which is the run's order on any
layout).

The run is killed at a random step on 8 ranks, its checkpoint (model, optimiser, controller, the
sampler state and the log file) written; a new job resumes it on 5 ranks and trains to the end.
The uninterrupted run on 8 ranks is the reference: the two logs and the two orders must be equal,
sample for sample. The weight trajectory goes to ``online_mixing.png``.

    python examples/online_mixing.py [--steps 60] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import MixtureLog

SIZES = [300, 300, 300]
GBS = 40  # divides by 8 and by 5 ranks (micro-batch 1)
EVERY = 4  # steps between two decisions
ETA, GAMMA = 0.3, 0.1


def sample(index: int) -> tuple[float, float]:
    """Flat index -> (x, y): source 0 a line, 1 a sine, 2 a noisy fast sine."""
    source = 0 if index < SIZES[0] else 1 if index < SIZES[0] + SIZES[1] else 2
    rng = np.random.default_rng(index)
    x = float(rng.uniform(-2, 2))
    y = [0.5 * x, math.sin(2 * x), math.sin(5 * x) + 0.3 * float(rng.normal())][source]
    return x, y


def source_of(index: int) -> int:
    return 0 if index < SIZES[0] else 1 if index < SIZES[0] + SIZES[1] else 2


class Exp3:
    """EXP3 over the sources with the mean training loss of a source as its reward."""

    def __init__(self, k: int) -> None:
        self.scores = [0.0] * k

    def weights(self) -> list[float]:
        top = max(self.scores)
        e = [math.exp(ETA * (s - top)) for s in self.scores]
        return [(1 - GAMMA) * v / sum(e) + GAMMA / len(e) for v in e]

    def update(self, losses: dict[int, list[float]]) -> None:
        w = self.weights()
        for d, values in losses.items():
            if values:  # importance-weighted reward of the sources drawn
                self.scores[d] += float(np.mean(values)) / w[d]


def model_and_optim(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def train(
    dp: int, first: int, stop: int, log: MixtureLog, ckpt: dict[str, Any] | None, seed: int
) -> tuple[list[int], dict[str, Any], list[list[float]]]:
    """Steps ``first .. stop - 1`` on ``dp`` simulated ranks: the run's order, the checkpoint
    after the last step and the weights of every step."""
    model, optim = model_and_optim(seed)
    bandit = Exp3(len(SIZES))
    ranks = [
        BlendedSampler(SIZES, log, 1, r, dp, GBS, seed=seed, total_samples=10**6) for r in range(dp)
    ]
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        bandit.scores = list(ckpt["bandit"])
        pending = {int(d): list(v) for d, v in ckpt["pending"].items()}
        for s in ranks:
            s.load_state_dict(ckpt["sampler"])
    iters = [iter(s) for s in ranks]
    order: list[int] = []
    trajectory: list[list[float]] = []
    losses: dict[int, list[float]] = {d: [] for d in range(len(SIZES))}
    if ckpt is not None:  # the losses seen since the last decision are the controller's state
        losses = pending
    for step in range(first, stop):
        batch = [i for _ in range(GBS // dp) for it in iters for i in next(it)]
        order += batch
        xy = torch.tensor([sample(i) for i in batch], dtype=torch.float32)
        per_sample = (model(xy[:, :1]).squeeze(1) - xy[:, 1]) ** 2
        optim.zero_grad()
        per_sample.mean().backward()
        optim.step()
        for i, loss in zip(batch, per_sample.tolist(), strict=True):
            losses[source_of(i)].append(loss)
        trajectory.append(list(ranks[0].schedule.weights_at(step * GBS)))
        if (step + 1) % EVERY == 0:  # decide the next step's weights, after this step
            bandit.update(losses)
            losses = {d: [] for d in range(len(SIZES))}
            log.set_weights(step + 1, bandit.weights())
    ckpt_out = {
        "model": model.state_dict(),
        "optim": optim.state_dict(),
        "bandit": bandit.scores,
        "pending": losses,
        "sampler": ranks[0].state_dict(),
    }
    return order, ckpt_out, trajectory


def plot(trajectory: list[list[float]], kill: int, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    w = np.array(trajectory)
    for d, name in enumerate(["line (easy)", "sine", "noisy fast sine (hard)"]):
        ax.plot(np.arange(len(w)), w[:, d], label=name)
    ax.axvline(kill, color="grey", linestyle="--", label="killed on 8 ranks, resumed on 5")
    ax.set_xlabel("step")
    ax.set_ylabel("weight")
    ax.set_title("EXP3 mixture weights, replayed from the MixtureLog")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kill = int(np.random.default_rng(args.seed).integers(EVERY, args.steps - EVERY))

    reference_log = MixtureLog([1, 1, 1])
    reference, _, trajectory = train(8, 0, args.steps, reference_log, None, args.seed)

    # the job that is killed: 8 ranks, a checkpoint after step `kill - 1`
    log = MixtureLog([1, 1, 1])
    head, ckpt, _ = train(8, 0, kill, log, None, args.seed)
    log.save(args.out / "mixture_log.npz")
    (args.out / "sampler_state.json").write_text(json.dumps(ckpt["sampler"]))
    torch.save({k: v for k, v in ckpt.items() if k != "sampler"}, args.out / "trainer.pt")

    # a new job on 5 ranks: the log and the state from the checkpoint
    resumed_log = MixtureLog([1, 1, 1])
    resumed_log.extend_to(MixtureLog.load(args.out / "mixture_log.npz"))
    restored = torch.load(args.out / "trainer.pt")
    restored["sampler"] = json.loads((args.out / "sampler_state.json").read_text())
    tail, _, _ = train(5, kill, args.steps, resumed_log, restored, args.seed)

    same_log = resumed_log == reference_log
    same_order = head + tail == reference
    plot(trajectory, kill, args.out / "online_mixing.png")
    print(
        json.dumps(
            {
                "killed_at_step": kill,
                "entries": len(reference_log),
                "same_log": same_log,
                "same_order": same_order,
                "samples": len(reference),
                "final_weights": [round(w, 3) for w in trajectory[-1]],
            }
        )
    )
    if not (same_log and same_order):
        raise SystemExit("the resumed run diverged from the uninterrupted one")


if __name__ == "__main__":
    main()
