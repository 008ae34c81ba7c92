#!/usr/bin/env python3
"""Writes attention.json: PyTorch's nn.MultiheadAttention, TransformerEncoderLayer,
TransformerEncoder, TransformerDecoderLayer, TransformerDecoder and Transformer (f64, training mode
with dropout 0, so no fast path) on fixed weights and inputs: each case's state dict, inputs,
masks, outputs, attention weights, and the gradients of sum(output * grad_output) for the inputs
and every parameter. tests/test_attention.cpp loads the same state dict into kiln's modules and
requires the same numbers.

Run from anywhere with a python3 that has torch:  /usr/bin/python3 tests/reference/make_attention.py
"""
import json
import math
import pathlib

import torch
from torch import nn


def values(shape, scale, phase):
    # Deterministic values without a random generator, so the file can be remade anywhere.
    n = math.prod(shape)
    return torch.tensor([scale * math.sin(0.37 * i + phase) for i in range(n)],
                        dtype=torch.float64).reshape(shape)


def tensor_json(t):
    t = t.detach()
    if t.dtype == torch.bool:
        return {"shape": list(t.shape), "dtype": "bool", "values": t.flatten().int().tolist()}
    return {"shape": list(t.shape), "dtype": "f64",
            "values": [v if math.isfinite(v) else ("-inf" if v < 0 else "inf" if v > 0 else "nan")
                       for v in t.flatten().tolist()]}


def set_weights(module, phase):
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            p.copy_(values(p.shape, 0.4, phase + i))


def run(kind, module, inputs, call, weights_out=False):
    module.double().train()
    set_weights(module, 0.5)
    tensors = {name: values(shape, 1.0, 1.3 * i).requires_grad_()
               for i, (name, shape) in enumerate(inputs)}
    result = call(module, tensors)
    out, weights = (result if isinstance(result, tuple) else (result, None))
    grad_output = values(out.shape, 0.7, 2.1)
    (out * grad_output).sum().backward()
    case = {
        "kind": kind,
        "state_dict": {k: tensor_json(v) for k, v in module.state_dict().items()},
        "inputs": {k: tensor_json(v) for k, v in tensors.items()},
        "output": tensor_json(out),
        "grad_output": tensor_json(grad_output),
        "input_grads": {k: tensor_json(v.grad) for k, v in tensors.items()},
        "param_grads": {k: tensor_json(p.grad) for k, p in module.named_parameters()},
    }
    if weights is not None:
        case["weights"] = tensor_json(weights)
    return case


