"""Training JPEGs decoded on the GPU (``spmlkit train --decode gpu``; CUDA only).

Why: PIL decodes a full-size COCO JPEG in several milliseconds, so a GPU that trains 2,000
images per second would need a dozen CPU cores for decoding alone. Here the loader workers only
read each file's bytes (and glance at its header); the run's device decodes a whole batch with
nvJPEG (:func:`torchvision.io.decode_jpeg` on a list, ``device="cuda"``: the batched decoder,
which uses the hardware JPEG engine of A100/H100-class GPUs) and resizes it there. The result
is the same uint8 ``[B, S, S, 3]`` pixel batch the CPU path hands over, so flips and
normalisation are shared (:mod:`spmlkit.data.images`).

What nvJPEG does not take is decoded by PIL in the worker, exactly as the CPU path does it:
files that are not JPEGs (PNG, ...) and JPEGs whose colour model nvJPEG's RGB output does not
cover (CMYK / YCCK, which PIL converts with its own colour rules), and JPEG files that do not end
with their end-of-image marker (:func:`ends_whole`: nvJPEG decodes a file cut short without a
word). A batch nvJPEG refuses as a
whole is decoded image by image; an image it still refuses is decoded by PIL, which also names
a broken file.

**Draining the stream before each decode.** nvJPEG's hardware engine writes its output buffers
without waiting for the work already queued on the stream it is handed, and the buffers come
from PyTorch's caching allocator, which recycles a block as soon as it is freed on its stream:
the decoder can overwrite memory that queued kernels have yet to read (pytorch/vision pull
request 9606, meta-pytorch/torchcodec pull request 1634). That is how ``--decode gpu`` trained
to NaN on the first H100. :meth:`GpuDecoder.decode` therefore waits for its stream to finish
before every decode. The stream is the loader's side stream
(:func:`spmlkit.training.prefetch.to_device_ahead`), which holds only earlier uploads and
decodes, so the wait costs no training time: the model's kernels run on the main stream.

The arithmetic is not the CPU path's: nvJPEG's inverse DCT and chroma upsampling differ from
libjpeg's by a grey level here and there, and the resize is torch's antialiased bilinear
interpolation in float32 (rounded to whole grey levels, as PIL's) rather than PIL's
fixed-point one. A ``--decode gpu`` run is therefore close to, not bit-identical with, a
``--decode cpu`` run (docs/protocol.md, "Decoding on the GPU", has the measured difference).
Only the training batches are decoded here; validation, training-set predictions and test
images keep the CPU path (and the pre-resized cache, when there is one), so model selection and
test metrics see the same inputs as every other run.

torchvision 0.29 marks its image decoders deprecated in favour of TorchCodec (a
``DeprecationWarning``, hidden outside tests); they still work, and moving to TorchCodec's GPU
decoder would change only :meth:`GpuDecoder.decode`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..transfer import to_device
from .image_decode import MAX_PIXELS, decode_image, header_of
from .images import ImageTransform, UnreadableImageError

__all__ = ["Encoded", "EncodedImages", "GpuDecoder", "ends_whole", "nvjpeg_takes"]

#: one loaded image: (uint8 bytes of a JPEG file, True) or (uint8 [S, S, 3] pixels PIL made, False)
Encoded = tuple[Tensor, bool]


def nvjpeg_takes(header: object) -> bool:
    """Whether nvJPEG decodes an image to the RGB PIL would give, from its PIL header (opened,
    not decoded): a baseline or progressive JPEG in YCbCr or grey. CMYK and YCCK JPEGs carry
    colour conversions nvJPEG's RGB output does not apply."""
    return getattr(header, "format", None) == "JPEG" and getattr(header, "mode", None) in ("RGB", "L")


def ends_whole(data: bytes) -> bool:
    """Whether a JPEG file's bytes end with its end-of-image marker (``FF D9``; zero bytes after
    it are padding some writers leave).

    Why: nvJPEG decodes a file cut short without an error and hands back an image whose missing
    rows are whatever it filled in (seen on the first H200 run of ``benchmarks/gpu_check.sh``),
    where PIL refuses it ("image file is truncated") and the CPU path names the file. A file
    without the marker at its end -- cut short, or with bytes appended after the image -- is
    therefore decoded by PIL in the worker: a broken one is named as on the CPU, a whole one with
    a trailer decodes exactly as there.
    """
    return data.rstrip(b"\0").endswith(b"\xff\xd9")


