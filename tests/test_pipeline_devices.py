"""GPU-side speed options on a machine without a GPU: `--decode gpu` refused, the CPU path unchanged,
the GPU decoder's arithmetic checked on the CPU, `--compile` training (and recorded), the dtype a
forward ran in under autocast (recorded), fused Adam."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from spmlkit.cli import main
from spmlkit.data.digits_mosaic import DigitsMosaicDataset, make_digits_mosaic
from spmlkit.data.gpu_decode import EncodedImages, GpuDecoder
from spmlkit.data.images import ImageFileDataset, ImageTransform
from spmlkit.errors import InputError
from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.training import train
from spmlkit.training.config import RunConfig, config_from_dict
from spmlkit.training.sources import ImageSource
from spmlkit.training.trainer import _optimizer

CPU = torch.device("cpu")
MOSAIC = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 80, "mosaic_test": 20,
          "method": "an", "epochs": 1, "batch_size": 32, "device": "cpu"}

pytestmark = pytest.mark.usefixtures("one_thread")


def _photos(folder: Path, n: int = 6) -> list[Path]:
    """JPEG crops of scikit-learn's two sample photographs, of various sizes, and one PNG."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    sources = [Image.fromarray(a) for a in load_sample_images().images]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        image = sources[k % 2].crop((20 * k, 10 * k, 20 * k + 300 + 17 * k, 10 * k + 200 + 11 * k))
        path = folder / (f"{k}.png" if k == n - 1 else f"{k}.jpg")
        image.save(path, **({} if path.suffix == ".png" else {"quality": 92}))
        paths.append(path)
    return paths


