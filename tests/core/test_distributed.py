"""2-process gloo data parallelism (real torchrun): 2 ranks x B equals 1 rank x 2B."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from helpers import torchrun
from mr2 import MR2Loss

WORKER = Path(__file__).with_name("ddp_loss_worker.py")


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_ranks_match_one_process_on_the_global_batch(tmp_path):
    torchrun(WORKER, str(tmp_path))
    sys.path.insert(0, str(WORKER.parent))
    import ddp_loss_worker as worker

    single = worker.run(
        MR2Loss(worker.NUM_CLASSES, momentum=0.6, lambda_rep=0.5, pairs="global",
                distance_temperature=1.0, distance_temperature_per_dim=True),
        rank=0, world=1,
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for rank_result in ranks:  # identical statistics on every rank, equal to the single process
        for key, value in single["state"].items():
            torch.testing.assert_close(rank_result["state"][key], value, msg=key)
    for step in range(worker.STEPS):
        mean_loss = (ranks[0]["losses"][step] + ranks[1]["losses"][step]) / 2
        torch.testing.assert_close(mean_loss, single["losses"][step])
        for part in range(2):  # logits and features gradients
            stitched = torch.cat([r["grads"][step][part] for r in ranks])
            torch.testing.assert_close(stitched, single["grads"][step][part], rtol=1e-5, atol=1e-7)


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_global_pairs_gather_the_batch_sizes_once_per_step(tmp_path):
    # One all_gather of the sizes, one of the features, one of the targets (the sizes were gathered
    # twice before).
    torchrun(WORKER.with_name("ddp_gather_count_worker.py"), str(tmp_path))
    for rank in range(2):
        assert torch.load(tmp_path / f"gathers{rank}.pt", weights_only=True)["all_gathers"] == 3
