"""2 gloo processes x B equal 1 process x 2B: center-loss centres, SupCon's global pairs, HBR's set."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from methods import representation_dist_worker as worker


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_ranks_hold_the_single_process_state(tmp_path):
    mp.spawn(worker.main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]

    center = worker.run_center(0, 1)
    for step in range(worker.STEPS):
        assert torch.equal(ranks[0]["center"]["centers"][step], ranks[1]["center"]["centers"][step])
        torch.testing.assert_close(ranks[0]["center"]["centers"][step], center["centers"][step])
        stitched = torch.cat([r["center"]["grads"][step] for r in ranks])
        torch.testing.assert_close(stitched, center["grads"][step])
    assert torch.equal(center["centers"][1][-1], center["centers"][0][-1])  # class K-1 absent at step 1

    supcon = worker.run_supcon(0, 1)
    for part in ("method", "model"):
        for key, value in supcon[part].items():
            assert torch.equal(ranks[0]["supcon"][part][key], ranks[1]["supcon"][part][key]), key
            torch.testing.assert_close(ranks[0]["supcon"][part][key], value, msg=key)

    hbr = worker.run_hbr(0, 1)
    for key, value in hbr["method"].items():
        assert torch.equal(ranks[0]["hbr"]["method"][key], ranks[1]["hbr"]["method"][key]), key
        torch.testing.assert_close(ranks[0]["hbr"]["method"][key], value, msg=key)
    assert bool(hbr["method"]["frozen"]) and int(hbr["method"]["multiplicity"].sum()) >= worker.N - worker.K
