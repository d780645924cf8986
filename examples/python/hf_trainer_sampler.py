#!/usr/bin/env python3
"""A minimal torch training loop on packed Alpaca batches through multipack.Loader.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/hf_trainer_sampler.py [PREFIX] [--steps N]

The model is the C++ example's (examples/torch_model.hpp): a small causal transformer that
keeps every packed piece to itself, as packing requires:
- attention is confined to each piece by a block-diagonal causal mask from sequence_ids;
- positions come from position_ids, which restart at every piece;
- the loss is the Hugging Face one (logits at t predict labels at t + 1, -100 ignored); the first
  token of every piece is labelled -100, so nothing is predicted across pieces.

Swapping axolotl's (or a Hugging Face Trainer's) sampler for multipack's is a few lines; the
collator stays the one that turns a row of sample indices into a packed row:

    from multipack import BatchSampler
    # all_ranks=True: accelerate's prepare_data_loader (axolotl's, a Trainer's) hands process
    # p every N-th batch; a per-rank sampler there would keep 1/N of its steps (see the README)
    sampler = BatchSampler(lengths=train_dataset["length"], capacity=cfg.sequence_len,
                           micro_batch=cfg.micro_batch_size, seed=cfg.seed, all_ranks=True)
    loader = DataLoader(train_dataset, batch_sampler=sampler, collate_fn=collator)
    # each epoch: sampler.set_epoch(epoch); checkpoints: sampler.state_dict() / load_state_dict()

multipack.Loader replaces the sampler *and* the collator: it reads the tokens itself and
hands over finished batches (input_ids, labels, position_ids, cu_seqlens) built by C++ threads.
"""

import argparse
import ctypes
import math
import os
import time

import torch

import multipack


def keep_freed_memory():
    """glibc gives every block over 32 MB back to the system when it is freed, and the next step
    faults it in again, page by page: the logits alone are 131 MB a step here, and the faults
    cost 5 x the model's arithmetic (0.4 s for one exp() of them). Serving such blocks from the
    heap and keeping freed memory, as jemalloc or tcmalloc would, makes the step compute-bound
    (the same as MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ in the environment)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 2**30)
    libc.mallopt(m_trim_threshold, 2**31 - 1)


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attention_norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp_norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x, mask):
        batch, length, width = x.shape
        head = width // self.heads
        q, k, v = self.qkv(self.attention_norm(x)).view(batch, length, 3, self.heads, head).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head)
        scores = scores.masked_fill(~mask, float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)
        h = x + self.out(attended)
        return h + self.down(torch.nn.functional.gelu(self.up(self.mlp_norm(h))))


class CausalLM(torch.nn.Module):
    def __init__(self, vocabulary=32000, width=64, layers=2, heads=4, max_positions=512):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocabulary, width)
        self.positions = torch.nn.Embedding(max_positions, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocabulary, bias=False)

    def forward(self, input_ids, position_ids, sequence_ids):
        length = sequence_ids.shape[1]
        same_piece = sequence_ids.unsqueeze(2) == sequence_ids.unsqueeze(1)
        mask = (same_piece & torch.ones(length, length, dtype=torch.bool).tril()).unsqueeze(1)
        x = self.tokens(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def shifted_loss(logits, labels):
    """The summed token loss, logits at t predicting labels at t + 1, and its token count."""
    predicted = logits[:, :-1].reshape(-1, logits.shape[-1])
    targets = labels[:, 1:].reshape(-1)
    loss = torch.nn.functional.cross_entropy(predicted, targets, ignore_index=-100, reduction="sum")
    return loss, int((targets != -100).sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prefix", nargs="?", default="data/alpaca/alpaca_llama")
    parser.add_argument("--prompt-lengths", default=None,
                        help="prompt lengths (no loss); by default PREFIX.prompt_lengths, PREFIX.loss_mask (a token "
                             "mask) or the prompt_lengths.txt beside PREFIX, where there is one; '' for none")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--capacity", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    prompt_lengths, loss_mask = args.prompt_lengths, None
    if prompt_lengths is None:  # the mask found beside the dataset, in the C++ examples' order
        beside = os.path.join(os.path.dirname(args.prefix), "prompt_lengths.txt")
        if os.path.exists(args.prefix + ".prompt_lengths"):
            prompt_lengths = args.prefix + ".prompt_lengths"
        elif os.path.exists(args.prefix + ".loss_mask.idx"):
            loss_mask = args.prefix + ".loss_mask"
        elif os.path.exists(beside):
            prompt_lengths = beside
    keep_freed_memory()
    torch.manual_seed(0)
    model = CausalLM(max_positions=args.capacity)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    # int64 tokens: what torch.nn.Embedding takes, with no conversion; tensors over the pool.
    loader = multipack.Loader(args.prefix, capacity=args.capacity, micro_batch=args.micro_batch,
                              prompt_lengths=prompt_lengths or None, loss_mask=loss_mask, dtype="int64", threads=args.threads,
                              as_torch=True)
    print(f"rank {loader.rank} of {loader.world_size}: {len(loader)} steps an epoch, training {args.steps}")
    step = 0
    tokens = 0
    model_seconds = 0.0
    start = time.perf_counter()
    epoch = 0
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            began = time.perf_counter()
            logits = model(batch["input_ids"], batch["position_ids"], batch["sequence_ids"])
            loss_sum, count = shifted_loss(logits, batch["labels"])
            # Every row starts a piece, whose first label is -100: the shift loses no loss token.
            assert count == batch["loss_tokens"]
            loss = loss_sum / max(count, 1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model_seconds += time.perf_counter() - began
            tokens += batch["input_ids"].numel()
            step += 1
            print(f"epoch {epoch} step {batch['step']:3d}  loss {loss.item():.4f}  ({count} loss tokens)")
            if step == args.steps:
                break
        epoch += 1
    # One C++ loader ran every epoch (set_epoch(e + 1) continues it): its figures cover them all.
    statistics = loader.statistics()
    busy_seconds = statistics["producer_busy_seconds"]
    seconds = time.perf_counter() - start
    # The loop's own waits in next(), as the loader measured them (not all time outside the model).
    waited = statistics["consumer_wait_seconds"]
    print(f"trained {step} steps in {seconds:.1f} s: the training step {tokens / model_seconds:.3g} tokens/s; the "
          f"loader {tokens / busy_seconds * args.threads:.3g} tokens/s with {args.threads} threads; the trainer "
          f"waited for data {100 * waited / seconds:.2f} % of the time")


if __name__ == "__main__":
    main()
