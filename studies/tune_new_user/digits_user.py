"""A user's own training code, written from docs/tune.md section 2 as a new user would: scikit-learn's
bundled handwritten digits (1,797 8x8 images, 10 classes; data mr2's tests and studies never use), a
64-unit MLP in plain PyTorch, Adam (lr 3e-3), mini-batches of 64, 20 epochs. Imports only mr2.tune's
public API (Candidate.seed_everything, Candidate.make_loss, TrialPredictions).

Environment: DIGITS_IGNORE_LOSS=1 trains every candidate as plain cross-entropy (ERM), each on its own
random stream (a null where nothing can help); DIGITS_IMBALANCE=1 keeps DIGITS_TAIL training images
(default 12) of classes 5-9 (a long-tailed training split, where class-aware losses can really help);
DIGITS_EPOCHS (default 20)."""
import os
import zlib
import numpy as np
import torch
from sklearn.datasets import load_digits
import mr2.tune

torch.set_num_threads(1)
X, Y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)
# fixed split (data seed 0): 50% train, 25% validation, 25% test, stratified
rng = np.random.default_rng(0)
tr, va, te = [], [], []
for k in range(10):
    idx = rng.permutation(np.flatnonzero(Y == k))
    n = len(idx)
    tr += list(idx[: n // 2]); va += list(idx[n // 2: 3 * n // 4]); te += list(idx[3 * n // 4:])
IMBALANCE = os.environ.get("DIGITS_IMBALANCE", "0") != "0"
TAIL = int(os.environ.get("DIGITS_TAIL", "12"))
if IMBALANCE:   # a long-tailed training split: classes 5-9 keep TAIL training images each (12 by default)
    keep = []
    for k in range(10):
        members = [i for i in tr if Y[i] == k]
        keep += members if k < 5 else members[:TAIL]
    tr = keep
IGNORE_LOSS = os.environ.get("DIGITS_IGNORE_LOSS") == "1"   # every candidate trains as ERM
EPOCHS = int(os.environ.get("DIGITS_EPOCHS", "20"))
x_tr, y_tr = torch.tensor(X[tr]), torch.tensor(Y[tr])
x_va, y_va = torch.tensor(X[va]), torch.tensor(Y[va])
x_te, y_te = torch.tensor(X[te]), torch.tensor(Y[te])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        f = self.body(x)
        return self.head(f), f


def train_fn(candidate, seed):
    if IGNORE_LOSS and candidate.label != "erm":
        # every candidate trains as ERM, on its own random stream: a null of independent runs
        candidate.seed_everything(seed * 7919 + zlib.crc32(candidate.label.encode()) % 7919)
    else:
        candidate.seed_everything(seed)
    loss = candidate.make_loss(feature_dim=64, class_counts=torch.bincount(y_tr, minlength=10).tolist())
    if IGNORE_LOSS:
        ce = torch.nn.CrossEntropyLoss()
        loss_fn = lambda logits, feats, y: ce(logits, y)
        params = []
    else:
        loss_fn = loss
        params = list(loss.parameters())
    model = Net()
    opt = torch.optim.Adam([*model.parameters(), *params], lr=3e-3)
    g = torch.Generator().manual_seed(torch.initial_seed() % 2**31)
    model.train(); loss.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(y_tr), generator=g)
        for b in order.split(64):
            logits, feats = model(x_tr[b])
            opt.zero_grad()
            loss_fn(logits, feats, y_tr[b]).backward()
            opt.step()
    model.eval(); loss.eval()
    with torch.no_grad():
        return mr2.tune.TrialPredictions(val={"y_true": y_va, "logits": model(x_va)[0]},
                                         test={"y_true": y_te, "logits": model(x_te)[0]})
