#!/usr/bin/env python3
"""Writes cross_entropy.json: PyTorch's cross_entropy losses and logit gradients (f64) for label
smoothing 0, 0.1 and 1, with and without class weights, every reduction, an ignored target, and a
4-D input. tests/test_loss_torch.cpp (CPU) and tests/cuda/test_cross_entropy.cpp (GPU) check kiln
against these values, so neither device can drift from PyTorch.

Run from anywhere with a python3 that has torch:  python3 tests/reference/make_cross_entropy.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F

IGNORE = -100


def values(n, scale, phase):
    # Deterministic inputs without a random generator, so the file can be remade anywhere.
    return [scale * math.sin(0.7 * i + phase) for i in range(n)]


def case(shape, targets, smoothing, weighted, reduction):
    numel = math.prod(shape)
    classes = shape[1]
    logits = torch.tensor(values(numel, 3.0, 0.3), dtype=torch.float64).reshape(shape)
    logits.requires_grad_()
    target = torch.tensor(targets, dtype=torch.int64).reshape([shape[0]] + list(shape[2:]))
    weight = torch.tensor([0.5 + 0.25 * c for c in range(classes)], dtype=torch.float64)
    loss = F.cross_entropy(logits, target, weight=weight if weighted else None,
                           ignore_index=IGNORE, reduction=reduction, label_smoothing=smoothing)
    grad_output = torch.tensor(values(loss.numel(), 0.5, 1.1), dtype=torch.float64)
    grad_output = (grad_output + 1.0).reshape(loss.shape)
    loss.backward(grad_output)
    return {
        "shape": list(shape),
        "logits": logits.detach().flatten().tolist(),
        "target": target.flatten().tolist(),
        "weight": weight.tolist() if weighted else None,
        "smoothing": smoothing,
        "reduction": reduction,
        "grad_output": grad_output.flatten().tolist(),
        "loss": loss.detach().flatten().tolist(),
        "grad": logits.grad.flatten().tolist(),
    }


def main():
    cases = []
    for shape, targets in (([4, 5], [1, IGNORE, 4, 0]), ([2, 3, 2, 2], [0, 2, IGNORE, 1, 2, 2, 0, 1])):
        for smoothing in (0.0, 0.1, 1.0):
            for weighted in (False, True):
                for reduction in ("none", "mean", "sum"):
                    cases.append(case(shape, targets, smoothing, weighted, reduction))
    header = json.dumps({"torch": torch.__version__, "ignore_index": IGNORE})[:-1]
    lines = ",\n".join("  " + json.dumps(c) for c in cases)
    path = pathlib.Path(__file__).with_name("cross_entropy.json")
    path.write_text(header + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