def main():
    L, S, N, E, H = 5, 7, 2, 8, 2
    float_mask = values((L, S), 1.0, 0.2)
    padding = torch.tensor([[False] * 5 + [True] * 2, [False] * 6 + [True]])
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)  # True: may not attend
    src_padding = torch.tensor([[False] * 4 + [True], [False] * 3 + [True] * 2])
    cases = []

    def cross(m, t):
        return m(t["query"], t["key"], t["value"], key_padding_mask=padding, attn_mask=float_mask)
    case = run("mha", nn.MultiheadAttention(E, H), [("query", (L, N, E)), ("key", (S, N, E)),
                                                    ("value", (S, N, E))], cross)
    case.update(options={"batch_first": False, "bias": True, "average": True},
                masks={"key_padding_mask": tensor_json(padding), "attn_mask": tensor_json(float_mask)})
    cases.append(case)

    def self_causal(m, t):
        return m(t["x"], t["x"], t["x"], attn_mask=causal, average_attn_weights=False)
    case = run("mha", nn.MultiheadAttention(E, 4, bias=False, batch_first=True),
               [("x", (N, L, E))], self_causal)
    case.update(options={"batch_first": True, "bias": False, "average": False, "heads": 4},
                masks={"attn_mask": tensor_json(causal)})
    cases.append(case)

    def unbatched(m, t):
        return m(t["query"], t["key"], t["value"])
    case = run("mha", nn.MultiheadAttention(E, H), [("query", (L, E)), ("key", (S, E)),
                                                    ("value", (S, E))], unbatched)
    case.update(options={"batch_first": False, "bias": True, "average": True}, masks={})
    cases.append(case)

    def encoder_layer(m, t):
        return m(t["src"], src_mask=causal, src_key_padding_mask=src_padding)
    for norm_first, activation, batch_first in [(False, "relu", False), (True, "gelu", True)]:
        layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=12, dropout=0.0,
                                           activation=activation, batch_first=batch_first,
                                           norm_first=norm_first)
        shape = (N, L, E) if batch_first else (L, N, E)
        case = run("encoder_layer", layer, [("src", shape)], encoder_layer)
        case.update(options={"norm_first": norm_first, "activation": activation,
                             "batch_first": batch_first, "dim_feedforward": 12},
                    masks={"mask": tensor_json(causal),
                           "src_key_padding_mask": tensor_json(src_padding)})
        cases.append(case)

    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=12, dropout=0.0, norm_first=True)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False)
    case = run("encoder", encoder, [("src", (L, N, E))], lambda m, t: m(t["src"], mask=causal))
    case.update(options={"norm_first": True, "activation": "relu", "batch_first": False,
                         "dim_feedforward": 12, "layers": 2, "final_norm": True},
                masks={"mask": tensor_json(causal)})
    cases.append(case)

    # The decoder side: tgt of length L over memory of length S.
    memory_mask = values((L, S), 1.0, 0.9)
    tgt_padding = src_padding

    def decoder_call(m, t):
        return m(t["tgt"], t["memory"], tgt_mask=causal, memory_mask=memory_mask,
                 tgt_key_padding_mask=tgt_padding, memory_key_padding_mask=padding)
    decoder_masks = {"tgt_mask": tensor_json(causal), "memory_mask": tensor_json(memory_mask),
                     "tgt_key_padding_mask": tensor_json(tgt_padding),
                     "memory_key_padding_mask": tensor_json(padding)}
    for norm_first, activation, batch_first in [(False, "relu", False), (True, "gelu", True)]:
        layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=12, dropout=0.0,
                                           activation=activation, batch_first=batch_first,
                                           norm_first=norm_first)
        tgt, mem = ((N, L, E), (N, S, E)) if batch_first else ((L, N, E), (S, N, E))
        case = run("decoder_layer", layer, [("tgt", tgt), ("memory", mem)], decoder_call)
        case.update(options={"norm_first": norm_first, "activation": activation,
                             "batch_first": batch_first, "dim_feedforward": 12},
                    masks=decoder_masks)
        cases.append(case)

    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=12, dropout=0.0)
    decoder = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(E))
    case = run("decoder", decoder, [("tgt", (L, N, E)), ("memory", (S, N, E))],
               lambda m, t: m(t["tgt"], t["memory"], tgt_mask=causal))
    case.update(options={"norm_first": False, "activation": "relu", "batch_first": False,
                         "dim_feedforward": 12, "layers": 2, "final_norm": True},
                masks={"tgt_mask": tensor_json(causal)})
    cases.append(case)

    subsequent = nn.Transformer.generate_square_subsequent_mask(L).double()

    def transformer_call(m, t):
        return m(t["src"], t["tgt"], tgt_mask=subsequent, src_key_padding_mask=padding,
                 memory_key_padding_mask=padding)
    model = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=12,
                           dropout=0.0, batch_first=True)
    case = run("transformer", model, [("src", (N, S, E)), ("tgt", (N, L, E))], transformer_call)
    case.update(options={"norm_first": False, "activation": "relu", "batch_first": True,
                         "dim_feedforward": 12, "encoder_layers": 1, "decoder_layers": 2},
                masks={"tgt_mask": tensor_json(subsequent),
                       "src_key_padding_mask": tensor_json(padding),
                       "memory_key_padding_mask": tensor_json(padding)})
    cases.append(case)

    out = pathlib.Path(__file__).with_name("attention.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_attention.py",
                               "torch": torch.__version__, "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
