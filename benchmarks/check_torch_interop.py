#!/usr/bin/env python3
"""Loads a kiln model.safetensors into the PyTorch ResNet-20 of train_throughput_torch.py with
strict=True (so every torchvision-style name and shape must match), then measures its accuracy on
the Fashion-MNIST test set with PyTorch. The safetensors file is parsed here with json and numpy,
following the format's spec, since Debian ships no safetensors package.

    /usr/bin/python3 benchmarks/check_torch_interop.py /tmp/train-run/model.safetensors
"""
import gzip
import json
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from train_throughput_torch import ResNet20  # noqa: E402

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors


def fashion_test(root="/usr/share/datasets/fashion-mnist"):
    with gzip.open(f"{root}/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{root}/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


def main():
    model = ResNet20()
    model.load_state_dict(load_safetensors(sys.argv[1]), strict=True)
    model.eval()
    x, y = fashion_test()
    with torch.no_grad():
        correct = sum((model(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum().item() for i in range(0, len(y), 500))
    print(f"PyTorch {torch.__version__} with kiln's weights (strict load): test accuracy {100 * correct / len(y):.2f}%")


if __name__ == "__main__":
    main()
