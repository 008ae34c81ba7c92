#!/usr/bin/env python3
"""Writes transformer_models.json: a ViT and a GPT built from torch.nn the way kiln's nn::
VisionTransformer and nn::GPT are (same modules, same parameter names), and a causal
MultiheadAttention with padding, in f64 on fixed weights and inputs: each case's state dict,
inputs, output and the gradients of sum(output * grad_output) for every parameter (and the float
inputs). tests/test_transformer_models.cpp loads the state dict into kiln's models and requires
the same numbers.

Run with a python3 that has torch:  /usr/bin/python3 tests/reference/make_transformer_models.py
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
    return {"shape": list(t.shape), "dtype": "f64", "values": t.double().flatten().tolist()}


def encoder(dim, heads, depth, mlp, eps):
    layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp, dropout=0.0,
                                       activation="gelu", layer_norm_eps=eps, batch_first=True,
                                       norm_first=True)
    return nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(dim, eps=eps),
                                 enable_nested_tensor=False)


class VisionTransformer(nn.Module):
    def __init__(self, image, patch, channels, classes, dim, depth, heads, mlp):
        super().__init__()
        self.conv_proj = nn.Conv2d(channels, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.encoder = encoder(dim, heads, depth, mlp, 1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        patches = self.conv_proj(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.class_token.expand(x.shape[0], -1, -1), patches], 1)
        return self.head(self.encoder(tokens + self.pos_embedding)[:, 0])


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, depth, heads):
        super().__init__()
        self.tok_embedding = nn.Embedding(vocab, dim)
        self.pos_embedding = nn.Embedding(context, dim)
        self.encoder = encoder(dim, heads, depth, 4 * dim, 1e-5)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        causal = torch.full((t, t), float("-inf"), dtype=torch.float64).triu(1)
        x = self.tok_embedding(tokens) + self.pos_embedding(torch.arange(t))
        return self.head(self.encoder(x, mask=causal))


def run(kind, module, inputs, call, options):
    module.double().train()
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            p.copy_(values(p.shape, 0.4, 0.5 + i))
    out = call(module, inputs)
    grad_output = values(out.shape, 0.7, 2.1)
    (out * grad_output).sum().backward()
    return {
        "kind": kind,
        "options": options,
        "state_dict": {k: tensor_json(v) for k, v in module.state_dict().items()},
        "inputs": {k: tensor_json(v) for k, v in inputs.items()},
        "output": tensor_json(out),
        "grad_output": tensor_json(grad_output),
        "input_grads": {k: tensor_json(v.grad) for k, v in inputs.items() if v.grad is not None},
        "param_grads": {k: tensor_json(p.grad) for k, p in module.named_parameters()},
    }


def main():
    cases = []
    vit = {"image": 8, "patch": 4, "channels": 2, "classes": 3, "dim": 8, "depth": 2, "heads": 2,
           "mlp": 12}
    images = values((2, 2, 8, 8), 1.0, 0.3).requires_grad_()
    cases.append(run("vit", VisionTransformer(**vit), {"images": images},
                     lambda m, t: m(t["images"]), vit))

    gpt = {"vocab": 11, "context": 6, "dim": 8, "depth": 2, "heads": 2}
    tokens = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    cases.append(run("gpt", GPT(**gpt), {"tokens": tokens}, lambda m, t: m(t["tokens"]), gpt))

    # MultiheadAttention, causal (kiln's is_causal; PyTorch 1.13's bool mask) with key padding.
    L, N, E = 5, 2, 8
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    padding = torch.tensor([[False] * 4 + [True], [False] * 5])
    x = values((N, L, E), 1.0, 0.9).requires_grad_()
    case = run("mha_causal", nn.MultiheadAttention(E, 2, batch_first=True), {"x": x},
               lambda m, t: m(t["x"], t["x"], t["x"], key_padding_mask=padding,
                              attn_mask=causal, need_weights=False)[0],
               {"embed_dim": E, "heads": 2})
    case["key_padding_mask"] = tensor_json(padding)
    cases.append(case)

    out = pathlib.Path(__file__).with_name("transformer_models.json")
    out.write_text(json.dumps({"made_by": "tests/reference/make_transformer_models.py",
                               "torch": torch.__version__, "cases": cases}))
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
