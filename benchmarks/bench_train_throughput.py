"""Benchmark: is the input pipeline faster than the model? Throughput side by side, one run.

Every row uses the same model and the same generated images, and is printed as images per
second with the peak memory it reached:

* **data pipeline alone** (``ImageSource.pixel_batches``): one epoch of the training loader --
  the seeded (index, flip) batches, loader workers reading whole batches, pinned memory and the
  copy to the device one step ahead -- ending with uint8 batches on the device. From the JPEG
  files (PIL in the workers), from a pre-resized cache (``spmlkit prepare --cache-size``; one
  gather per batch) and, on CUDA, from the JPEG files decoded by nvJPEG (``--decode gpu``);
* **model bound**: :func:`spmlkit.training.train` with its input pipeline replaced by one
  batch already on the device -- the training step alone (flip, normalisation, forward, loss,
  backward, Adam; channels-last and bf16 autocast on a GPU), eager and, with ``--compile``,
  compiled. No input pipeline can make training faster than this;
* **spmlkit training**: ``train()`` itself (method AN) from each source, ``images_per_second``
  of its second epoch (the first starts the workers, and compiles);
* **reference-style loop**: what the papers' code does: PIL decode, resize and flip in
  ``__getitem__`` every epoch, ``num_workers=0``, batch 8, float32, no channels-last, and
  ``loss.item()`` after every step.

The table gives each row against the reference loop and each training row against the model
bound of the same compilation (the issue's targets: the cache pipeline >= 5,000 images/s and
nvJPEG >= 2,000 on one H100; training within 10% of the bound; >= 20x the reference). Images are
generated into a temporary folder: smooth colour fields with texture, saved as JPEG (quality 90)
at ``--source-size``, with random multi-labels over 20 classes. On a CPU the defaults take a
minute::

    python benchmarks/bench_train_throughput.py

and on a GPU (ResNet-50 at 448 x 448 from COCO-sized JPEGs; ``benchmarks/gpu_check.sh`` runs it)::

    python benchmarks/bench_train_throughput.py --device cuda --backbone torchvision:resnet50 \\
        --image-size 448 --source-size 640x480 --images 2048 --batch-size 64 --compile --json OUT.json

``--rows pipeline`` (or ``model``, ``training``, ``reference``, comma-separated) runs a subset:
``--rows pipeline --image-size 448 --source-size 640x480`` is the 2-core check of the cache
pipeline. The model is randomly initialised (``pretrained: false``): throughput does not depend
on the weights, and the benchmark runs offline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from spmlkit.cpus import usable_cpus
from spmlkit.data.formats.image_cache import write_image_cache
from spmlkit.data.formats.prepared import write_prepared
from spmlkit.data.images import IMAGENET_MEAN, IMAGENET_STD, loader_workers
from spmlkit.models import build_model
from spmlkit.training import train
from spmlkit.training.config import RunConfig
from spmlkit.training.device import peak_memory, reset_peak_memory
from spmlkit.training.run_data import load_image_data
from spmlkit.training.sources import ImageSource

CLASSES = 20
TEST_IMAGES = 32  # the run's final evaluation needs a test list; it is not timed
ROW_KINDS = ("pipeline", "model", "training", "reference")


@dataclass
class Row:
    name: str
    kind: str  # one of ROW_KINDS
    images_per_second: float
    peak_memory_bytes: int | None  # GPU memory on CUDA (this row's peak); None on the CPU
    compiled: bool = False
    values: tuple[float, ...] = ()


def _make_image(folder: Path, i: int, width: int, height: int, seed: int) -> tuple[str, np.ndarray]:
    """Image ``i``: its own random stream (so images can be made in any order, in parallel)."""
    from PIL import Image

    rng = np.random.default_rng([seed, i])
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-25, 26, (height, width, 3))
    name = f"{i:06d}.jpg"
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / name, quality=90)
    labels = np.zeros(CLASSES, dtype=np.uint8)
    labels[rng.choice(CLASSES, size=rng.integers(1, 4), replace=False)] = 1
    return name, labels


def make_images(folder: Path, count: int, width: int, height: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``count`` JPEGs of ``width x height`` under ``folder`` and their 0/1 labels (1-3 positives
    each), made on every CPU (a few thousand COCO-sized JPEGs take half a minute on one)."""
    from concurrent.futures import ProcessPoolExecutor

    folder.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=usable_cpus()) as pool:
        made = list(pool.map(_make_image, [folder] * count, range(count), [width] * count, [height] * count,
                             [seed] * count, chunksize=32))
    return [name for name, _ in made], np.stack([labels for _, labels in made])


def prepared_folder(root: Path, out: Path, names: list[str], labels: np.ndarray) -> Path:
    """A prepared folder over the generated images (the last ``TEST_IMAGES`` are the test list)."""
    train_n = len(names) - TEST_IMAGES
    write_prepared(out, dataset="bench", class_names=[f"c{k}" for k in range(CLASSES)],
                   train_images=names[:train_n], train_labels=labels[:train_n], test_images=names[train_n:],
                   test_labels=labels[train_n:], root=root)
    return out


