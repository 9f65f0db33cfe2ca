"""An image file as 8-bit pixels: fully decoded, every colour mode by its real range, memory bounded.

Every reader of image files (training's host half, ``spmlkit predict``, the pre-resized cache,
``spmlkit prepare --check``) goes through :func:`decode_image`, so that a file the check passes is
a file training can read, and the pixels are the same wherever they are read
(docs/protocol.md, "Image files").

**Colour modes.** PIL's own ``convert("RGB")`` is right for 8-bit modes, but it clips wider ones:
a 16-bit greyscale PNG (mode ``I;16``, values 0..65535) came out nearly white, since every value
above 255 became 255. So each mode is brought to 8 bits by the range it is defined on:

* ``I;16``, ``I;16L``, ``I;16B``, ``I;16N`` (16-bit unsigned): 0..65535, divided by 257 and
  rounded (65535 -> 255, 32896 -> 128);
* ``I`` (32-bit signed): PIL opens 16-bit greyscale PNGs and TIFFs in this mode too, and no real
  photograph uses the 32-bit range, so it is read as 0..65535 like ``I;16`` (values outside are
  clipped). A 32-bit image whose values span more is not a photograph a backbone was trained on;
* ``F`` (32-bit float): 0..1, the range float images (scientific TIFFs, arrays saved by NumPy
  code) conventionally hold, times 255 and rounded; values outside are clipped, NaN is 0;
* modes with transparency (``RGBA``, ``LA``, ``PA``, premultiplied ``RGBa`` / ``La``, and ``P``
  or ``L`` / ``RGB`` with a transparent colour) are composited over white, which is what an
  image viewer shows; dropping the alpha channel would show whatever colour the transparent
  pixels happen to store (often black);
* ``LAB`` goes from CIE L*a*b* to sRGB through a colour-management transform (PIL's ``ImageCms``),
  so the result does not depend on what ``convert`` does in the installed Pillow (spmlkit
  accepts Pillow 9 and later); ``1``, ``L``, ``P``, ``CMYK``, ``YCbCr``, ``HSV`` and ``RGBX``
  use PIL's conversion, which is right for them.

**Size.** Decoding is where memory goes: a 12,000 x 12,000 PNG is 432 MB as RGB before any
resize, and PIL only warns (a raw ``DecompressionBombWarning``) below twice its limit.
:data:`MAX_PIXELS` bounds what is decoded: a larger JPEG is decoded at the smallest of JPEG's
own reduced scales (1/2, 1/4, 1/8) that fits the bound, which costs no full-size buffer at all;
any other larger image, and a JPEG still too large at 1/8, is refused with
:class:`ImageTooLargeError` naming its size and the bound. PIL's warning never reaches the user.
"""

from __future__ import annotations

import math
import threading
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["MAX_PIXELS", "ImageTooLargeError", "decode_image", "header_of", "to_8bit"]

MAX_PIXELS = 89_478_485
"""The most pixels spmlkit decodes from one image: PIL's default limit (about 9,459 x 9,459), so
the bound is one users of PIL already know. An RGB image of that size is 268 MB decoded."""

_HEADER_LOCK = threading.Lock()  # opening reads a header only; decoding runs outside the lock
_JPEG_SCALES = (2, 4, 8)
_BACKGROUND = 255  # transparent pixels are composited over white
_ALPHA_MODES = {"RGBA": "RGBA", "LA": "LA", "PA": "RGBA", "RGBa": "RGBA", "La": "LA"}
_SIXTEEN_BIT = {"I;16", "I;16L", "I;16B", "I;16N"}


class ImageTooLargeError(ValueError):
    """An image with more pixels than :data:`MAX_PIXELS` that cannot be decoded at a reduced scale."""

    def __init__(self, size: str) -> None:
        super().__init__(f"{size}, more than the {MAX_PIXELS:,} pixels spmlkit decodes; shrink the image below that "
                         "(e.g. to 4096 pixels on its longer side) or remove it")


def decode_image(path: str | Path, mode: str = "RGB") -> Any:
    """The image file ``path`` fully decoded as a PIL image of ``mode`` ("RGB" or "L"), 8 bits per channel.

    Raises whatever PIL raises for a broken file (a truncated JPEG fails here, since every pixel
    is decoded), and :class:`ImageTooLargeError` for an image over the bound (module docstring).
    """
    with header_of(path) as image:
        _bound(image)
        image.load()
        pixels = to_8bit(image, mode)
        return pixels.copy() if pixels is image else pixels  # closing the file closes the image it read


