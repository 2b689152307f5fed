"""2 gloo processes x B equal 1 process x 2B: group DRO's q and gradients, LfF's per-sample state."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from methods import baseline_dist_worker as worker


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_ranks_hold_the_single_process_state(tmp_path):
    mp.spawn(worker.main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    dro, lff = worker.run_dro(0, 1), worker.run_lff(0, 1)

    for step in range(worker.STEPS):
        assert torch.equal(ranks[0]["dro"]["q"][step], ranks[1]["dro"]["q"][step])
        torch.testing.assert_close(ranks[0]["dro"]["q"][step], dro["q"][step])
        torch.testing.assert_close(ranks[0]["dro"]["losses"][step], dro["losses"][step])
        stitched = torch.cat([r["dro"]["grads"][step] for r in ranks])
        torch.testing.assert_close(stitched, dro["grads"][step])
    assert dro["q"][1][-1] == dro["q"][0][-1]  # class K-1 absent at step 1: weight unchanged

    for key, value in lff["method"].items():  # per-sample averages, labels, biased model weights
        assert torch.equal(ranks[0]["lff"]["method"][key], ranks[1]["lff"]["method"][key]), key
        torch.testing.assert_close(ranks[0]["lff"]["method"][key], value, msg=key)
    for key, value in lff["model"].items():
        torch.testing.assert_close(ranks[0]["lff"]["model"][key], value, msg=key)
    assert lff["method"]["visited"].sum() > worker.GLOBAL_BATCH
