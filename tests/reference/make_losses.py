#!/usr/bin/env python3
"""Writes losses.json: PyTorch's l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy,
binary_cross_entropy_with_logits and kl_div (f64) for every reduction, with weights, pos_weight,
beta, delta and log_target, on inputs that cross each loss's kinks; the loss and the gradients of
the input and the target. tests/test_loss_pointwise.cpp checks kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_losses.py
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F

SHAPE = (3, 5)


def values(scale, phase, offset=0.0):
    n = math.prod(SHAPE)
    return torch.tensor([offset + scale * math.sin(0.9 * i + phase) for i in range(n)],
                        dtype=torch.float64).reshape(SHAPE)


def listed(t):
    # JSON has no NaN or infinity: those go as strings (tests/support/torch_reference.h).
    return [v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")
            for v in t.flatten().tolist()]


def case(name, fn, x, y, reduction, **options):
    x = x.clone().requires_grad_()
    y = y.clone().requires_grad_()
    loss = fn(x, y, reduction)
    grad_output = torch.ones_like(loss) if loss.dim() == 0 else values(0.5, 0.4, 1.0)
    loss.backward(grad_output)
    return {"loss_fn": name, "reduction": reduction, "options": options,
            "input": x.detach().flatten().tolist(), "target": y.detach().flatten().tolist(),
            "grad_output": grad_output.flatten().tolist(), "loss": loss.detach().flatten().tolist(),
            "input_grad": listed(x.grad), "target_grad": listed(y.grad)}


def main():
    d = values(2.0, 0.1)
    t = values(1.0, 1.7)
    probs = torch.sigmoid(values(3.0, 0.3))
    labels = (values(1.0, 2.2) > 0).double() * 0.9 + 0.05
    weight = values(0.4, 0.5, 1.0)
    pos_weight = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.25], dtype=torch.float64)
    log_p = torch.log_softmax(values(1.5, 0.8), dim=1)
    target_p = torch.softmax(values(1.0, 2.9), dim=1)
    target_p[0, 1] = 0.0  # a zero probability: its term is 0
    cases = []
    for r in ("none", "mean", "sum"):
        cases.append(case("l1_loss", lambda x, y, r: F.l1_loss(x, y, reduction=r), d, t, r))
        for beta in (1.0, 0.5, 0.0):
            cases.append(case("smooth_l1_loss",
                              lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=beta),
                              d, t, r, beta=beta))
        for delta in (1.0, 0.3):
            cases.append(case("huber_loss",
                              lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=delta),
                              d, t, r, delta=delta))
        cases.append(case("binary_cross_entropy",
                          lambda x, y, r: F.binary_cross_entropy(x, y, reduction=r), probs,
                          labels, r))
        cases.append(case("binary_cross_entropy",
                          lambda x, y, r: F.binary_cross_entropy(x, y, weight=weight, reduction=r),
                          probs, labels, r, weight=weight.flatten().tolist()))
        cases.append(case("binary_cross_entropy_with_logits",
                          lambda x, y, r: F.binary_cross_entropy_with_logits(x, y, reduction=r),
                          values(6.0, 0.3), labels, r))
        cases.append(case("binary_cross_entropy_with_logits",
                          lambda x, y, r: F.binary_cross_entropy_with_logits(
                              x, y, weight=weight, pos_weight=pos_weight, reduction=r),
                          values(6.0, 0.3), labels, r, weight=weight.flatten().tolist(),
                          pos_weight=pos_weight.tolist()))
    for r in ("none", "mean", "sum", "batchmean"):
        cases.append(case("kl_div", lambda x, y, r: F.kl_div(x, y, reduction=r), log_p,
                          target_p, r, log_target=False))
        cases.append(case("kl_div", lambda x, y, r: F.kl_div(x, y, reduction=r, log_target=True),
                          log_p, torch.log(target_p + 0.01), r, log_target=True))
    out = pathlib.Path(__file__).with_name("losses.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_losses.py",
                               "torch": torch.__version__, "shape": list(SHAPE),
                               "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