def config_for(args: argparse.Namespace, prepared: Path, *, decode: str = "cpu", compile: bool = False) -> RunConfig:
    return RunConfig(dataset="prepared", prepared=str(prepared), backbone=args.backbone, pretrained=False,
                     image_size=args.image_size, batch_size=args.batch_size, epochs=2, val_frac=0.05, lr=1e-4,
                     method="an", device=args.device, num_workers=args.num_workers, compile=compile, decode=decode,
                     hflip=True, num_threads=args.threads)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _peak(device: torch.device) -> Iterator[list[int | None]]:
    """The peak GPU memory of the block (a one-item list filled at its end; None off CUDA)."""
    box: list[int | None] = [None]
    _sync(device)
    reset_peak_memory(device)
    yield box
    _sync(device)
    box[0] = peak_memory(device)[1]


def data_pipeline(args: argparse.Namespace, prepared: Path, decode: str) -> float:
    """Images per second of one epoch of the training loader alone (after a warm-up epoch)."""
    config = config_for(args, prepared, decode=decode)
    data = load_image_data(config)
    device = torch.device(args.device)
    rows = np.arange(len(data.Y_train))
    source = ImageSource(data.train_dataset(), data.test_dataset(), rows, rows[:0], batch_size=args.batch_size,
                         eval_batch_size=None, hflip=True, num_workers=args.num_workers, device=device,
                         channels_last=True, num_classes=CLASSES, decode=decode)
    generator = torch.Generator().manual_seed(0)
    for _ in source.pixel_batches([generator]):  # starts the workers
        pass
    _sync(device)
    start, seen = time.perf_counter(), 0
    for _, _, batch in source.pixel_batches([generator]):
        seen += len(batch)
    _sync(device)
    return seen / (time.perf_counter() - start)


def spmlkit_training(args: argparse.Namespace, prepared: Path, decode: str, compile: bool) -> float:
    """``images_per_second`` of train()'s second epoch: the real training step."""
    result = train(config_for(args, prepared, decode=decode, compile=compile))
    return float(result.history[-1]["images_per_second"])


@contextlib.contextmanager
def batches_already_on_the_device() -> Iterator[None]:
    """While active, an :class:`ImageSource` hands out one random uint8 batch that already sits on
    its device (the epoch's batch order and the row count are kept): what the training step does
    when its input costs nothing."""
    original = ImageSource.pixel_batches

    def synthetic(self: ImageSource, generators: list[torch.Generator]):
        perm = torch.randperm(self.n, generator=generators[0]).tolist()
        if not hasattr(self, "_synthetic"):
            size, channels = self.transform.size, self.transform.pixel_channels
            draw = torch.Generator().manual_seed(0)
            pixels = torch.randint(0, 256, (self.batch_size, size, size, channels), dtype=torch.uint8, generator=draw)
            flips = torch.rand(self.batch_size, generator=draw) < 0.5
            self._synthetic = (pixels.to(self.device), flips.to(self.device))
        pixels, flips = self._synthetic
        for start in range(0, self.n, self.batch_size):
            batch = perm[start : start + self.batch_size]
            yield pixels[: len(batch)], flips[: len(batch)], batch

    ImageSource.pixel_batches = synthetic  # type: ignore[method-assign]
    try:
        yield
    finally:
        ImageSource.pixel_batches = original  # type: ignore[method-assign]


def model_bound(args: argparse.Namespace, prepared: Path, compile: bool) -> float:
    with batches_already_on_the_device():
        return spmlkit_training(args, prepared, "cpu", compile)


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
    for k, (x, y) in enumerate(loader):
        if k == args.reference_steps:  # its rate is what counts; a whole epoch at 45 images/s takes long
            break
        running += step(x, y)
        seen += len(x)
    _sync(device)
    return seen / (time.perf_counter() - start)


def _measure(name: str, kind: str, measure: Callable[[], float], repeats: int, device: torch.device,
             compiled: bool = False) -> Row:
    values, peaks = [], []
    for _ in range(repeats):
        with _peak(device) as peak:
            values.append(measure())
        peaks.append(peak[0])
    print(f"  measured {name}: {', '.join(f'{v:.0f}' for v in values)} images/s", file=sys.stderr, flush=True)
    known = [p for p in peaks if p is not None]
    return Row(name, kind, statistics.median(values), max(known) if known else None, compiled, tuple(values))


def _gb(value: int | None) -> str:
    return "" if value is None else f"{value / 2**30:.1f} GiB"


