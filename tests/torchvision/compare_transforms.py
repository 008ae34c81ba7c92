#!/usr/bin/env python3
"""kiln's ImageFolder, decoders and photo transforms against torchvision's on the same files.

Writes PNG and JPEG files with PIL, runs each pipeline through torchvision (PIL images, then
ToTensor, as torchvision's ImageFolder does) and through kiln (tests/torchvision/probe.cpp), and
requires the same values: equal for u8 results, within 1e-6 after to_float and normalize. Also
compares ImageFolder's classes and sample order on a tree with awkward names. Exits 77 (ctest's
skip) when this python has no torchvision.

  compare_transforms.py --probe BUILD/tests/torchvision_probe --work-dir DIR
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torchvision
    from PIL import Image
    from torchvision import transforms as T
    from torchvision.transforms import functional as F
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import torchvision, torch, PIL and numpy ({e}); "
          "apt-get install python3-torchvision")
    sys.exit(77)

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def pixels(height, width, channels, seed):
    """Smooth ramps plus noise: resizing and JPEG both have something to do."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width]
    planes = [(x * (3 + c) + y * (5 - c) + 40 * c) % 256 for c in range(channels)]
    image = np.stack(planes, axis=-1).astype(np.int32) + rng.randint(-30, 31, (height, width, channels))
    return np.clip(image, 0, 255).astype(np.uint8)


def write_images(folder):
    """{name: path} of the test files, each a different way to store an image."""
    files = {}

    def save(name, image, **options):
        path = os.path.join(folder, name)
        image.save(path, **options)
        files[name] = path

    save("rgb_wide.png", Image.fromarray(pixels(37, 53, 3, 1), "RGB"))
    save("rgb_tall.jpg", Image.fromarray(pixels(61, 29, 3, 2), "RGB"), quality=90)
    save("gray.png", Image.fromarray(pixels(40, 40, 1, 3)[:, :, 0], "L"))
    save("rgba.png", Image.fromarray(pixels(30, 45, 4, 4), "RGBA"))
    save("palette.png", Image.fromarray(pixels(25, 31, 3, 5), "RGB").quantize(16))
    save("progressive.jpg", Image.fromarray(pixels(48, 64, 3, 6), "RGB"), quality=85,
         progressive=True)
    save("gray.jpg", Image.fromarray(pixels(33, 47, 1, 7)[:, :, 0], "L"), quality=90)
    save("big.jpg", Image.fromarray(pixels(96, 128, 3, 8), "RGB"), quality=90)
    # A CMYK JPEG as PIL writes them (Adobe's inverted samples, no YCCK transform).
    save("cmyk.jpg", Image.fromarray(pixels(21, 30, 4, 9), "CMYK"), quality=90)
    # Every colour of a 64-level lattice of the RGB cube, for the HSV round trips of the hue.
    levels = np.linspace(0, 255, 64).round().astype(np.uint8)
    cube = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(512, 512, 3)
    save("cube.png", Image.fromarray(cube, "RGB"))
    return files


def fixed_jitter(order, brightness, contrast, saturation, hue):
    """torchvision's ColorJitter.forward with its random choices given."""
    jitter = T.ColorJitter(brightness=0.5, contrast=0.5, saturation=0.5, hue=0.5)
    jitter.get_params = lambda *ranges: (torch.tensor(order), brightness, contrast, saturation, hue)
    return jitter


# Each pipeline: kiln's steps (probe.cpp) and torchvision's transforms on a PIL image.
PIPELINES = [
    ([], []),
    (["resize=24"], [T.Resize(24)]),
    (["resize=17x30"], [T.Resize((17, 30))]),
    (["resize=80"], [T.Resize(80)]),
    (["center_crop=20"], [T.CenterCrop(20)]),
    (["center_crop=64"], [T.CenterCrop(64)]),
    (["center_crop=21x50"], [T.CenterCrop((21, 50))]),
    (["resized_crop=3,5,20,18,16"], [lambda im: F.resized_crop(im, 3, 5, 20, 18, [16, 16])]),
    (["rrc_fallback=16"], [T.RandomResizedCrop(16, scale=(2.0, 2.0))]),
    (["hflip"], [T.RandomHorizontalFlip(p=1.0)]),
    (["brightness=0.6"], [T.ColorJitter(brightness=(0.6, 0.6))]),
    (["brightness=1.4"], [T.ColorJitter(brightness=(1.4, 1.4))]),
    (["contrast=0.5"], [T.ColorJitter(contrast=(0.5, 0.5))]),
    (["contrast=1.7"], [T.ColorJitter(contrast=(1.7, 1.7))]),
    (["saturation=0.3"], [T.ColorJitter(saturation=(0.3, 0.3))]),
    (["saturation=1.8"], [T.ColorJitter(saturation=(1.8, 1.8))]),
    (["hue=0.1"], [T.ColorJitter(hue=(0.1, 0.1))]),
    (["hue=-0.27"], [T.ColorJitter(hue=(-0.27, -0.27))]),
    (["jitter=3,0,2,1:0.7,1.3,1.6,0.2"], [fixed_jitter([3, 0, 2, 1], 0.7, 1.3, 1.6, 0.2)]),
    (["jitter=1,3,0,2:1.2,,0.5,-0.15"], [fixed_jitter([1, 3, 0, 2], 1.2, None, 0.5, -0.15)]),
    (["resize=32", "center_crop=28", "to_float", "normalize_imagenet"],
     [T.Resize(32), T.CenterCrop(28), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]),
]
# The hue shifts the RGB cube goes through: uint8(h * 255) truncates toward zero, and negative
# shifts wrap around.
HUE_FACTORS = [0.002, 0.05, -0.05, 0.25, -0.33, 0.5, -0.5]
GRAY_PIPELINES = [([], []), (["resize=24"], [T.Resize(24)]),
                  (["contrast=1.7"], [T.ColorJitter(contrast=(1.7, 1.7))]),
                  (["hue=0.3"], [T.ColorJitter(hue=(0.3, 0.3))]),
                  (["saturation=1.8", "to_float"], [T.ColorJitter(saturation=(1.8, 1.8)), T.ToTensor()])]


