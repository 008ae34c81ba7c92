#!/usr/bin/env python3
"""Writes recurrent.json: PyTorch 1.13's LSTM and GRU (layers, bidirectional, batch_first, no bias,
unbatched) in f64 with deterministic weights: output, h_n, c_n, and the gradients of
sum(output * g) + sum(h_n * gh) (+ sum(c_n * gc)) for the input, the initial states and every
parameter. tests/test_recurrent.cpp checks kiln against them.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_recurrent.py
"""
import json
import math
import pathlib

import torch


def values(shape, a, b):
    n = math.prod(shape)
    return torch.tensor([0.6 * math.sin(a * i + b) for i in range(n)],
                        dtype=torch.float64).reshape(shape)


def flat(t):
    return t.detach().flatten().tolist()


def case(kind, input_size, hidden, options, x_shape):
    module = getattr(torch.nn, kind)(input_size, hidden, **options).double()
    with torch.no_grad():
        for k, (name, p) in enumerate(module.named_parameters()):
            p.copy_(values(list(p.shape), 0.37 + 0.11 * k, 0.5 * k))
    x = values(x_shape, 1.1, 0.4).requires_grad_()
    states = module.num_layers * (2 if module.bidirectional else 1)
    batched = len(x_shape) == 3
    batch = (x_shape[0] if options.get("batch_first") else x_shape[1]) if batched else None
    state_shape = [states, batch, hidden] if batched else [states, hidden]
    h0 = values(state_shape, 0.9, 1.7).requires_grad_()
    c0 = values(state_shape, 1.3, 0.2).requires_grad_()
    out, hn = module(x, (h0, c0)) if kind == "LSTM" else module(x, h0)
    cn = None
    if kind == "LSTM":
        hn, cn = hn
    g = values(list(out.shape), 0.3, 0.8)
    gh = values(list(hn.shape), 0.5, 2.1)
    loss = (out * g).sum() + (hn * gh).sum()
    result = {"kind": kind, "input_size": input_size, "hidden": hidden, "options": options,
              "x_shape": x_shape, "state_shape": state_shape, "x": flat(x), "h0": flat(h0),
              "output": flat(out), "output_shape": list(out.shape), "h_n": flat(hn),
              "grad_output": flat(g), "grad_h_n": flat(gh)}
    if kind == "LSTM":
        gc = values(list(cn.shape), 0.7, 0.9)
        loss = loss + (cn * gc).sum()
        result.update({"c0": flat(c0), "c_n": flat(cn), "grad_c_n": flat(gc)})
    loss.backward()
    result["x_grad"] = flat(x.grad)
    result["h0_grad"] = flat(h0.grad)
    if kind == "LSTM":
        result["c0_grad"] = flat(c0.grad)
    result["parameters"] = {name: {"shape": list(p.shape), "value": flat(p), "grad": flat(p.grad)}
                            for name, p in module.named_parameters()}
    return result


def main():
    cases = [
        case("LSTM", 3, 4, {"num_layers": 2, "bidirectional": True, "batch_first": True}, [2, 5, 3]),
        case("LSTM", 3, 4, {}, [6, 3]),
        case("GRU", 3, 5, {"num_layers": 2}, [4, 2, 3]),
        case("GRU", 3, 4, {"bidirectional": True, "bias": False}, [5, 3, 3]),
    ]
    path = pathlib.Path(__file__).with_name("recurrent.json")
    path.write_text(json.dumps({"made_by": "tests/reference/make_recurrent.py",
                                "torch": torch.__version__, "cases": cases}))
    print(f"wrote {path} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
