"""Worker launched by torchrun in tests: deferred statistics on 2 gloo ranks.

Step 1: rank r adds up its micro-batches (rank 1 has none in step 2); every rank applies once per
step. Saves the statistics and the number of all_reduce calls made by apply_accumulated with
deferral off (none expected). Usage: torchrun --standalone --nproc-per-node 2 THIS OUT_DIR
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from mr2 import ClassFeatureStatistics

NUM_CLASSES, DIM, MOMENTUM = 5, 3, 0.7


def global_steps() -> list[list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """steps[step][rank] = that rank's micro-batches (rank 1 has none in step 1)."""
    generator = torch.Generator().manual_seed(7)

    def batch(size: int, high: int = NUM_CLASSES) -> tuple[torch.Tensor, torch.Tensor]:
        target = torch.randint(0, high, (size,), generator=generator)
        return torch.randn(size, DIM, generator=generator) + target[:, None].float(), target

    return [
        [[batch(4, 3), batch(3, 3)], [batch(5), batch(2)]],
        [[batch(6), batch(4)], []],
        [[batch(3)], [batch(4), batch(4), batch(1)]],
    ]


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stats = ClassFeatureStatistics(NUM_CLASSES, DIM, momentum=MOMENTUM)
    for step in global_steps():
        with stats.accumulate():
            for x, y in step[rank]:
                stats.update(x, y)
    calls = []
    original = dist.all_reduce

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counting
    idle = ClassFeatureStatistics(NUM_CLASSES, DIM)
    idle.apply_accumulated()  # deferral off, nothing pending: no communication
    dist.all_reduce = original
    torch.save({"state": stats.state_dict(), "idle_all_reduces": len(calls)}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
