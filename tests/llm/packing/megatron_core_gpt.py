"""Optional oracle, run as a subprocess by tests/llm/packing/test_megatron_style.py.

A tiny megatron-core ``GPTModel`` (local layer spec, CPU) takes a micro-batch of packed rows in
Megatron's format and gives the same loss as the same documents fed one by one. Prints
``packed <loss> one-by-one <loss>``.

megatron-core 0.16.1's local ``DotProductAttention`` touches CUDA twice even on CPU tensors: it
takes its score buffer from ``parallel_state.get_global_memory_buffer().get_tensor(...,
device=torch.cuda.current_device())`` and enters ``tensor_parallel.get_cuda_rng_tracker().fork()``
around its (here zero) attention dropout, which raises "cuda rng state model-parallel-rng is not
added" without CUDA. Both are replaced below by CPU stand-ins for this process only (a plain
``torch.empty`` buffer and a null context); nothing else of the model is changed. It refuses
``packed_seq_params`` (only Transformer Engine's attention takes THD), so the rows carry the
block-diagonal ``attention_mask`` (``attention="mask"``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = sys.argv[1]
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    from dataorder.llm.packing import PackedSampler
    from dataorder.llm.packing.batch_styles import MegatronStyle
    from dataorder.llm.packing.dataset import PackedDataset

    class CpuBuffer:
        def get_tensor(self, shape: object, dtype: torch.dtype, name: str, **_: object) -> object:
            return torch.empty(shape, dtype=dtype)  # type: ignore[call-overload]

    class NoRng:
        def fork(self, name: str = "") -> contextlib.nullcontext[None]:
            return contextlib.nullcontext()

    parallel_state.initialize_model_parallel()
    parallel_state.get_global_memory_buffer = CpuBuffer  # type: ignore[assignment]
    tensor_parallel.get_cuda_rng_tracker = NoRng  # type: ignore[assignment]
    torch.manual_seed(0)
    seq, vocab = 16, 50
    config = TransformerConfig(
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = GPTModel(
        config,
        get_gpt_layer_local_spec(),
        vocab_size=vocab,
        max_sequence_length=seq,
        position_embedding_type="learned_absolute",
    ).eval()

    rng = np.random.default_rng(5)
    docs = [rng.integers(1, vocab, n).tolist() for n in (7, 3, 12, 5, 9, 4, 16, 2, 6)]
    sampler = PackedSampler([len(d) for d in docs], seq, 4, 0, 1, seed=3, split="never")
    dataset = PackedDataset(docs, seq, style=MegatronStyle(attention="mask"))
    total = count = 0.0
    with torch.no_grad():
        for rows in sampler:
            batch = PackedDataset.collate([dataset[row] for row in rows])
            losses = model(
                batch["tokens"],
                batch["position_ids"],
                batch["attention_mask"],
                labels=batch["labels"],
            )
            total += float((losses * batch["loss_mask"]).sum())
            count += float(batch["loss_mask"].sum())
        alone = alone_count = 0.0
        for doc in docs:
            if len(doc) < 2:
                continue
            n = len(doc) - 1
            tokens = torch.tensor([doc[:-1]])
            mask = ~torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]
            losses = model(tokens, torch.arange(n)[None], mask, labels=torch.tensor([doc[1:]]))
            alone += float(losses.sum())
            alone_count += n
    read = sorted(d for rows in sampler for row in rows for d, _, _ in row)
    print(f"documents {read == list(range(len(docs)))}")
    print(f"packed {total / count:.8f} one-by-one {alone / alone_count:.8f} tokens {int(count)}")
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
