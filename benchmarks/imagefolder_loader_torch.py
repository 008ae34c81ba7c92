#!/usr/bin/env python3
"""torchvision peer of imagefolder_loader.cpp: torchvision's ImageFolder (PIL decoding) with the
same training transforms (RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize), batched
by torch's DataLoader with 1, 2, 4, ... worker processes; prints images/s in imagefolder_loader's
format.

    /usr/bin/python3 benchmarks/imagefolder_loader_torch.py --data-dir /tmp/loader-bench/train
"""
import argparse
import time

import torch
from torchvision import datasets, transforms as T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the work is in the workers, as in kiln's loader
    transform = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
                           T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    folder = datasets.ImageFolder(args.data_dir, transform)
    print(f"imagefolder_loader_torch: {len(folder)} images in {len(folder.classes)} classes, "
          f"batch {args.batch_size}, {args.image_size}-pixel crops")
    for workers in (int(w) for w in args.workers.split(",")):
        loader = torch.utils.data.DataLoader(folder, batch_size=args.batch_size, shuffle=True,
                                             num_workers=workers)
        images = 0
        start = time.perf_counter()
        for _ in range(args.epochs):
            for x, _ in loader:
                images += x.shape[0]
        seconds = time.perf_counter() - start
        print(f"workers {workers}: {images / seconds:.0f} images/s ({images} images in "
              f"{seconds:.2f} s)")


if __name__ == "__main__":
    main()
