#!/usr/bin/env python3
"""PyTorch and kiln exchanging .pth state dicts, both ways, through torch.save and torch.load.

PyTorch saves the state dict of a CIFAR ResNet-20 (the structure and names of kiln's resnet20)
with non-trivial BatchNorm statistics, and an input; kiln (tests/torch_file/probe.cpp) loads
them strictly, runs the model in eval mode and saves its state dict and output as .pth; PyTorch
torch.loads both and requires the state dict equal to its own, dtype for dtype and bit for bit,
and the output within 1e-4 of its own forward. Exits 77 (ctest's skip) when this python has no
torch.

  compare_torch_file.py --probe BUILD/tests/torch_file_probe --work-dir DIR
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


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class ResNet20(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        inplanes = 16
        for i, (planes, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
            blocks = []
            for b in range(3):
                blocks.append(BasicBlock(inplanes, planes, stride if b == 0 else 1))
                inplanes = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    path = lambda name: os.path.join(args.work_dir, name)

    torch.manual_seed(0)
    model = ResNet20()
    with torch.no_grad():
        for i, m in enumerate(model.modules()):
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(i)
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    torch.save(model.state_dict(), path("torch.pth"))
    torch.save({"input": x}, path("input.pth"))

    run = subprocess.run([args.probe, path("torch.pth"), path("input.pth"), path("kiln.pth"),
                          path("output.pth")], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAILED: the probe exited {run.returncode}: {run.stderr}")
        return 1

    failures = []
    want = model.state_dict()
    got = torch.load(path("kiln.pth"))
    if set(got.keys()) != set(want.keys()):
        failures.append(f"keys differ: {sorted(set(got) ^ set(want))}")
    for name, t in want.items():
        if name not in got:
            continue
        g = got[name]
        if g.dtype != t.dtype or g.shape != t.shape or not torch.equal(g, t):
            failures.append(f"{name}: kiln {g.dtype} {tuple(g.shape)} differs from torch's "
                            f"{t.dtype} {tuple(t.shape)}")
    with torch.no_grad():
        expected = model(x)
    output = torch.load(path("output.pth"))["output"]
    error = (output - expected).abs().max().item()
    if output.shape != expected.shape or error > 1e-4:
        failures.append(f"output {tuple(output.shape)} differs from torch's by {error}")
    for f in failures:
        print(f"FAILED: {f}")
    if failures:
        return 1
    print(f"{len(want)} tensors through kiln and back equal; outputs within {error:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
