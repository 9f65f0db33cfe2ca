"""The strong view of LAC/PLC: flip, cutout, two RandAugment operations, colour jitter, grey.

The LAC code (docs/methods.md, "plc") trains on two views of every image: the weak one is the
base protocol's (resize, flip) and the strong one adds, in this order, on the resized image:

1. a horizontal flip of its own (probability 1/2);
2. a cutout: a square of half the image's side, centred at a uniform position and clipped to the
   image, filled with one uniform random colour;
3. RandAugment as the ``randaugment`` package defines it: one of 15 operations with a magnitude
   level 1..9, twice (the pair uniform over all 135 x 135), each applied with probability 1/2;
   signed operations take a uniform sign (table :data:`OPERATIONS`);
4. with probability 0.8, colour jitter: brightness, contrast and saturation factors uniform in
   [0.6, 1.4] and a hue shift uniform in [-0.1, 0.1], applied in a uniformly random order;
5. with probability 0.2, grey (ITU-R 601 luma, repeated over the three channels).

spmlkit draws every random choice of a row up front (:func:`draw_strong`, from the run's own
generator, in the main process, as it draws flips and crops), so the augmentation does not depend
on the loader workers; :func:`strong_view` then applies one row's :class:`StrongDraw` to its
pixels with PIL, in a worker. Every operation is the PIL (or torchvision-on-PIL) call the code's
transforms make, with the same arguments, so a draw reproduces the code's image to the bit
(tools/lac_one_step.py). One difference is deliberate: spmlkit's pixels arrive resized, so the
flip comes after the resize rather than before (the weak view's flip does the same; the two
orders differ by the rounding of an asymmetric resize only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

__all__ = ["OPERATIONS", "LEVELS", "StrongDraw", "draw_strong", "grey_images_refusal", "strong_view", "two_views"]

#: magnitude levels of RandAugment's operations (level 0 is never drawn)
LEVELS = 10
_GREY = (128, 128, 128)


def _levels(low: float, high: float) -> np.ndarray:
    return np.linspace(low, high, LEVELS)


def _affine(coeffs: Callable, resample: int | None = None) -> Callable:
    def op(image, magnitude, sign):
        from PIL import Image

        extra = {} if resample is None else {"resample": resample}
        return image.transform(image.size, Image.AFFINE, coeffs(image, magnitude * sign), fillcolor=_GREY, **extra)
    return op


def _enhance(kind: str) -> Callable:
    def op(image, magnitude, sign):
        from PIL import ImageEnhance

        return getattr(ImageEnhance, kind)(image).enhance(1 + magnitude * sign)
    return op


def _rotate(image, magnitude, sign):
    """Counter-clockwise by ``magnitude`` degrees (the package never turns the other way), the
    corners grey."""
    from PIL import Image

    turned = image.convert("RGBA").rotate(magnitude)
    return Image.composite(turned, Image.new("RGBA", turned.size, (128,) * 4), turned).convert(image.mode)


def _ops_module():
    from PIL import ImageOps

    return ImageOps


def _bicubic() -> int:
    from PIL import Image

    return Image.BICUBIC


#: RandAugment's operations, in the package's order: name -> (levels, takes a sign, function of
#: (PIL image, magnitude, sign) -> PIL image). The cutout's centre is part of the draw.
OPERATIONS: dict[str, tuple[np.ndarray, bool, Callable]] = {
    "Invert": (np.zeros(LEVELS), False, lambda im, m, s: _ops_module().invert(im)),
    "Cutout": (np.round(_levels(0, 20)).astype(int), False, None),  # applied by _cutout_square
    "Sharpness": (_levels(0.0, 0.9), True, _enhance("Sharpness")),
    "AutoContrast": (np.zeros(LEVELS), False, lambda im, m, s: _ops_module().autocontrast(im)),
    "Posterize": (np.round(_levels(8, 4)).astype(int), False, lambda im, m, s: _ops_module().posterize(im, int(m))),
    "ShearX": (_levels(0, 0.3), True, _affine(lambda im, v: (1, v, 0, 0, 1, 0), resample=3)),
    "TranslateX": (_levels(0, 150 / 331), True, _affine(lambda im, v: (1, 0, v * im.size[0], 0, 1, 0))),
    "TranslateY": (_levels(0, 150 / 331), True, _affine(lambda im, v: (1, 0, 0, 0, 1, v * im.size[1]))),
    "ShearY": (_levels(0, 0.3), True, _affine(lambda im, v: (1, 0, 0, v, 1, 0), resample=3)),
    "Rotate": (_levels(0, 30), False, _rotate),
    "Equalize": (np.zeros(LEVELS), False, lambda im, m, s: _ops_module().equalize(im)),
    "Contrast": (_levels(0.0, 0.9), True, _enhance("Contrast")),
    "Color": (_levels(0.0, 0.9), True, _enhance("Color")),
    "Solarize": (_levels(256, 0), False, lambda im, m, s: _ops_module().solarize(im, m)),
    "Brightness": (_levels(0.0, 0.9), True, _enhance("Brightness")),
}
_NAMES = tuple(OPERATIONS)


@dataclass(frozen=True)
class StrongDraw:
    """Every random choice of one row's strong view.

    ``cutout``: the big square's centre (row, column) and fill colour (r, g, b). ``ops``: the two
    RandAugment steps as (operation index into :data:`OPERATIONS`, level 1..9, applied, sign ±1,
    small-cutout centre (column, row)). ``jitter``: None when colour jitter is skipped, else
    (order of brightness/contrast/saturation/hue as a permutation of 0..3, the four factors).
    """

    flip: bool
    cutout: tuple[int, int, int, int, int]
    ops: tuple[tuple[int, int, bool, int, int, int], ...]
    jitter: tuple[tuple[int, int, int, int], tuple[float, float, float, float]] | None
    grey: bool


def draw_strong(n: int, size: int, generator: torch.Generator) -> list[StrongDraw]:
    """The strong views of ``n`` rows of ``size x size`` pixels, drawn from ``generator``."""
    g = generator

    def ints(high: int, *shape: int) -> list:
        return torch.randint(high, (n, *shape), generator=g).tolist()

    flips = (torch.rand(n, generator=g) < 0.5).tolist()
    centres, fills = ints(size, 2), ints(256, 3)
    kinds, levels = ints(len(_NAMES), 2), (torch.randint(1, LEVELS, (n, 2), generator=g)).tolist()
    applied = (torch.rand(n, 2, generator=g) < 0.5).tolist()
    signs = (torch.randint(2, (n, 2), generator=g) * 2 - 1).tolist()
    small = ints(size, 2, 2)
    jitter = (torch.rand(n, generator=g) <= 0.8).tolist()
    orders = [torch.randperm(4, generator=g).tolist() for _ in range(n)]
    factors = torch.rand(n, 4, generator=g, dtype=torch.float64)
    factors = torch.cat([0.6 + 0.8 * factors[:, :3], -0.1 + 0.2 * factors[:, 3:]], dim=1).tolist()
    grey = (torch.rand(n, generator=g) < 0.2).tolist()
    return [StrongDraw(flips[i], (*centres[i], *fills[i]),
                       tuple((kinds[i][k], levels[i][k], applied[i][k], signs[i][k], *small[i][k]) for k in range(2)),
                       (tuple(orders[i]), tuple(factors[i])) if jitter[i] else None, grey[i])
            for i in range(n)]


def _cutout_square(pixels: np.ndarray, row: int, col: int, half: int, colour: tuple, *, inclusive: bool) -> None:
    """Fill the square of half-side ``half`` around (row, col), clipped to the image, in place;
    ``inclusive``: the far edge is filled too (PIL's rectangle), else not (the package's loop)."""
    end = 1 if inclusive else 0
    r0, c0 = max(0, row - half), max(0, col - half)
    pixels[r0 : min(pixels.shape[0], row + half) + end, c0 : min(pixels.shape[1], col + half) + end] = colour


def strong_view(pixels: np.ndarray, draw: StrongDraw) -> np.ndarray:
    """The strong view (uint8 ``[S, S, 3]``) of one row's resized pixels, by its draw."""
    from PIL import Image
    from torchvision.transforms import functional as TF

    out = np.ascontiguousarray(pixels[:, ::-1] if draw.flip else pixels).copy()
    row, col, *fill = draw.cutout
    side = out.shape[1]
    _cutout_square(out, row, col, int(0.5 * side + 0.5) // 2, tuple(fill), inclusive=True)
    image = Image.fromarray(out)
    for kind, level, applied, sign, small_col, small_row in draw.ops:
        if not applied:
            continue
        name = _NAMES[kind]
        levels, _, op = OPERATIONS[name]
        magnitude = levels[level]
        if name == "Cutout":
            arr = np.array(image)
            _cutout_square(arr, small_row, small_col, int(magnitude) // 2, (125, 122, 113), inclusive=False)
            image = Image.fromarray(arr)
        else:
            image = op(image, magnitude, sign)
    if draw.jitter is not None:
        order, (b, c, s, h) = draw.jitter
        steps = (lambda im: TF.adjust_brightness(im, b), lambda im: TF.adjust_contrast(im, c),
                 lambda im: TF.adjust_saturation(im, s), lambda im: TF.adjust_hue(im, h))
        for k in order:
            image = steps[k](image)
    if draw.grey:
        image = TF.rgb_to_grayscale(image, num_output_channels=3)
    return np.asarray(image, dtype=np.uint8)


def grey_images_refusal(method: str, dataset: str) -> str:
    """The line that refuses a two-view method on grey images, said when the run is planned.

    The strong view's operations are colour operations of RGB photographs (colour jitter's
    saturation and hue, RandAugment's colour and solarise, the greyscale step); the code never
    ran on grey images, and a grey image has none of what they change. Said before the run
    starts: met in a loader worker, it was a 55-line traceback after the model was built."""
    return (f"method {method!r} trains on a strong view of each image made with colour operations (colour jitter, "
            f"RandAugment, greyscale) of RGB photographs, and {dataset}'s images are grey; choose a method that "
            "trains on one view (`spmlkit methods`), or a data set of colour images")


def two_views(pixels: torch.Tensor, draws: list[StrongDraw]) -> torch.Tensor:
    """uint8 ``[2b, S, S, 3]``: the ``b`` rows of ``pixels`` (the weak view, flipped later on the
    device), then each row's strong view; in shared memory in a loader worker."""
    from .images import new_pixel_batch

    b, size, _, channels = pixels.shape
    if channels != 3:
        raise ValueError("the strong view of LAC/PLC augments RGB photographs; this dataset's images are grey")
    out = new_pixel_batch(2 * b, size, channels)
    out[:b] = pixels
    target = out.numpy()
    source = pixels.numpy()
    for i, draw in enumerate(draws):
        target[b + i] = strong_view(source[i], draw)
    return out