def test_decode_gpu_is_refused_on_the_cpu_with_one_line(tmp_path, capsys):
    code = main(["train", "--dataset", "digits-mosaic", "--decode", "gpu", "--device", "cpu", "--epochs", "1",
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "--decode gpu decodes JPEGs on a CUDA GPU" in err and "--decode cpu" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    if not torch.cuda.is_available():  # the automatic device of a machine without CUDA
        assert main(["train", "--dataset", "digits-mosaic", "--decode", "gpu", "--epochs", "1"]) == 2
        assert "this machine has no CUDA device" in capsys.readouterr().err
    with pytest.raises(ValueError, match="decode must be one of cpu, gpu"):
        RunConfig(decode="tpu")


def test_image_source_refuses_gpu_decoding_off_cuda(tmp_path):
    paths = _photos(tmp_path / "img", 3)
    files = ImageFileDataset(paths, ImageTransform(32))
    with pytest.raises(InputError, match="this run's device is cpu"):
        ImageSource(files, files, np.arange(2), np.arange(2, 3), batch_size=2, eval_batch_size=None, hflip=True,
                    num_workers=0, device=CPU, channels_last=True, num_classes=2, decode="gpu")


def test_cpu_batches_are_the_dataset_images_in_the_drawn_order_and_flips(tmp_path):
    """The CPU path: batch k holds the transform of each drawn row, flipped where the draw says so."""
    paths = _photos(tmp_path / "img", 6)
    files = ImageFileDataset(paths, ImageTransform(24))
    rows = np.array([5, 0, 3, 1])
    source = ImageSource(files, files, rows, np.arange(0), batch_size=3, eval_batch_size=None, hflip=True,
                         num_workers=0, device=CPU, channels_last=True, num_classes=2)
    draws = torch.Generator().manual_seed(7)
    perm = torch.randperm(4, generator=draws).tolist()
    flips = (torch.rand(4, generator=draws) < 0.5).tolist()
    got = [(x[0], idx[0]) for x, idx in source.train_batches([torch.Generator().manual_seed(7)])]
    assert [idx.tolist() for _, idx in got] == [perm[:3], perm[3:]]
    for x, idx in got:
        assert x.is_contiguous()  # channels-last is for CUDA only
        for image, i in zip(x, idx.tolist()):
            expected = files[int(rows[i])][0]
            assert torch.equal(image, expected.flip(-1) if flips[i] else expected)


def test_gpu_decoder_arithmetic_run_on_the_cpu_is_close_to_the_pil_path(tmp_path):
    """torchvision decodes on the CPU too, which checks the GPU path's resize here: libjpeg-turbo
    decodes as PIL does, so what differs is torch's antialiased bilinear resize from PIL's, by
    about a grey level (nvJPEG adds its own rounding on a GPU; tests/test_cuda.py measures that)."""
    paths = _photos(tmp_path / "img", 6)
    size, rows = 56, np.arange(6)
    transform = ImageTransform(size)
    reference = ImageFileDataset(paths, transform).pixels(rows)
    items = EncodedImages(paths, transform).encoded(rows)
    assert [is_jpeg for _, is_jpeg in items] == [True] * 5 + [False]  # the PNG came decoded by the worker
    batch = GpuDecoder(transform, CPU)(items, paths)
    assert batch.shape == (6, size, size, 3) and batch.dtype == torch.uint8
    levels = (batch.int() - reference.int()).abs()
    assert torch.equal(batch[5], reference[5])  # PIL decoded and resized the PNG, as the CPU path does
    for i in range(5):
        assert float(levels[i].float().mean()) < 1.0 and int(levels[i].max()) <= 40, i


def test_gpu_decoder_names_an_unreadable_file(tmp_path):
    from spmlkit.data.images import UnreadableImageError

    paths = _photos(tmp_path / "img", 3)  # two JPEGs and a PNG
    paths[0].write_bytes(b"\xff\xd8 a truncated JPEG")
    with pytest.raises(UnreadableImageError, match=f"cannot read image {paths[0]}"):
        EncodedImages(paths, ImageTransform(16)).encoded([0, 1])  # no header: the worker names it
    # a JPEG cut short (its header reads, its end-of-image marker is gone): nvJPEG would decode it
    # without a word, so the worker hands it to PIL, which names it
    good = paths[1].read_bytes()
    paths[0].write_bytes(good[: len(good) // 3])
    with pytest.raises(UnreadableImageError, match=f"cannot read image {paths[0]}"):
        EncodedImages(paths, ImageTransform(16)).encoded([0, 1])
    # a whole JPEG the decoder refuses (its quantisation tables taken out: the header still reads)
    # is named by the decoder, with PIL's message
    paths[0].write_bytes(_without_segment(good, b"\xff\xdb"))
    items = EncodedImages(paths, ImageTransform(16)).encoded([0, 1])
    assert [is_jpeg for _, is_jpeg in items] == [True, True]
    with pytest.raises(UnreadableImageError, match=f"cannot read image {paths[0]}"):
        GpuDecoder(ImageTransform(16), CPU)(items, paths)


def _without_segment(jpeg: bytes, marker: bytes) -> bytes:
    """``jpeg`` with every header segment of ``marker`` (two bytes, then a big-endian length) removed."""
    out, i = bytearray(jpeg[:2]), 2
    while jpeg[i : i + 2] != b"\xff\xda":  # header segments up to the start of scan
        length = int.from_bytes(jpeg[i + 2 : i + 4], "big")
        if jpeg[i : i + 2] != marker:
            out += jpeg[i : i + 2 + length]
        i += 2 + length
    return bytes(out + jpeg[i:])


def test_a_jpeg_not_ending_with_its_marker_is_decoded_by_pil_as_on_the_cpu(tmp_path):
    """Bytes after the end-of-image marker: not nvJPEG's (it cannot tell them from a file cut
    short), PIL's in the worker, so the pixels are the CPU path's exactly; zero padding stays nvJPEG's."""
    from spmlkit.data.gpu_decode import ends_whole

    paths = _photos(tmp_path / "img", 3)
    whole = paths[0].read_bytes()
    assert ends_whole(whole) and ends_whole(whole + b"\0\0") and not ends_whole(whole[:-1])
    paths[0].write_bytes(whole + b"a trailer some cameras append")
    paths[1].write_bytes(paths[1].read_bytes() + b"\0" * 7)
    transform = ImageTransform(24)
    items = EncodedImages(paths[:2], transform).encoded([0, 1])
    assert [is_jpeg for _, is_jpeg in items] == [False, True]
    assert torch.equal(items[0][0], ImageFileDataset(paths, transform).pixels(np.arange(1))[0])


def _compiles() -> bool:
    """Whether torch.compile works here at all (it needs a C++ compiler on the CPU)."""
    if not hasattr(torch, "compile"):
        return False
    try:
        return bool(torch.compile(lambda t: t * 2)(torch.ones(2)).sum() == 4)
    except Exception:
        return False


def test_a_compiled_run_trains_and_keeps_plain_checkpoints(tmp_path):
    if not _compiles():  # probed here, not at collection: a first compilation takes a while
        pytest.skip("torch.compile is not available on this machine")
    config = config_from_dict({**MOSAIC, "compile": True, "out": str(tmp_path / "run")})
    result = train(config)
    eager = train(config_from_dict({**MOSAIC, "out": str(tmp_path / "eager")}))
    # the compiled step computes the eager step's function, fused: its sums round otherwise, by
    # float32's last bits per step (docs/architecture.md, "Numbers across devices")
    assert result.finished and result.history[0]["train_loss"] == pytest.approx(eager.history[0]["train_loss"],
                                                                                rel=1e-4)
    assert abs(result.test_map - eager.test_map) <= 0.01
    # the step really went through torch.compile: --compile was not silently ignored, and says so
    assert (result.compiled, eager.compiled) == (True, False)
    assert json.loads((tmp_path / "run" / "result.json").read_text())["compiled"] is True
    from spmlkit.training.checkpoint import load_checkpoint

    assert not any(k.startswith("_orig_mod") for k in load_checkpoint(tmp_path / "run" / "best.pt")["model"])


def test_a_run_records_the_dtype_its_forward_ran_in(tmp_path):
    """bf16 autocast (here the CPU's) makes the training forward's logits bfloat16, and the run's
    record says so; without it they are float32 (docs/architecture.md, "How a run trained")."""
    bf16 = train(config_from_dict({**MOSAIC, "amp": "bf16", "out": str(tmp_path / "bf16")}))
    fp32 = train(config_from_dict({**MOSAIC, "amp": "none"}))
    assert (bf16.forward_dtype, fp32.forward_dtype) == ("bfloat16", "float32")
    record = json.loads((tmp_path / "bf16" / "result.json").read_text())
    assert (record["forward_dtype"], record["compiled"], record["processes"], record["group_size"]) == (
        "bfloat16", False, 1, 1)


def test_compile_and_decode_options_reach_the_config():
    from spmlkit.cli import build_parser
    from spmlkit.cli.train import resolve_from_args

    args = build_parser().parse_args(["train", "--dataset", "digits-mosaic", "--compile", "--decode", "cpu"])
    config = resolve_from_args(args)
    assert config.machine.compile is True and config.machine.decode == "cpu"
    assert RunConfig().machine.compile is False and RunConfig().machine.decode == "cpu"


def test_adam_is_fused_and_takes_the_textbook_step():
    """Adam is torch's fused implementation on every device (one kernel per parameter group); its
    first step is Adam's formula: ``p - lr * g / (|g| + eps)`` after bias correction."""
    config = RunConfig()
    weights = torch.nn.Parameter(torch.zeros(3))
    adam = _optimizer(config, [{"params": [weights]}])
    assert adam.defaults["fused"] is True
    grad = torch.tensor([0.5, -2.0, 1e-3])
    weights.grad = grad.clone()
    adam.step()
    lr, eps = config.optimisation.lr, 1e-8
    torch.testing.assert_close(weights.detach(), -lr * grad / (grad.abs() + eps), rtol=1e-6, atol=0)


def test_mosaic_batches_are_unchanged_by_the_new_loader_settings():
    """The digits mosaic (in memory) through the CPU path: the same tensors as the dataset gives."""
    mosaic = make_digits_mosaic(num_train=10, num_test=4, seed=0, image_size=16)
    data = DigitsMosaicDataset(mosaic.train_images)
    source = ImageSource(data, data, np.arange(10), np.arange(0), batch_size=4, eval_batch_size=None, hflip=False,
                         num_workers=2, device=CPU, channels_last=True, num_classes=10)
    seen = {int(i): x for batch, idx in source.train_batches([torch.Generator().manual_seed(0)])
            for x, i in zip(batch[0], idx[0])}
    assert sorted(seen) == list(range(10)) and all(torch.equal(seen[i], data[i][0]) for i in seen)
