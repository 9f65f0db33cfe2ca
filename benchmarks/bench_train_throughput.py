"""Benchmark: training throughput of spmlkit's image pipeline against a reference-style loop.

One run, the same model and the same images, printed side by side as images per second:

* **data pipeline**: one epoch of spmlkit's training loader alone (``ImageSource.train_batches``:
  the seeded (index, flip) batches, loader workers, pinned memory and the copy to the device),
  reading the JPEG files, then reading a pre-resized cache (``spmlkit prepare --cache-size``)
  of exactly the image size;
* **spmlkit training**: :func:`spmlkit.training.train` itself (method AN), whose per-epoch
  ``images_per_second`` times the training step: forward, loss, backward and Adam, with
  channels-last and bf16 autocast on a GPU, the automatic number of loader workers, and
  ``--compile`` when asked; the second epoch is reported (the first one starts the workers);
* **reference-style loop**: what the papers' code does: PIL decode, resize and flip in
  ``__getitem__`` every epoch, ``num_workers=0``, batch 8, float32, no channels-last, and
  ``loss.item()`` after every step.

Images are generated into a temporary folder: smooth colour fields with texture, saved as
JPEG (quality 90) at ``--source-size``, with random multi-labels over 20 classes; each row is
measured ``--repeats`` times and the median printed. On a CPU the defaults take a minute::

    python benchmarks/bench_train_throughput.py

and on a GPU, unchanged apart from its options (ResNet-50 at 448 x 448 from COCO-sized JPEGs)::

    python benchmarks/bench_train_throughput.py --device cuda --backbone torchvision:resnet50 \\
        --image-size 448 --source-size 640x480 --images 2048 --batch-size 64

The model is randomly initialised (``pretrained: false``): throughput does not depend on the
weights, and the benchmark runs offline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from spmlkit.data.formats.prepared import write_prepared
from spmlkit.data.image_cache import write_image_cache
from spmlkit.data.images import IMAGENET_MEAN, IMAGENET_STD, loader_workers
from spmlkit.models import build_model
from spmlkit.training import train
from spmlkit.training.config import RunConfig
from spmlkit.training.run_data import load_image_data
from spmlkit.training.sources import ImageSource

CLASSES = 20
TEST_IMAGES = 32  # the run's final evaluation needs a test list; it is not timed


def make_images(folder: Path, count: int, width: int, height: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``count`` JPEGs of ``width x height`` under ``folder`` and their 0/1 labels (1-3 positives each)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    names, labels = [], np.zeros((count, CLASSES), dtype=np.uint8)
    for i in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height),
                                                                                          Image.BICUBIC)
        pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-25, 26, (height, width, 3))
        name = f"{i:06d}.jpg"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / name, quality=90)
        names.append(name)
        labels[i, rng.choice(CLASSES, size=rng.integers(1, 4), replace=False)] = 1
    return names, labels


def prepared_folder(root: Path, out: Path, names: list[str], labels: np.ndarray) -> Path:
    """A prepared folder over the generated images (the last ``TEST_IMAGES`` are the test list)."""
    train_n = len(names) - TEST_IMAGES
    write_prepared(out, dataset="bench", class_names=[f"c{k}" for k in range(CLASSES)],
                   train_images=names[:train_n], train_labels=labels[:train_n], test_images=names[train_n:],
                   test_labels=labels[train_n:], root=root)
    return out


def config_for(args: argparse.Namespace, prepared: Path, **extra) -> RunConfig:
    return RunConfig(dataset="prepared", prepared=str(prepared), backbone=args.backbone, pretrained=False,
                     image_size=args.image_size, batch_size=args.batch_size, epochs=2, val_frac=0.05, lr=1e-4,
                     method="an", device=args.device, num_workers=args.num_workers, compile=args.compile,
                     hflip=True, num_threads=args.threads, **extra)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def data_pipeline(args: argparse.Namespace, prepared: Path) -> float:
    """Images per second of one epoch of the training loader alone (after a warm-up epoch)."""
    config = config_for(args, prepared)
    data = load_image_data(config)
    device = torch.device(args.device)
    rows = np.arange(len(data.Y_train))
    source = ImageSource(data.train_dataset(), data.test_dataset(), rows, rows[:0], batch_size=args.batch_size,
                         eval_batch_size=None, hflip=True, num_workers=args.num_workers, device=device,
                         channels_last=True, num_classes=CLASSES)
    generator = torch.Generator().manual_seed(0)
    for _ in source.train_batches(generator):  # starts the workers
        pass
    _sync(device)
    start, seen = time.perf_counter(), 0
    for _, idx in source.train_batches(generator):
        seen += len(idx)
    _sync(device)
    return seen / (time.perf_counter() - start)


def spmlkit_training(args: argparse.Namespace, prepared: Path) -> float:
    """``images_per_second`` of train()'s second epoch: the real training step."""
    result = train(config_for(args, prepared))
    return float(result.history[-1]["images_per_second"])


