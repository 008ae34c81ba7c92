#!/usr/bin/env python3
"""PyTorch peer of kiln-train's default recipe: CIFAR-style ResNet-20 on Fashion-MNIST, batch 128,
SGD Nesterov momentum 0.9, weight decay 5e-4, one-cycle with max lr 0.2 (PyTorch's defaults), inputs
normalised with mean 0.2860 and std 0.3530, no augmentation. Prints each epoch's images/s and the
final test accuracy, as kiln-train does, on the device asked for.

    python3 benchmarks/train_recipe_torch.py --device cuda --data-dir /usr/share/datasets/fashion-mnist
    /usr/bin/python3 benchmarks/train_recipe_torch.py --model vit-mini --optimizer adamw --lr 1e-3 \
        --weight-decay 0.05     # kiln-train --model vit-mini with the same flags
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_throughput_torch import ResNet20, make_model  # noqa: E402


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(root, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(root, name)):
            return os.path.join(root, name)
    raise FileNotFoundError(f"{stem}[.gz] not found in {root}")


def load(root, split):
    images = read_idx(find(root, f"{split}-images-idx3-ubyte"))
    labels = read_idx(find(root, f"{split}-labels-idx1-ubyte"))
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="resnet20", choices=["resnet20", "vit-mini"])
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    parser.add_argument("--lr", type=float, default=0.2, help="the one-cycle's peak rate")
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "t10k")
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    model = (ResNet20() if args.model == "resnet20" else make_model(args.model, 1, 28, 10))
    model = model.to(device)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                              weight_decay=args.weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps = (len(x_train) + args.batch_size - 1) // args.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, epochs=args.epochs,
                                                steps_per_epoch=steps)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train), device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            correct = sum((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum().item()
                          for i in range(0, len(x_test), 1000))
        print(f"epoch {epoch + 1}: {len(x_train) / seconds:.0f} img/s, {seconds:.1f} s, "
              f"test acc {100 * correct / len(x_test):.2f}%", flush=True)
    print(f"torch {torch.__version__} on {device}: test accuracy: {100 * correct / len(x_test):.2f}%")


if __name__ == "__main__":
    main()
