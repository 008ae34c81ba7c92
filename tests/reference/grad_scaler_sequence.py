#!/usr/bin/env python3
"""Writes grad_scaler_sequence.json: PyTorch's dynamic loss scaling through scripted runs of clean
and overflowing steps. Each run trains a Linear(3, 2) with SGD (momentum 0.9) under
torch.amp.GradScaler("cpu"); on the steps its script marks, an inf, -inf or NaN is written into
one gradient element after backward. After every update() the file records the scale, the growth
tracker and whether the optimizer stepped, and at the end the weights.
tests/test_grad_scaler.cpp replays the same runs with kiln's GradScaler and compares.

Needs PyTorch >= 2.3: earlier versions have no CPU _amp_update_scale_ (nor GradScaler("cpu")).

Run from anywhere:  python3 tests/reference/grad_scaler_sequence.py
"""
import json
import math
import pathlib

import torch

# One character a step: "." clean, "i" +inf, "m" -inf, "n" NaN written into weight.grad[0, 1].
POISON = {"i": math.inf, "m": -math.inf, "n": math.nan}
LR, MOMENTUM, LOSS_FACTOR = 0.05, 0.9, 0.01

CASES = [
    # PyTorch's factors with a short interval: growth, backoff, overflow streaks, a long clean run.
    {"name": "default_factors", "init_scale": 65536.0, "growth_factor": 2.0,
     "backoff_factor": 0.5, "growth_interval": 3, "clip": False,
     "steps": "....i..n...........m.i.n......ii.........nnn.........i.i.i.i........."},
    # Factors that are not powers of two: every new scale is rounded to f32.
    {"name": "odd_factors", "init_scale": 1000.0, "growth_factor": 1.7, "backoff_factor": 0.3,
     "growth_interval": 2, "clip": False,
     "steps": "..i.......n..i..........m......i.i....."},
    # Near f32's largest value: a growth past it is refused and only resets the tracker.
    {"name": "growth_capped_at_f32_max", "init_scale": 2.0 ** 125, "growth_factor": 2.0,
     "backoff_factor": 0.5, "growth_interval": 1, "clip": False,
     "steps": "......i......"},
    # unscale_ and clip_grad_norm_ before step, every step.
    {"name": "unscale_then_clip", "init_scale": 256.0, "growth_factor": 2.0,
     "backoff_factor": 0.5, "growth_interval": 4, "clip": True,
     "steps": "...n.........i......"},
]


def values(n, scale, phase):
    # Deterministic inputs without a random generator, so the file can be remade anywhere.
    return [scale * math.sin(0.7 * i + phase) for i in range(n)]


def run(case):
    model = torch.nn.Linear(3, 2)
    weight = values(6, 0.5, 0.1)
    bias = values(2, 0.5, 1.3)
    inputs = values(12, 1.0, 0.7)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(weight).reshape(2, 3))
        model.bias.copy_(torch.tensor(bias))
    x = torch.tensor(inputs).reshape(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    steps_taken = [0]
    optimizer.register_step_post_hook(lambda *_: steps_taken.__setitem__(0, steps_taken[0] + 1))
    scaler = torch.amp.GradScaler("cpu", init_scale=case["init_scale"],
                                  growth_factor=case["growth_factor"],
                                  backoff_factor=case["backoff_factor"],
                                  growth_interval=case["growth_interval"])
    out = dict(case, weight=weight, bias=bias, inputs=inputs, lr=LR, momentum=MOMENTUM,
               loss_factor=LOSS_FACTOR, scale=[], growth_tracker=[], stepped=[])
    for c in case["steps"]:
        optimizer.zero_grad()
        loss = (model(x) ** 2).sum() * LOSS_FACTOR
        scaler.scale(loss).backward()
        if c != ".":
            with torch.no_grad():
                model.weight.grad[0, 1] = POISON[c]
        if case["clip"]:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        before = steps_taken[0]
        scaler.step(optimizer)
        scaler.update()
        out["stepped"].append(steps_taken[0] > before)
        out["scale"].append(scaler.get_scale())
        out["growth_tracker"].append(scaler._get_growth_tracker())
    out["final_weight"] = model.weight.detach().flatten().tolist()
    out["final_bias"] = model.bias.detach().tolist()
    return out


def main():
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 3):
        raise SystemExit(f"torch {torch.__version__}: GradScaler('cpu') needs torch >= 2.3")
    cases = [run(c) for c in CASES]
    header = json.dumps({"torch": torch.__version__,
                         "script": "tests/reference/grad_scaler_sequence.py"})[:-1]
    lines = ",\n".join("  " + json.dumps(c) for c in cases)
    path = pathlib.Path(__file__).with_name("grad_scaler_sequence.json")
    path.write_text(header + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