class ReferenceStyleImages(Dataset):
    """As in the papers' code: open, decode, resize and flip the original file in ``__getitem__``."""

    def __init__(self, paths: list[Path], labels: np.ndarray, size: int) -> None:
        from torchvision import transforms as T

        self.paths, self.labels = paths, torch.as_tensor(labels, dtype=torch.float32)
        self.transform = T.Compose([T.Resize((size, size)), T.RandomHorizontalFlip(0.5), T.ToTensor(),
                                    T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            return self.transform(img.convert("RGB")), self.labels[i]


def reference_loop(args: argparse.Namespace, root: Path, names: list[str], labels: np.ndarray) -> float:
    """Images per second of one epoch of a papers'-style loop (after three warm-up steps)."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(args.backbone, CLASSES, pretrained=False).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    train_n = len(names) - TEST_IMAGES
    data = ReferenceStyleImages([root / n for n in names[:train_n]], labels[:train_n], args.image_size)
    loader = DataLoader(data, batch_size=args.reference_batch_size, shuffle=True, num_workers=0)
    loss_fn = nn.BCEWithLogitsLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()  # the papers' running loss: one device-to-host sync per step

    model.train()
    for k, (x, y) in enumerate(loader):  # warm-up: allocator, cuDNN's algorithm choice
        step(x, y)
        if k == 2:
            break
    start, seen, running = time.perf_counter(), 0, 0.0
    for x, y in loader:
        running += step(x, y)
        seen += len(x)
    _sync(device)
    return seen / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--backbone", default="small:cnn")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--source-size", default="64x64", help="WxH of the generated JPEGs")
    parser.add_argument("--images", type=int, default=320, help="generated images (the last 32 are the test list)")
    parser.add_argument("--batch-size", type=int, default=32, help="spmlkit's batch")
    parser.add_argument("--reference-batch-size", type=int, default=8, help="the papers' batch")
    parser.add_argument("--num-workers", type=int, default=None, help="spmlkit's loader workers (default: automatic)")
    parser.add_argument("--compile", action="store_true", help="torch.compile spmlkit's model")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads of the training process, both sides (default: torch's own choice); "
                             "on a shared or small machine 1 avoids threads spinning against each other")
    parser.add_argument("--repeats", type=int, default=1, help="measure each row N times, report the median")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.source_size.lower().split("x"))
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # the reference loop's; spmlkit's runs set theirs (num_threads)
    if args.images <= TEST_IMAGES + args.batch_size:
        parser.error(f"--images must exceed {TEST_IMAGES + args.batch_size} (the test list plus one batch)")

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    device_name = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "CPU"
    print(f"{device_name}, {cpus} CPUs ({torch.get_num_threads()} torch threads), torch {torch.__version__}; "
          f"{args.backbone} at {args.image_size} x "
          f"{args.image_size} from {width} x {height} JPEGs, {args.images - TEST_IMAGES} training images; spmlkit: "
          f"batch {args.batch_size}, {loader_workers(args.num_workers)} loader workers"
          f"{', compiled' if args.compile else ''}; reference: batch {args.reference_batch_size}, 0 workers, "
          "float32", flush=True)
    with tempfile.TemporaryDirectory(prefix="spmlkit-bench-") as tmp:
        root = Path(tmp) / "images"
        names, labels = make_images(root, args.images, width, height, args.seed)
        plain = prepared_folder(root, Path(tmp) / "plain", names, labels)
        cached = prepared_folder(root, Path(tmp) / "cached", names, labels)
        write_image_cache(cached, args.image_size, num_workers=args.num_workers)
        rows = [
            ("data pipeline alone, JPEG files", lambda: data_pipeline(args, plain)),
            ("data pipeline alone, pre-resized cache", lambda: data_pipeline(args, cached)),
            ("spmlkit training, JPEG files", lambda: spmlkit_training(args, plain)),
            ("spmlkit training, pre-resized cache", lambda: spmlkit_training(args, cached)),
            ("reference-style loop", lambda: reference_loop(args, root, names, labels)),
        ]
        results = []
        for name, measure in rows:
            values = [measure() for _ in range(args.repeats)]
            results.append((name, statistics.median(values)))
            print(f"  measured {name}: {', '.join(f'{v:.0f}' for v in values)} images/s", file=sys.stderr,
                  flush=True)
    reference = results[-1][1]
    print(f"\n| {'setting':<40} | images/s | vs reference |")
    print(f"|{'-' * 42}|---------:|-------------:|")
    for name, value in results:
        print(f"| {name:<40} | {value:8.0f} | {value / reference:11.1f}x |")


if __name__ == "__main__":
    main()
