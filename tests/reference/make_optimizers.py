#!/usr/bin/env python3
"""Writes optimizers.json: PyTorch 1.13's RMSprop (plain, weight decay, momentum, centered) and
Adagrad (lr_decay, weight decay, initial accumulator) trajectories over 6 steps of a fixed
quadratic-plus-sine loss on one f64 parameter, the rates of ExponentialLR, LambdaLR and
CosineAnnealingWarmRestarts over 25 steps, and clip_grad_value_. tests/test_optim_more.cpp checks
kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_optimizers.py
"""
import json
import math
import pathlib

import torch

STEPS = 6


def start():
    return torch.tensor([0.5 * math.sin(1.3 * i + 0.2) for i in range(7)], dtype=torch.float64)


def loss_of(p):
    # A loss whose gradient changes with p, so each step sees another gradient.
    return (p * p).sum() + torch.sin(3 * p).sum()


def trajectory(make, **options):
    p = start().requires_grad_()
    opt = make([p], **options)
    points = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss_of(p).backward()
        opt.step()
        points.append(p.detach().tolist())
    return points


def rates(make, steps=25):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def main():
    cases = []
    for options in [{}, {"weight_decay": 0.1, "alpha": 0.9}, {"momentum": 0.8, "lr": 0.02},
                    {"centered": True, "momentum": 0.5, "eps": 1e-6}]:
        cases.append({"optimizer": "RMSprop", "options": options,
                      "steps": trajectory(torch.optim.RMSprop, **options)})
    for options in [{}, {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.2},
                    {"initial_accumulator_value": 0.3, "eps": 1e-6}]:
        cases.append({"optimizer": "Adagrad", "options": options,
                      "steps": trajectory(torch.optim.Adagrad, **options)})
    S = torch.optim.lr_scheduler
    schedules = {
        "ExponentialLR": rates(lambda o: S.ExponentialLR(o, gamma=0.9)),
        "LambdaLR": rates(lambda o: S.LambdaLR(o, lambda e: 1.0 / (1 + e) ** 0.5)),
        "CosineAnnealingWarmRestarts": rates(
            lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01)),
        "CosineAnnealingWarmRestarts_1": rates(
            lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4)),
    }
    g = torch.tensor([-3.0, -0.5, 0.0, 0.2, 7.0], dtype=torch.float64)
    p = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    p.grad = g.clone()
    torch.nn.utils.clip_grad_value_([p], 0.4)
    out = pathlib.Path(__file__).with_name("optimizers.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_optimizers.py",
                               "torch": torch.__version__, "start": start().tolist(),
                               "optimizers": cases, "schedules": schedules,
                               "clip_value": {"grad": g.tolist(), "clipped": p.grad.tolist()}}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
