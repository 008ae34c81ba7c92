#!/usr/bin/env python3
"""Two small models trained by PyTorch and by kiln from the same weights on the same data.

A U-Net-style segmenter (Conv2d, GroupNorm, a strided down step, ConvTranspose2d up, a skip joined
with cat; BCE-with-logits on square masks, SGD with momentum) and an LSTM sequence classifier
(cross entropy, Adam), each 200 steps on synthetic data made here. PyTorch saves the initial
weights and the data as .pth files; kiln (tests/twin_models/probe.cpp, models.h) trains its twins
from them and saves each step's loss. Both run in f32 on the CPU: the losses may drift apart by
rounding, so the check is the end of training: the mean loss of the last 20 steps within 2% of
PyTorch's (issue 40's bar), and every one of the first 5 steps within 1e-5. Exits 77 (ctest's
skip) when this python has no torch.

  compare_twin_models.py --probe BUILD/tests/twin_models_probe --work-dir DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

try:
    import torch
    from torch import nn
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import torch ({e}); apt-get install python3-torch")
    sys.exit(77)

STEPS = 200


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(1, 8, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, 8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.gn2 = nn.GroupNorm(4, 16)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = nn.Conv2d(16, 8, 3, padding=1)
        self.gn3 = nn.GroupNorm(2, 8)
        self.head = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        e = torch.relu(self.gn1(self.enc(x)))
        d = torch.relu(self.gn2(self.down(e)))
        u = self.up(d)
        h = torch.relu(self.gn3(self.dec(torch.cat([u, e], 1))))
        return self.head(h)


class SequenceClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def data():
    g = torch.Generator().manual_seed(1)
    images = 0.3 * torch.randn(64, 1, 16, 16, generator=g)
    masks = torch.zeros(64, 1, 16, 16)
    for i in range(64):
        size = int(torch.randint(3, 8, (1,), generator=g))
        top, left = (int(v) for v in torch.randint(0, 16 - size, (2,), generator=g))
        masks[i, 0, top:top + size, left:left + size] = 1.0
    images += masks
    sequences = torch.randn(96, 10, 4, generator=g)
    # The class: which of the first three features has the largest sum over the second half.
    labels = sequences[:, 5:, :3].sum(1).argmax(1)
    return {"images": images, "masks": masks, "sequences": sequences, "labels": labels}


def train(model, optimizer, x, y, batch, loss_of):
    losses = []
    batches = x.shape[0] // batch
    for step in range(STEPS):
        b = step % batches
        optimizer.zero_grad()
        loss = loss_of(model(x[b * batch:(b + 1) * batch]), y[b * batch:(b + 1) * batch])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    path = lambda name: os.path.join(args.work_dir, name)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    d = data()
    segmenter, classifier = Segmenter(), SequenceClassifier()
    torch.save(segmenter.state_dict(), path("segmenter_init.pth"))
    torch.save(classifier.state_dict(), path("classifier_init.pth"))
    torch.save(d, path("data.pth"))

    run = subprocess.run([args.probe, args.work_dir], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAILED: the probe exited {run.returncode}: {run.stderr}")
        return 1
    got = torch.load(path("losses.pth"))

    want = {
        "segmenter": train(segmenter, torch.optim.SGD(segmenter.parameters(), lr=0.05,
                                                      momentum=0.9),
                           d["images"], d["masks"], 16,
                           nn.functional.binary_cross_entropy_with_logits),
        "classifier": train(classifier, torch.optim.Adam(classifier.parameters(), lr=0.01),
                            d["sequences"], d["labels"], 32, nn.functional.cross_entropy),
    }
    failures = []
    for name, w in want.items():
        k = got[name]
        start, end_torch, end_kiln = w[0].item(), w[-20:].mean().item(), k[-20:].mean().item()
        early = (k[:5] - w[:5]).abs().max().item()
        relative = abs(end_kiln - end_torch) / end_torch
        print(f"{name}: loss {start:.4f} -> torch {end_torch:.4f}, kiln {end_kiln:.4f} "
              f"(last 20 steps, {100 * relative:.2f}% apart); first 5 steps within {early:.1e}")
        if relative > 0.02:
            failures.append(f"{name}: kiln's final loss is {100 * relative:.2f}% from torch's")
        if early > 1e-5:
            failures.append(f"{name}: the first steps' losses differ by {early:.2e}")
        if end_torch > 0.5 * start:
            failures.append(f"{name}: torch's loss fell only from {start:.4f} to {end_torch:.4f}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
