"""Is the `null` scenario of check.py null? Under DIGITS_IGNORE_LOSS=1 every candidate trains as ERM
on its own random stream (ERM on the seed, a candidate on seed * 7919 + crc32(label) % 7919): ERM and
the given candidates on COUNT seeds from START, each candidate's test hard tier (classes 1, 8, 9)
minus ERM's, paired by seed, with a two-sided paired t-test.

    python null_check.py 9000 100 mr2-paper-c0.5 center_loss
    python null_check.py 9100 200 center_loss
"""
import os
import sys

os.environ["DIGITS_IGNORE_LOSS"] = "1"
import numpy as np
from scipy import stats

import digits_user as d
import mr2.tune

start, count, labels = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
candidates = {c.label: c for c in mr2.tune.make_request(num_classes=10, output_dir="unused", name="t").candidates}
hard = [1, 8, 9]


def hard_tier(predictions):
    y, pred = predictions.test["y_true"], predictions.test["logits"].argmax(1)
    return 100 * np.mean([(pred[y == k] == k).float().mean().item() for k in hard])


seeds = range(start, start + count)
figures = {label: np.array([hard_tier(d.train_fn(candidates[label], s)) for s in seeds])
           for label in ("erm", *labels)}
for label in labels:
    diff = figures[label] - figures["erm"]
    print(f"{label}: minus ERM {diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(count):.3f} points "
          f"(two-sided p {stats.ttest_rel(figures[label], figures['erm']).pvalue:.3f}; ERM {figures['erm'].mean():.3f})")
