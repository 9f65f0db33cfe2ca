"""Image files as the model reads them: every PIL mode by its real range, broken and huge files named in one line.

Each test synthesises its image in the mode under test and asserts exact 8-bit pixel values
(docs/protocol.md, "Image files"), so a conversion that clips, drops alpha or reinterprets
channels fails here.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spmlkit.data.formats.check import verify_images
from spmlkit.data.image_decode import MAX_PIXELS, ImageTooLargeError, decode_image
from spmlkit.data.images import ImageFileDataset, ImageTransform, UnreadableImageError


def _saved(image: Image.Image, path: Path, fmt: str = "PNG") -> Path:
    image.save(path, fmt)
    return path


def _pixels(path: Path, mode: str = "RGB") -> np.ndarray:
    return np.asarray(decode_image(path, mode))


def test_sixteen_bit_grey_png_is_scaled_by_257_not_clipped(tmp_path):
    values = np.array([[0, 128, 129, 32896, 65535]], dtype=np.uint16)
    path = _saved(Image.fromarray(values), tmp_path / "grey16.png")
    assert Image.open(path).mode == "I;16"
    rgb = _pixels(path)
    assert rgb.shape == (1, 5, 3) and rgb.dtype == np.uint8
    assert rgb[0, :, 0].tolist() == [0, 0, 1, 128, 255]   # v / 257 rounded: 128/257 = 0.498, 129/257 = 0.502
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
    assert _pixels(path, "L")[0].tolist() == [0, 0, 1, 128, 255]


def test_a_mid_grey_sixteen_bit_image_trains_as_mid_grey(tmp_path):
    """The reported case: a 16-bit image of mean 32768 (128 in 8 bits) read as white (254.9)."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 65536, size=(64, 64), dtype=np.uint16)
    values = (values.astype(np.int64) - int(values.mean()) + 32768).clip(0, 65535).astype(np.uint16)
    path = _saved(Image.fromarray(values), tmp_path / "scan.png")
    pixels = ImageTransform(64).read(path)
    assert abs(pixels.mean() - values.mean() / 257) < 0.6   # PIL's bilinear resize to the same size moves nothing


@pytest.mark.parametrize("mode, dtype", [("I;16B", ">u2"), ("I;16L", "<u2"), ("I;16N", "=u2")])
def test_sixteen_bit_byte_orders(mode, dtype):
    raw = np.array([0, 257 * 100, 65535], dtype=dtype).tobytes()
    image = Image.frombytes(mode, (3, 1), raw)
    assert np.asarray(decode_image_of(image, "L"))[0].tolist() == [0, 100, 255]


def test_thirty_two_bit_integer_is_read_as_sixteen_bit_range(tmp_path):
    values = np.array([[0, 257, 32896, 65535, 70000, -5]], dtype=np.int32)
    path = _saved(Image.fromarray(values, "I"), tmp_path / "int.tif", "TIFF")
    assert Image.open(path).mode == "I"
    assert _pixels(path, "L")[0].tolist() == [0, 1, 128, 255, 255, 0]   # clipped to 0..65535 first


def test_float_images_are_read_as_zero_to_one(tmp_path):
    values = np.array([[0.0, 0.25, 0.5, 1.0, 2.0, -1.0, np.nan]], dtype=np.float32)
    path = _saved(Image.fromarray(values, "F"), tmp_path / "float.tif", "TIFF")
    assert Image.open(path).mode == "F"
    assert _pixels(path)[0, :, 0].tolist() == [0, 64, 128, 255, 255, 0, 0]   # 63.75 -> 64, 127.5 -> 128


def test_transparent_pixels_are_composited_over_white(tmp_path):
    rgba = Image.new("RGBA", (3, 1))
    for x, value in enumerate([(255, 0, 0, 128), (10, 20, 30, 0), (10, 20, 30, 255)]):
        rgba.putpixel((x, 0), value)
    path = _saved(rgba, tmp_path / "rgba.png")
    # (c * a + 255 * (255 - a)) / 255: red at half opacity -> (255, 127, 127); fully transparent -> white
    assert _pixels(path)[0].tolist() == [[255, 127, 127], [255, 255, 255], [10, 20, 30]]
    la = Image.new("LA", (2, 1))
    la.putpixel((0, 0), (0, 128))
    la.putpixel((1, 0), (100, 255))
    assert _pixels(_saved(la, tmp_path / "la.png"))[0].tolist() == [[127] * 3, [100] * 3]
    premultiplied = rgba.convert("RGBa")
    assert np.asarray(decode_image_of(premultiplied))[0, 2].tolist() == [10, 20, 30]


def decode_image_of(image: Image.Image, mode: str = "RGB") -> Image.Image:
    """An in-memory image of a mode no file format here stores, through the same conversion."""
    from spmlkit.data.image_decode import to_8bit

    return to_8bit(image, mode)