def torchvision_result(path, channels, steps, draft=None):
    """torchvision's loader (PIL, converted to RGB), the steps, and a CHW float array."""
    with open(path, "rb") as f:
        image = Image.open(f)
        if draft:
            image.draft("RGB", draft)
        image = image.convert("RGB")
    if channels == 1:
        image = image.convert("L")
    for step in steps:
        image = step(image)
    if isinstance(image, torch.Tensor):
        return image.numpy().astype(np.float32)
    array = np.asarray(image, dtype=np.float32)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def read_result(path):
    with open(path, "rb") as f:
        data = f.read()
    (rank,) = struct.unpack_from("<q", data, 0)
    shape = struct.unpack_from(f"<{rank}q", data, 8)
    return np.frombuffer(data, dtype="<f4", offset=8 + 8 * rank).reshape(shape)


def compare_folder(probe, work):
    """ImageFolder's classes and sample order, on names whose order is easy to get wrong."""
    root = os.path.join(work, "tree")
    names = ["b/x.png", "b/B.png", "b/sub dir/1.png", "b/sub/2.PNG", "b/sub/deeper/3.jpg",
             "b/sub-z/4.jpeg", "a/_.png", "a/notes.txt", "C/z.png", "a.b/q.png"]
    for name in names:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(pixels(4, 4, 3, 0), "RGB").save(path) if not name.endswith(".txt") \
            else open(path, "w").write("text")
    dataset = torchvision.datasets.ImageFolder(
        root, is_valid_file=lambda p: p.lower().endswith((".jpg", ".jpeg", ".png")))
    want = [f"class {c} {i}" for c, i in sorted(dataset.class_to_idx.items())]
    want += [f"sample {p} {label}" for p, label in dataset.samples]
    got = subprocess.run([probe, "folder", root], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    if got != want:
        print("ImageFolder differs from torchvision's:\n  kiln:        " + "\n  ".join(got) +
              "\n  torchvision: " + "\n  ".join(want))
        return 1
    print(f"ImageFolder: {len(dataset.classes)} classes and {len(dataset.samples)} samples "
          "in torchvision's order")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    print(f"torchvision {torchvision.__version__}, Pillow {Image.__version__}")
    files = write_images(args.work_dir)
    # A YCCK JPEG (Photoshop's kind of CMYK file), which PIL does not write: kiln's encoder's.
    files["ycck.jpg"] = os.path.join(args.work_dir, "ycck.jpg")
    subprocess.run([args.probe, "ycck", files["ycck.jpg"]], check=True)
    for name in ("cmyk.jpg", "ycck.jpg"):
        with Image.open(files[name]) as image:
            assert image.mode == "CMYK", f"{name}: PIL reads it as {image.mode}, not CMYK"

    # (image, channels, min_short_side, kiln steps, torchvision steps, PIL draft size)
    cases = []
    for name, path in files.items():
        if name == "cube.png":
            for hue in HUE_FACTORS:
                cases.append((path, 3, 0, [f"hue={hue}"], [T.ColorJitter(hue=(hue, hue))], None))
            continue
        for kiln_steps, tv_steps in PIPELINES:
            cases.append((path, 3, 0, kiln_steps, tv_steps, None))
        for kiln_steps, tv_steps in GRAY_PIPELINES:
            cases.append((path, 1, 0, kiln_steps, tv_steps, None))
    # Reduced-scale JPEG decoding is libjpeg's, as PIL's draft mode: 128x96 at 1/4 and 1/2.
    cases.append((files["big.jpg"], 3, 24, [], [], (32, 24)))
    cases.append((files["big.jpg"], 3, 40, ["resize=20"], [T.Resize(20)], (64, 48)))

    jobs = os.path.join(args.work_dir, "jobs.tsv")
    with open(jobs, "w") as f:
        for i, (path, channels, min_side, kiln_steps, _, _) in enumerate(cases):
            out = os.path.join(args.work_dir, f"out{i}.bin")
            f.write("\t".join([path, out, str(channels), str(min_side)] + kiln_steps) + "\n")
    subprocess.run([args.probe, "jobs", jobs], check=True)

    failures = compare_folder(args.probe, args.work_dir)
    for i, (path, channels, min_side, kiln_steps, tv_steps, draft) in enumerate(cases):
        got = read_result(os.path.join(args.work_dir, f"out{i}.bin"))
        want = torchvision_result(path, channels, tv_steps, draft)
        label = f"{os.path.basename(path)} channels={channels} min_short_side={min_side} " \
                f"{' '.join(kiln_steps) or '(decode)'}"
        if got.shape != want.shape:
            print(f"FAIL {label}: shape {got.shape}, torchvision {want.shape}")
            failures += 1
            continue
        tolerance = 1e-6 if "to_float" in kiln_steps else 0.0
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        if diff.max() > tolerance:
            worst = np.unravel_index(diff.argmax(), diff.shape)
            print(f"FAIL {label}: {int((diff > tolerance).sum())} of {diff.size} values differ, "
                  f"the worst at {worst}: kiln {got[worst]}, torchvision {want[worst]}")
            failures += 1
    print(f"{len(cases) - failures} of {len(cases)} pipelines equal torchvision's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