class EncodedImages:
    """A file list read for the GPU decoder: :meth:`encoded` gives a batch of rows (in a loader worker)."""

    def __init__(self, paths: Sequence[str | Path], transform: ImageTransform) -> None:
        if transform.grey:
            raise ValueError("--decode gpu decodes RGB photographs; this dataset's images are grey")
        self.paths, self.transform = [Path(p) for p in paths], transform

    def __len__(self) -> int:
        return len(self.paths)

    def encoded(self, rows: Sequence[int]) -> list[Encoded]:
        """What the decoder takes for ``rows``: each file's bytes, or pixels where nvJPEG would not do."""
        return [self._one(self.paths[int(i)]) for i in rows]

    def _one(self, path: Path) -> Encoded:
        try:
            data = path.read_bytes()
            with header_of(io.BytesIO(data)) as img:  # reads the header only
                if (nvjpeg_takes(img) and img.size[0] * img.size[1] <= MAX_PIXELS  # larger: decoded reduced by PIL
                        and ends_whole(data)):
                    return torch.frombuffer(bytearray(data), dtype=torch.uint8), True
            image = decode_image(path, "RGB")  # PIL's way: every mode by its range, memory bounded
        except Exception as exc:  # PIL raises many types for broken files, OSError for missing ones
            raise UnreadableImageError.of(path, exc) from exc
        return torch.from_numpy(self.transform.resize(image)), False


class GpuDecoder:
    """A loaded batch (:meth:`EncodedImages.encoded`) -> uint8 ``[B, S, S, 3]`` pixels on ``device``.

    Runs on the CPU too (torchvision decodes there with libjpeg-turbo), which is how its
    resize is tested on machines without a GPU.
    """

    def __init__(self, transform: ImageTransform, device: torch.device) -> None:
        self.transform, self.device = transform, torch.device(device)

    def __call__(self, items: list[Encoded], paths: Sequence[Path]) -> Tensor:
        size = self.transform.size
        out = torch.empty((len(items), size, size, 3), dtype=torch.uint8, device=self.device)
        jpegs = [k for k, (_, is_jpeg) in enumerate(items) if is_jpeg]
        for k, (pixels, is_jpeg) in enumerate(items):
            if not is_jpeg:
                out[k].copy_(pixels, non_blocking=True)
        if jpegs:
            decoded = self.decode([items[k][0] for k in jpegs], [paths[k] for k in jpegs])
            self._resize_into(out, jpegs, decoded)
        return out

    def decode(self, data: list[Tensor], paths: Sequence[Path]) -> list[Tensor]:
        """uint8 ``[3, H, W]`` images on the device: one batched nvJPEG call, image by image if
        nvJPEG refuses the batch, PIL for an image it still refuses."""
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            self._drain()
            return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
        except RuntimeError:
            pass
        images = []
        for one, path in zip(data, paths):
            try:
                self._drain()
                images.append(decode_jpeg(one, mode=ImageReadMode.RGB, device=self.device))
            except RuntimeError:
                images.append(self._pil(one, path))
        return images

    def _drain(self) -> None:
        """Wait for the current stream: nvJPEG must not be handed memory its queued work still uses."""
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    def _pil(self, data: Tensor, path: Path) -> Tensor:
        """uint8 ``[3, H, W]`` of an image nvJPEG refused, decoded by PIL (or its one-line error)."""
        try:
            rgb = np.array(decode_image(io.BytesIO(data.numpy().tobytes()), "RGB"))
        except Exception as exc:  # PIL raises many types for broken files
            raise UnreadableImageError.of(path, exc) from exc
        return torch.from_numpy(rgb).permute(2, 0, 1).to(self.device)

    def _resize_into(self, out: Tensor, rows: list[int], images: list[Tensor]) -> None:
        """Resize ``images`` to the run's size into rows ``rows`` of ``out``: one interpolation per
        distinct source size (photographs of a dataset come in few sizes), antialiased bilinear
        in float32, rounded to whole grey levels as PIL's uint8 output is."""
        import torch.nn.functional as F

        size = self.transform.size
        by_shape: dict[tuple[int, int], list[int]] = {}
        for k, image in enumerate(images):
            by_shape.setdefault(tuple(image.shape[1:]), []).append(k)
        for shape, members in by_shape.items():
            batch = torch.stack([images[k] for k in members])
            if shape != (size, size):  # PIL returns an image of the target size unchanged
                resized = F.interpolate(batch.float(), size=(size, size), mode="bilinear", align_corners=False,
                                        antialias=True)
                batch = resized.round_().clamp_(0, 255).to(torch.uint8)
            out[to_device(torch.tensor([rows[k] for k in members]), out.device)] = batch.permute(0, 2, 3, 1)