def test_palette_with_a_transparent_index(tmp_path):
    palette = Image.new("P", (3, 1))
    palette.putpalette([0, 0, 0, 255, 0, 0, 0, 0, 255] + [0] * 759)
    for x in range(3):
        palette.putpixel((x, 0), x)
    palette.info["transparency"] = 0
    assert _pixels(_saved(palette, tmp_path / "p.png"))[0].tolist() == [[255, 255, 255], [255, 0, 0], [0, 0, 255]]
    opaque = palette.copy()
    opaque.info.pop("transparency")
    assert _pixels(_saved(opaque, tmp_path / "opaque.png"))[0].tolist() == [[0, 0, 0], [255, 0, 0], [0, 0, 255]]


def test_bilevel_cmyk_ycbcr_hsv_and_lab(tmp_path):
    one = Image.new("1", (2, 1))
    one.putpixel((1, 0), 1)
    assert _pixels(_saved(one, tmp_path / "one.png"))[0].tolist() == [[0, 0, 0], [255, 255, 255]]
    cmyk = Image.new("CMYK", (3, 1))
    for x, value in enumerate([(255, 0, 0, 0), (0, 0, 0, 255), (0, 0, 0, 0)]):
        cmyk.putpixel((x, 0), value)
    assert _pixels(_saved(cmyk, tmp_path / "cmyk.tif", "TIFF"))[0].tolist() == [[0, 255, 255], [0, 0, 0],
                                                                                 [255, 255, 255]]
    # YCbCr (a TIFF keeps the mode) by JPEG's full-range equations, R = Y + 1.402 (Cr - 128),
    # G = Y - 0.344 (Cb - 128) - 0.714 (Cr - 128), B = Y + 1.772 (Cb - 128): red and green, not the
    # channels copied as if they were R, G and B ((76, 85, 255) would be a blue)
    ycbcr = Image.new("YCbCr", (2, 1))
    ycbcr.putpixel((0, 0), (76, 85, 255))     # 254.05, 0.10, -0.20: red
    ycbcr.putpixel((1, 0), (150, 44, 21))     # 0.00, 255.3, 1.15: green
    path = _saved(ycbcr, tmp_path / "ycbcr.tif", "TIFF")
    assert Image.open(path).mode == "YCbCr"
    got = _pixels(path).astype(int)
    assert np.abs(got - [[[254, 0, 0], [0, 255, 1]]]).max() <= 1, got.tolist()  # 1: PIL's fixed-point rounding
    hsv = Image.new("HSV", (2, 1))
    hsv.putpixel((0, 0), (0, 255, 255))      # hue 0, full saturation and value: red
    hsv.putpixel((1, 0), (0, 0, 128))        # no saturation: grey 128
    assert np.asarray(decode_image_of(hsv))[0].tolist() == [[255, 0, 0], [128, 128, 128]]
    lab = Image.new("LAB", (2, 1))
    lab.putpixel((0, 0), (0, 128, 128))      # L* 0, a* = b* = 0 (stored with an offset of 128): black
    lab.putpixel((1, 0), (255, 128, 128))    # L* 100: white
    got = np.asarray(decode_image(_saved(lab, tmp_path / "lab.tif", "TIFF"))).astype(int)
    assert np.abs(got - [[[0, 0, 0], [255, 255, 255]]]).max() <= 2   # not the channels copied: (0, 128, 128)


def test_eight_bit_rgb_and_grey_are_unchanged(tmp_path):
    rgb = np.arange(24, dtype=np.uint8).reshape(2, 4, 3) * 10
    assert (_pixels(_saved(Image.fromarray(rgb), tmp_path / "rgb.png")) == rgb).all()
    grey = np.array([[0, 7, 128, 255]], dtype=np.uint8)
    assert _pixels(_saved(Image.fromarray(grey), tmp_path / "grey.png"), "L").tolist() == grey.tolist()
    assert _pixels(tmp_path / "grey.png")[0, :, 2].tolist() == [0, 7, 128, 255]


def _truncated_jpeg(path: Path) -> Path:
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(path, "JPEG", quality=95)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_a_truncated_jpeg_passes_verify_but_not_the_check(tmp_path):
    broken = _truncated_jpeg(tmp_path / "cut.jpg")
    with Image.open(broken) as image:
        image.verify()   # what --check used to do: the structure looks fine
    good = _saved(Image.new("RGB", (8, 8)), tmp_path / "good.png")
    bad = verify_images(tmp_path, [good.name, broken.name])
    assert [b.path for b in bad] == ["cut.jpg"]
    assert bad[0].reason.startswith("OSError: image file is truncated")


def _huge_png(path: Path, side: int) -> Path:
    """A PNG of side x side black pixels: a few hundred kB on disk, whatever its size decoded."""
    Image.new("L", (side, side)).save(path, "PNG")
    return path