def table(rows: list[Row]) -> str:
    """The Markdown table: images/s, against the reference loop, against the model bound."""
    reference = next((r.images_per_second for r in rows if r.kind == "reference"), None)
    bounds = {r.compiled: r.images_per_second for r in rows if r.kind == "model"}
    lines = ["| setting | images/s | vs reference | vs model bound | peak GPU memory |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        vs_ref = f"{r.images_per_second / reference:.1f}x" if reference else ""
        bound = bounds.get(r.compiled)
        vs_bound = f"{r.images_per_second / bound:.0%}" if bound and r.kind in ("training", "pipeline") else ""
        lines.append(f"| {r.name} | {r.images_per_second:.0f} | {vs_ref} | {vs_bound} | {_gb(r.peak_memory_bytes)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--backbone", default="small:cnn")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--source-size", default="64x64", help="WxH of the generated JPEGs")
    parser.add_argument("--images", type=int, default=320, help="generated images (the last 32 are the test list)")
    parser.add_argument("--batch-size", type=int, default=32, help="spmlkit's batch")
    parser.add_argument("--reference-batch-size", type=int, default=8, help="the papers' batch")
    parser.add_argument("--reference-steps", type=int, default=64, help="steps the papers' loop is timed over")
    parser.add_argument("--num-workers", type=int, default=None, help="spmlkit's loader workers (default: automatic)")
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile'd training")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads of the training process, both sides (default: torch's own choice); "
                             "on a shared or small machine 1 avoids threads spinning against each other")
    parser.add_argument("--repeats", type=int, default=1, help="measure each row N times, report the median")
    parser.add_argument("--rows", default=",".join(ROW_KINDS), help=f"which rows: a comma-separated subset of "
                                                                    f"{', '.join(ROW_KINDS)}")
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.source_size.lower().split("x"))
    kinds = set(args.rows.split(","))
    if not kinds <= set(ROW_KINDS):
        parser.error(f"--rows takes a comma-separated subset of {', '.join(ROW_KINDS)}, got {args.rows!r}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # the reference loop's; spmlkit's runs set theirs (num_threads)
    if args.images <= TEST_IMAGES + args.batch_size:
        parser.error(f"--images must exceed {TEST_IMAGES + args.batch_size} (the test list plus one batch)")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    cpus = usable_cpus()
    device_name = torch.cuda.get_device_name(device) if cuda else "CPU"
    header = (f"{device_name}, {cpus} CPUs ({torch.get_num_threads()} torch threads), torch {torch.__version__}; "
              f"{args.backbone} at {args.image_size} x {args.image_size} from {width} x {height} JPEGs, "
              f"{args.images - TEST_IMAGES} training images; spmlkit: batch {args.batch_size}, "
              f"{loader_workers(args.num_workers)} loader workers; reference: batch {args.reference_batch_size}, "
              "0 workers, float32")
    print(header, flush=True)
    compiles = (False, True) if args.compile else (False,)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="spmlkit-bench-") as tmp:
        root = Path(tmp) / "images"
        names, labels = make_images(root, args.images, width, height, args.seed)
        plain = prepared_folder(root, Path(tmp) / "plain", names, labels)
        cached = prepared_folder(root, Path(tmp) / "cached", names, labels)
        write_image_cache(cached, args.image_size, num_workers=args.num_workers)
        sources = [("JPEG files, PIL", plain, "cpu"), ("pre-resized cache", cached, "cpu")]
        if cuda:
            sources.append(("JPEG files, nvJPEG", plain, "gpu"))
        plan: list[tuple[str, str, Callable[[], float], bool]] = []
        for label, folder, decode in sources:
            plan.append((f"data pipeline alone, {label}", "pipeline",
                         lambda f=folder, d=decode: data_pipeline(args, f, d), False))
        for compiled in compiles:
            suffix = ", compiled" if compiled else ""
            plan.append((f"model bound (batches on the device){suffix}", "model",
                         lambda c=compiled: model_bound(args, cached, c), compiled))
            for label, folder, decode in sources:
                if compiled and decode == "cpu" and folder is plain:
                    continue  # PIL-fed training is bound by the CPU, compiled or not
                plan.append((f"spmlkit training, {label}{suffix}", "training",
                             lambda f=folder, d=decode, c=compiled: spmlkit_training(args, f, d, c), compiled))
        plan.append(("reference-style loop", "reference", lambda: reference_loop(args, root, names, labels), False))
        for name, kind, measure, compiled in plan:
            if kind in kinds:
                rows.append(_measure(name, kind, measure, args.repeats, device, compiled))
    host_peak = peak_memory(device)[0]
    print()
    print(table(rows))
    if host_peak is not None:
        print(f"\npeak host memory of this process: {host_peak / 2**30:.1f} GiB")
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "device": device_name, "cpus": cpus,
                                               "torch": torch.__version__, "args": vars(args),
                                               "host_peak_memory_bytes": host_peak,
                                               "rows": [asdict(r) for r in rows], "table": table(rows)},
                                              indent=1))
    return rows


if __name__ == "__main__":
    main()
