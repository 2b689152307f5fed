"""Worker launched by torchrun in tests: how many all_gathers one global-pairs MR2 step makes.

Usage: torchrun --standalone --nproc-per-node 2 ddp_gather_count_worker.py OUT_DIR
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from mr2 import MR2Loss


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    calls = []
    original = dist.all_gather

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_gather = counting
    torch.manual_seed(dist.get_rank())
    loss_fn = MR2Loss(3, pairs="global")
    features = torch.randn(8, 4, requires_grad=True)
    loss = loss_fn(torch.randn(8, 3), features, torch.arange(8) % 3)
    loss.backward()
    torch.save({"all_gathers": len(calls)}, f"{out_dir}/gathers{dist.get_rank()}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