def test_an_image_over_the_bound_is_refused_in_one_line_without_a_python_warning(tmp_path):
    side = 9500   # 90,250,000 pixels: just over MAX_PIXELS, under PIL's own refusal
    assert MAX_PIXELS < side * side < 2 * MAX_PIXELS
    path = _huge_png(tmp_path / "huge.png", side)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # any warning (PIL's DecompressionBombWarning) fails the test
        with pytest.raises(ImageTooLargeError) as info:
            decode_image(path)
        message = str(info.value)
        assert message.startswith("9500 x 9500 = 90,250,000 pixels, more than the 89,478,485 pixels spmlkit decodes")
        assert "shrink the image" in message
        with pytest.raises(UnreadableImageError, match=r"cannot read image .*huge\.png \(ImageTooLargeError: 9500 x"):
            ImageTransform(16).read(path)
        dataset = ImageFileDataset([path], ImageTransform(16), skip_bad=True)   # predict: skipped with its reason
        assert dataset[0] == (None, 0) and dataset.errors[0].startswith("ImageTooLargeError: 9500 x 9500")
        assert [b.reason[:30] for b in verify_images(tmp_path, ["huge.png"])] == ["ImageTooLargeError: 9500 x 950"]


def test_an_image_pil_refuses_outright_is_the_same_kind_of_error(tmp_path):
    path = _huge_png(tmp_path / "bomb.png", 13500)   # 182 M pixels: over twice PIL's limit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageTooLargeError, match=r"^over 178,956,970 pixels, more than the 89,478,485"):
            decode_image(path)


def test_a_jpeg_over_the_bound_is_decoded_at_a_reduced_scale(tmp_path):
    side = 9600
    path = tmp_path / "big.jpg"
    Image.new("RGB", (side, side), (200, 30, 60)).save(path, "JPEG", quality=90)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        image = decode_image(path)
    assert image.size == (side // 2, side // 2)   # JPEG's 1/2 scale: 23 M pixels instead of 92 M
    r, g, b = np.asarray(image).reshape(-1, 3).mean(axis=0)
    assert abs(r - 200) < 3 and abs(g - 30) < 3 and abs(b - 60) < 3


def test_prepare_check_finds_a_truncated_jpeg_and_training_then_names_it(tmp_path, capsys):
    """The reported case end to end: ``--check`` said "no problem found", training stopped in epoch 1."""
    from fixtures.image_formats import build_voc2012

    from spmlkit.cli import main

    classes = ["person", "dog", "cat", "car"]
    train_ids = {f"2008_{i:06d}": {classes[i % 4]: 1} for i in range(12)}
    voc = build_voc2012(tmp_path / "data", train_ids, {f"2009_{i:06d}": {classes[i % 4]: 1} for i in range(4)})
    broken = _truncated_jpeg(voc / "JPEGImages" / "2008_000003.jpg")
    assert main(["prepare", "voc2012", "--root", str(tmp_path / "data"), "--check"]) == 1   # 1: bad images found
    listed = (tmp_path / "data" / "spmlkit-prepared" / "voc2012" / "bad_images.txt").read_text()
    assert listed.startswith("VOCdevkit/VOC2012/JPEGImages/2008_000003.jpg\tOSError: image file is truncated")
    capsys.readouterr()
    assert main(["train", "--dataset", "voc2012", "--root", str(tmp_path / "data"), "--method", "an",
                 "--backbone", "small:cnn", "--no-pretrained", "--image-size", "16", "--epochs", "1",
                 "--batch-size", "4", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(broken) in err and "bad_images.txt" in err
    assert not (tmp_path / "run" / "last.pt").exists()


def test_the_check_decodes_in_threads_and_reports_in_list_order(tmp_path, monkeypatch):
    """Three threads decode at once: the first three decodes meet at a barrier, which only three
    threads reach together, and the first file is held until every other one is decoded, so the
    decodes finish out of list order. The report and the progress calls are in list order."""
    import threading

    from spmlkit.data import image_decode

    names = []
    for i in range(12):
        path = tmp_path / f"{i:02d}.png"
        if i % 5 == 2:
            path.write_bytes(b"not an image")
        else:
            Image.new("RGB", (40 + i, 30), (i, 2 * i, 3 * i)).save(path)
        names.append(path.name)
    decode, meet, last_done, finished = image_decode.decode_image, threading.Barrier(3), threading.Event(), []
    threads: set[int] = set()

    def watched(path, mode="RGB"):
        name = Path(path).name
        threads.add(threading.get_ident())
        if name in ("00.png", "01.png", "02.png"):
            meet.wait(timeout=20)  # fewer threads never meet here: BrokenBarrierError after 20 s
        if name == "00.png":
            last_done.wait(timeout=60)
        try:
            return decode(path, mode)
        finally:
            finished.append(name)
            if len(finished) == len(names) - 1 and "00.png" not in finished:  # every other file done
                last_done.set()

    monkeypatch.setattr(image_decode, "decode_image", watched)
    calls: list[tuple[int, int]] = []
    bad = verify_images(tmp_path, names, lambda done, total: calls.append((done, total)), workers=3)
    assert len(threads) == 3 and finished[-1] == "00.png", f"not decoded by 3 threads at once: {finished}"
    assert [b.path for b in bad] == ["02.png", "07.png"]
    assert all(b.reason.startswith("UnidentifiedImageError: cannot identify image file") for b in bad)
    assert calls == [(k, 12) for k in range(1, 13)]
    monkeypatch.setattr(image_decode, "decode_image", decode)
    assert verify_images(tmp_path, names, workers=1) == bad
