"""SAM under DistributedDataParallel (2 gloo processes): each rank perturbs with its own gradient
(first pass in no_sync), the second pass's gradients are averaged -- the SAM paper's recipe."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from optim import sam_dist_worker as worker


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_ranks_take_the_averaged_per_rank_sam_gradient(tmp_path):
    mp.spawn(worker.main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    expected = worker.per_rank_oracle(2)
    single = worker.run_engine(0, 1)  # one process, the whole batch: a different (global) perturbation
    for key, value in expected.items():
        assert torch.equal(ranks[0][key], ranks[1][key]), key
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-10, atol=1e-12, msg=key)
    assert not torch.allclose(single["backbone.0.weight"], expected["backbone.0.weight"], rtol=1e-6, atol=1e-8)
