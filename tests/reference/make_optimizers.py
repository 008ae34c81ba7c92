#!/usr/bin/env python3
"""Writes optimizers.json: PyTorch 1.13's RMSprop (plain, weight decay, momentum, centered) and
Adagrad (lr_decay, weight decay, initial accumulator), NAdam (PyTorch 2.0's rule: see NAdam2) and
RAdam trajectories over 6 steps of a fixed
quadratic-plus-sine loss on one f64 parameter, the rates of ExponentialLR, LambdaLR and
CosineAnnealingWarmRestarts over 25 steps, and clip_grad_value_. tests/test_optim_more.cpp checks
kiln against them.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_optimizers.py
"""
import json
import math
import pathlib

import torch

STEPS = 8


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


class NAdam2(torch.optim.Optimizer):
    """PyTorch 2.0's NAdam step, in 1.13's terms: 1.13 computes mu_product_next as
    mu_product * mu * mu_next, multiplying mu in twice (fixed in 2.0, whose formula this is and
    kiln follows). Everything else is 1.13's _single_tensor_nadam."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=0, mu_product=1.0, exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                step = state["step"]
                grad = p.grad
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                decay = group["momentum_decay"]
                mu = beta1 * (1. - 0.5 * (0.96 ** (step * decay)))
                mu_next = beta1 * (1. - 0.5 * (0.96 ** ((step + 1) * decay)))
                state["mu_product"] *= mu
                mu_product_next = state["mu_product"] * mu_next
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = state["exp_avg_sq"].div(1 - beta2 ** step).sqrt().add_(group["eps"])
                lr = group["lr"]
                p.addcdiv_(grad, denom, value=-lr * (1. - mu) / (1. - state["mu_product"]))
                p.addcdiv_(state["exp_avg"], denom, value=-lr * mu_next / (1. - mu_product_next))


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
    for options in [{}, {"lr": 0.01, "weight_decay": 0.1, "momentum_decay": 0.01}]:
        cases.append({"optimizer": "NAdam", "options": options,
                      "steps": trajectory(NAdam2, **options)})
    for options in [{}, {"lr": 0.01, "weight_decay": 0.1, "betas": (0.8, 0.99)}]:
        cases.append({"optimizer": "RAdam", "options": options,
                      "steps": trajectory(torch.optim.RAdam, **options)})
    S = torch.optim.lr_scheduler
    metrics = [1.0, 0.9, 0.95, 0.95, 0.91, 0.96, 0.97, 0.8, 0.85, 0.85, 0.86, 0.9, 0.9, 0.7]
    plateau = {}
    for name, kwargs in [("min", {"patience": 2}),
                         ("max_abs_cooldown", {"mode": "max", "threshold_mode": "abs",
                                               "threshold": 0.01, "patience": 1, "cooldown": 2,
                                               "factor": 0.5, "min_lr": 0.02})]:
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        sched = S.ReduceLROnPlateau(opt, **kwargs)
        rates_seen = []
        for m in metrics:
            sched.step(m)
            rates_seen.append(opt.param_groups[0]["lr"])
        plateau[name] = {"options": kwargs, "lrs": rates_seen}
    schedules = {
        "ExponentialLR": rates(lambda o: S.ExponentialLR(o, gamma=0.9)),
        "LambdaLR": rates(lambda o: S.LambdaLR(o, lambda e: 1.0 / (1 + e) ** 0.5)),
        "CosineAnnealingWarmRestarts": rates(
            lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01)),
        "CosineAnnealingWarmRestarts_1": rates(
            lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4)),
        "SequentialLR_warmup_cosine": rates(lambda o: S.SequentialLR(
            o, [S.LinearLR(o, start_factor=0.1, total_iters=4),
                S.CosineAnnealingLR(o, T_max=12, eta_min=0.001)], milestones=[5])),
        "SequentialLR_three": rates(lambda o: S.SequentialLR(
            o, [S.ExponentialLR(o, gamma=0.8), S.StepLR(o, step_size=3, gamma=0.5),
                S.LinearLR(o, start_factor=0.5, total_iters=6)], milestones=[4, 13])),
    }
    g = torch.tensor([-3.0, -0.5, 0.0, 0.2, 7.0], dtype=torch.float64)
    p = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    p.grad = g.clone()
    torch.nn.utils.clip_grad_value_([p], 0.4)
    out = pathlib.Path(__file__).with_name("optimizers.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_optimizers.py",
                               "torch": torch.__version__, "start": start().tolist(),
                               "optimizers": cases, "schedules": schedules,
                               "plateau": {"metrics": metrics, "runs": plateau},
                               "clip_value": {"grad": g.tolist(), "clipped": p.grad.tolist()}}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
