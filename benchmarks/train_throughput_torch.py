#!/usr/bin/env python3
"""PyTorch peer of train_throughput.cpp: the same ResNets (CIFAR-style ResNet-20 with 1x1-conv
shortcuts, as kiln's; torchvision's ResNet-50 v1.5, written out so torchvision is not needed) and
ViTs (kiln's nn::VisionTransformer from torch.nn's layers, with AdamW), batch, optimizer, precision
and thread count, on random data; prints images/s and peak memory in train_throughput's format.

    /usr/bin/python3 benchmarks/train_throughput_torch.py --batch-size 128 --threads 2 --steps 20
    python3 benchmarks/train_throughput_torch.py --device cuda --model resnet50 --imagenet \
        --amp bf16 --channels-last --tf32
    python3 benchmarks/train_throughput_torch.py --device cuda --cuda-graph

With --cuda-graph the warm-up steps run on a side stream, the step (forward, backward, the
optimizer, the GradScaler) is captured with torch.cuda.graph as PyTorch's documentation shows for a
whole network, and the timed steps are replays. SGD is then fused=True (PyTorch >= 2.3), which
takes the GradScaler's inf check on the GPU instead of reading it on the host.
"""
import argparse
import contextlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet20(nn.Module):
    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, in_planes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for b in range(3):
                blocks.append(BasicBlock(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Bottleneck(nn.Module):
    """torchvision's: 1x1, 3x3 carrying the stride (v1.5), 1x1; expansion 4."""

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or in_planes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self, in_channels=3, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, in_planes = [], 64
        for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            blocks = []
            for b in range(count):
                blocks.append(Bottleneck(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes * 4
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class VisionTransformer(nn.Module):
    """kiln's nn::VisionTransformer (nn/vit.h): patches by a strided convolution, a class token,
    learned positions, a pre-norm GELU TransformerEncoder with a final LayerNorm, a linear head."""

    def __init__(self, image, patch, channels, classes, dim, depth, heads, mlp):
        super().__init__()
        self.conv_proj = nn.Conv2d(channels, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp, dropout=0.0,
                                           activation="gelu", layer_norm_eps=1e-6,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(dim, eps=1e-6),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        patches = self.conv_proj(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.class_token.expand(x.shape[0], -1, -1), patches], 1)
        return self.head(self.encoder(tokens + self.pos_embedding)[:, 0])


# kiln's make_vit sizes (nn/vit.cpp): dim, depth, heads, mlp.
VIT_SIZES = {"vit-mini": (64, 4, 4, 128), "vit-tiny": (192, 12, 3, 768)}


def make_model(name, channels, side, classes):
    if name in VIT_SIZES:
        dim, depth, heads, mlp = VIT_SIZES[name]
        return VisionTransformer(side, 4 if side <= 64 else 16, channels, classes, dim, depth,
                                 heads, mlp)
    return ResNet50(channels, classes) if name == "resnet50" else ResNet20(channels, classes)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet20",
                        choices=["resnet20", "resnet50", *VIT_SIZES])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--imagenet", action="store_true",
                        help="3x224x224 images and 1000 classes (ResNet-50's stem is ImageNet's)")
    parser.add_argument("--amp", default="off", choices=["off", "fp16", "bf16"])
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--tf32", action="store_true",
                        help="TF32 for f32 matmul and conv (PyTorch's conv default)")
    parser.add_argument("--cudnn-benchmark", action="store_true")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture the step with torch.cuda.graph after the warm-up and time "
                             "its replays")
    args = parser.parse_args()
    if args.cuda_graph and (not args.device.startswith("cuda") or args.warmup < 1):
        parser.error("--cuda-graph needs --device cuda and at least one --warmup step")
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(0)
    device = torch.device(args.device)
    channels, side, classes = (3, 224, 1000) if args.imagenet else (1, 28, 10)
    model = make_model(args.model, channels, side, classes).to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    fused = {"fused": True} if args.cuda_graph else {}
    if args.model in VIT_SIZES:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                              weight_decay=5e-4, **fused)
    scaler = None
    if args.amp == "fp16":
        scaler = (torch.amp.GradScaler(device.type) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    amp_dtype = torch.bfloat16 if args.amp == "bf16" else torch.float16
    x = torch.randn(args.batch_size, channels, side, side, device=device)
    x = x.contiguous(memory_format=memory_format)
    y = torch.randint(0, classes, (args.batch_size,), device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(zero_grad=True):
        mixed = (torch.autocast(device.type, dtype=amp_dtype) if args.amp != "off"
                 else contextlib.nullcontext())
        with mixed:
            loss = F.cross_entropy(model(x), y)
        if zero_grad:
            opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    start = cpu_start = 0.0
    if args.cuda_graph:
        # torch.cuda.graph's recipe: warm up on a side stream, then capture with the gradients set
        # to None (the captured backward allocates them in the graph's pool); x and y are static.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(args.warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            step(zero_grad=False)
        sync()
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        cpu_start = time.process_time()
        for _ in range(args.steps):
            graph.replay()
    for i in range(0 if args.cuda_graph else args.warmup + args.steps):
        if i == args.warmup:
            sync()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            cpu_start = time.process_time()
        step()
    sync()
    total = time.perf_counter() - start
    cpu_total = time.process_time() - cpu_start
    precision = (f"{args.amp} autocast" if args.amp != "off" else "f32/tf32" if args.tf32 else "f32")
    if args.channels_last:
        precision += " channels_last"
    if args.cuda_graph:
        precision += " cuda_graph"
    peak = (f", peak memory {torch.cuda.max_memory_allocated(device) / 2**20:.1f} MiB"
            if device.type == "cuda" else "")
    print(f"torch {torch.__version__} {args.model} {device} {precision} batch {args.batch_size} "
          f"threads {args.threads}: {args.batch_size * args.steps / total:.1f} images/s, "
          f"{1e3 * total / args.steps:.2f} ms/step, cpu {1e3 * cpu_total / args.steps:.1f} ms/step"
          f"{peak}")


if __name__ == "__main__":
    main()
