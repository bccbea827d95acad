"""The bundled example: a small CNN trained on scikit-learn's digits (8x8 images), in seconds.

    tpuedge build examples/digits/model.py:build --target mcu \
        --calibration examples/digits/model.py:calibration --eval examples/digits/model.py:evaluation

`build()` trains deterministically (fixed seed, one thread), so builds are reproducible.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["DigitsCNN", "digits_split", "train_digits_cnn", "build", "calibration", "evaluation"]


class DigitsCNN(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width * 4 * 4, 10)

    def forward(self, image):
        x = F.relu(self.bn1(self.conv1(image)))
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


@lru_cache(maxsize=1)
def digits_split():
    """(x_train, y_train, x_test, y_test): float32 N x 1 x 8 x 8 in [0, 1], int64 labels; fixed split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def train_digits_cnn(epochs: int = 12, seed: int = 0) -> DigitsCNN:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic and, on 2 cores, faster
    try:
        torch.manual_seed(seed)
        x_train, y_train, _, _ = digits_split()
        model = DigitsCNN()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            for idx in torch.randperm(len(xt), generator=gen).split(64):
                opt.zero_grad()
                F.cross_entropy(model(xt[idx]), yt[idx]).backward()
                opt.step()
        return model.eval()
    finally:
        torch.set_num_threads(threads)


def build():
    return train_digits_cnn(), (torch.zeros(1, 1, 8, 8),)


def calibration(count: int = 200):
    """Calibration samples from the training split, one input tuple each."""
    x_train = digits_split()[0]
    return [(x_train[i : i + 1],) for i in range(min(count, len(x_train)))]


def evaluation():
    """(inputs, labels) of the held-out split."""
    _, _, x_test, y_test = digits_split()
    return x_test, y_test