def header_of(path: str | Path | BinaryIO) -> Any:
    """The image ``path`` opened by PIL, its header read and nothing decoded (use it with ``with``).

    PIL's ``DecompressionBombWarning`` is kept from the user (spmlkit checks its own bound,
    :data:`MAX_PIXELS`, before decoding); an image PIL refuses outright (over twice its limit)
    raises :class:`ImageTooLargeError`.
    """
    from PIL import Image

    with _HEADER_LOCK, warnings.catch_warnings():  # the warning filters are global: one thread at a time
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except Image.DecompressionBombError:
            raise ImageTooLargeError(f"over {2 * Image.MAX_IMAGE_PIXELS:,} pixels") from None


def _bound(image: Any) -> None:
    """Reduce a too-large JPEG's decoding scale to fit :data:`MAX_PIXELS`, or refuse the image."""
    width, height = image.size
    if width * height <= MAX_PIXELS:
        return
    if image.format == "JPEG":
        for scale in _JPEG_SCALES:
            size = (math.ceil(width / scale), math.ceil(height / scale))
            if size[0] * size[1] <= MAX_PIXELS:
                image.draft(None, size)
                if image.size[0] * image.size[1] <= MAX_PIXELS:
                    return
        raise ImageTooLargeError(f"{width} x {height} = {width * height:,} pixels even at 1/8 of its size")
    raise ImageTooLargeError(f"{width} x {height} = {width * height:,} pixels")


def to_8bit(image: Any, mode: str = "RGB") -> Any:
    """A decoded PIL ``image`` of any mode as ``mode`` ("RGB" or "L"), by its mode's real range.

    See the module docstring for the range each mode is read by.
    """
    if mode not in ("RGB", "L"):
        raise ValueError(f"mode must be 'RGB' or 'L', got {mode!r}")
    if image.mode == mode and "transparency" not in image.info:
        return image
    from PIL import Image

    source = image.mode
    if source in _SIXTEEN_BIT or source == "I":
        return Image.fromarray(_by_rows(np.asarray(image), _sixteen_to_8), "L").convert(mode)
    if source == "F":
        return Image.fromarray(_by_rows(np.asarray(image), _unit_to_8), "L").convert(mode)
    if source == "LAB":  # explicitly CIE L*a*b* -> sRGB, not relying on what convert does in this Pillow
        from PIL import ImageCms

        to_srgb = ImageCms.buildTransform(ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB"), "LAB", "RGB")
        return ImageCms.applyTransform(image, to_srgb).convert(mode)
    if source in _ALPHA_MODES or "transparency" in image.info:
        with_alpha = _ALPHA_MODES.get(source) or ("LA" if source in ("L", "1") else "RGBA")
        return _over_white(image.convert(with_alpha)).convert(mode)
    return image.convert(mode)


def _over_white(image: Any) -> Any:
    """An ``LA`` or ``RGBA`` image composited over white, rounded to the nearest grey level:
    ``(c * a + 255 * (255 - a)) / 255``."""
    from PIL import Image

    blended = _by_rows(np.asarray(image), _blend_over_white)
    if blended.shape[-1] == 1:
        return Image.fromarray(blended[..., 0], "L")
    return Image.fromarray(blended, "RGB")


_ROWS = 256  # rows per block of integer arithmetic: memory stays near the image's own size


def _by_rows(pixels: np.ndarray, convert: Any) -> np.ndarray:
    """uint8 ``convert(block)`` of ``pixels``, a block of rows at a time, so the wide integer or
    float intermediates of a large image never exist for all of it at once."""
    first = convert(pixels[:1])
    out = np.empty((pixels.shape[0], *first.shape[1:]), dtype=np.uint8)
    for start in range(0, pixels.shape[0], _ROWS):
        out[start:start + _ROWS] = convert(pixels[start:start + _ROWS])
    return out


def _sixteen_to_8(block: np.ndarray) -> np.ndarray:
    """0..65535 (values outside clipped) -> 0..255: ``v / 257`` rounded half up."""
    values = np.clip(block.astype(np.int64), 0, 65535)
    return ((2 * values + 257) // 514).astype(np.uint8)


def _unit_to_8(block: np.ndarray) -> np.ndarray:
    """0..1 (outside clipped, NaN as 0) -> 0..255, rounded."""
    values = np.nan_to_num(block.astype(np.float64), nan=0.0)
    return np.rint(np.clip(values, 0.0, 1.0) * 255).astype(np.uint8)


def _blend_over_white(block: np.ndarray) -> np.ndarray:
    """Colour channels of a block with alpha last, composited over white."""
    pixels = block.astype(np.int64)
    colour, alpha = pixels[..., :-1], pixels[..., -1:]
    return ((2 * (colour * alpha + _BACKGROUND * (255 - alpha)) + 255) // 510).astype(np.uint8)
