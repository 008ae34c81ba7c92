#!/usr/bin/env python3
"""PyTorch twin of kiln-gpt: the same GPT (nn/gpt.h's modules and parameter names from torch.nn),
the same text, the same batches (the windows kiln-gpt's corpus.cpp draws with SplitMix64), the same
AdamW, cosine schedule and gradient clipping, from the initial weights kiln-gpt --save-init wrote;
prints the loss curve in kiln-gpt's format and can write it as CSV.

    kiln-gpt --steps 600 --save-init init.pth --loss-csv kiln.csv
    /usr/bin/python3 apps/gpt/gpt_torch.py --steps 600 --init init.pth --loss-csv torch.csv
"""
import argparse
import math
import os
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def window_batch(data, context, batch, step, seed):
    starts = len(data) - context
    rows = []
    for i in range(batch):
        start = splitmix64(((seed << 32) + step * batch + i) & MASK64) % starts
        rows.append(data[start:start + context + 1])
    windows = torch.stack(rows).long()
    return windows[:, :-1], windows[:, 1:]


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, depth, heads):
        super().__init__()
        self.tok_embedding = nn.Embedding(vocab, dim)
        self.pos_embedding = nn.Embedding(context, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(dim),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        causal = torch.full((t, t), float("-inf"), device=tokens.device).triu(1)
        x = self.tok_embedding(tokens) + self.pos_embedding(torch.arange(t, device=tokens.device))
        return self.head(self.encoder(x, mask=causal))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--text", nargs="*", default=None)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--init", required=True, help="kiln-gpt --save-init's .pth file")
    parser.add_argument("--loss-csv")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = "/usr/share/common-licenses"
    files = args.text or sorted(os.path.join(folder, f) for f in os.listdir(folder)
                                if os.path.isfile(os.path.join(folder, f)))
    data = b"".join(open(f, "rb").read() for f in files)
    split = len(data) - len(data) // 10
    train = torch.frombuffer(bytearray(data[:split]), dtype=torch.uint8)
    validation = torch.frombuffer(bytearray(data[split:]), dtype=torch.uint8)
    model = GPT(256, args.context, args.dim, args.depth, args.heads)
    model.load_state_dict(torch.load(args.init))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=args.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    print(f"gpt_torch: torch {torch.__version__}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {len(data)} bytes of text",
          flush=True)

    def validation_loss():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for b in range(args.eval_batches):
                x, y = window_batch(validation, args.context, args.batch_size, b, args.seed + 1)
                total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
        model.train()
        return total / args.eval_batches

    csv = open(args.loss_csv, "w") if args.loss_csv else None
    if csv:
        csv.write("step,train_loss,validation_loss\n")
    running, counted, start = 0.0, 0, time.perf_counter()
    for step in range(args.steps):
        x, y = window_batch(train, args.context, args.batch_size, step, args.seed)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        schedule.step()
        running += loss.item()
        counted += 1
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            v = validation_loss()
            print(f"step {step + 1:5d}: train loss {running / counted:.4f}, validation loss {v:.4f}",
                  flush=True)
            if csv:
                csv.write(f"{step + 1},{running / counted},{v}\n")
            running, counted = 0.0, 0
    print(f"gpt_torch: {args.steps} steps in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
