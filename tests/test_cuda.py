"""What only a GPU can show: CUDA against the CPU, nvJPEG against PIL, ``--compile``, bf16, memory.

Every test here is marked ``cuda``: skipped where there is no GPU (the reason is in pytest's
summary), run by ``benchmarks/gpu_check.sh``, all together in a few minutes on one H100. Each
tolerance is stated where it is asserted and explained in docs/architecture.md, "Numbers across
devices"; the measured values go to gpu_check's report through the ``record`` fixture.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from spmlkit import models
from spmlkit.data.gpu_decode import EncodedImages, GpuDecoder
from spmlkit.data.images import ImageFileDataset, ImageTransform, UnreadableImageError
from spmlkit.experiments.presets import DATASET_DEFAULTS
from spmlkit.methods import METHODS
from spmlkit.training import train
from spmlkit.training.config import config_from_dict
from spmlkit.training.device import deterministic_cuda

pytestmark = pytest.mark.cuda

CUDA = torch.device("cuda")
#: a digits-mosaic run small enough for seconds on a GPU, large enough for a meaningful mAP
MOSAIC = {**DATASET_DEFAULTS["digits-mosaic"], "dataset": "digits-mosaic", "mosaic_train": 800, "mosaic_test": 400,
          "method": "an", "epochs": 2, "batch_size": 64, "num_workers": 0}
#: |test mAP| between runs that differ only in rounding (device, compilation, decoder): two epochs
#: of training amplify a last-bit difference into a different trajectory; 0.01 is five times the
#: largest difference seen on the first H100 (docs/architecture.md, "Numbers across devices")
MAP_TOLERANCE = 0.01


def _run(**settings):
    return train(config_from_dict({**MOSAIC, **settings}))


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if v.is_floating_point()}


def _one_step(**settings) -> dict[str, torch.Tensor]:
    """The weights after one SGD step (64 training rows), fp32 without TF32 unless ``settings`` say otherwise."""
    one_step = {"mosaic_train": 80, "mosaic_test": 40, "batch_size": 64, "epochs": 1, "optimizer": "sgd",
                "lr": 0.05, "amp": "none", "deterministic": True, "device": "cuda"}
    return _state(_run(**{**one_step, **settings}).model)


# ----------------------------------------------------------------------------- CUDA and the CPU
def test_one_sgd_step_on_cuda_equals_the_cpu_step(record):
    """fp32, TF32 off, deterministic algorithms: the weights after one step agree to 1e-5 relative
    (per tensor, in norm). SGD, because Adam divides each gradient by its own magnitude, which
    turns rounding noise of a near-zero gradient into a full step of either sign."""
    a, b = _one_step(device="cpu"), _one_step(device="cuda")
    worst = max(float((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12)) for k in a)
    record("one SGD step, largest relative weight difference CUDA vs CPU", worst)
    assert worst <= 1e-5


def test_a_cuda_run_is_close_to_the_cpu_run(record):
    """Two epochs, fp32 without TF32: the test mAP within :data:`MAP_TOLERANCE` of the CPU's."""
    settings = {"amp": "none", "deterministic": True}
    cpu, gpu = _run(device="cpu", **settings), _run(device="cuda", **settings)
    record("digits-mosaic test mAP, CUDA minus CPU", gpu.test_map - cpu.test_map)
    record("validation mAP per epoch, largest |CUDA - CPU|",
           max(abs(g["val_map"] - c["val_map"]) for g, c in zip(gpu.history, cpu.history)))
    assert abs(gpu.test_map - cpu.test_map) <= MAP_TOLERANCE


def test_two_deterministic_cuda_runs_are_bit_identical():
    """``--deterministic`` with the GPU defaults (bf16 autocast, channels-last): bit for bit."""
    first, second = _run(device="cuda", deterministic=True), _run(device="cuda", deterministic=True)
    a, b = _state(first.model), _state(second.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [h["val_map"] for h in first.history] == [h["val_map"] for h in second.history]
    assert first.test_map == second.test_map


def _update_difference(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor],
                       before: dict[str, torch.Tensor]) -> float:
    """|other's update - reference's update| / |reference's update| over all trained weights at once
    (batch-norm statistics left out: they are averages, not updates). Per tensor would divide by
    the tiny update of a bias that starts at zero; the whole step is what training follows."""
    keys = [k for k in reference if "running_" not in k]
    difference = sum(float((other[k] - reference[k]).double().norm() ** 2) for k in keys)
    update = sum(float((reference[k] - before[k]).double().norm() ** 2) for k in keys)
    return math.sqrt(difference / update)


def test_bf16_autocast_step_is_close_to_fp32s_and_a_bf16_run_learns(record):
    """One SGD step under bf16 autocast against the same step in fp32: bf16 keeps 8 bits of
    mantissa, and a gradient is a sum with cancellations, so the update differs by a few per cent
    (0.061 on the 2-core CPU's bf16); 0.25 is four times that. It must also differ by far more
    than fp32's rounding (1e-5), or the step did not run in bf16. Over a whole run a bf16 and an
    fp32 trajectory are as far apart as two seeds (docs/architecture.md, "Numbers across
    devices"), so the run is held only to learning: within 0.15 test mAP of fp32's."""
    before = _one_step(lr=1e-30)
    fp32, bf16 = _one_step(), _one_step(amp="bf16")
    difference = _update_difference(fp32, bf16, before)
    record("one SGD step, |bf16 update - fp32 update| / |fp32 update|", difference)
    assert 1e-3 <= difference <= 0.25
    fp32_run, bf16_run = _run(device="cuda", amp="none"), _run(device="cuda", amp="bf16")
    # the training forward really ran under bf16 autocast, and the fp32 run's did not
    assert (bf16_run.forward_dtype, fp32_run.forward_dtype) == ("bfloat16", "float32")
    record("digits-mosaic test mAP, bf16 minus fp32", bf16_run.test_map - fp32_run.test_map)
    assert all(math.isfinite(h["train_loss"]) for h in bf16_run.history)
    assert abs(bf16_run.test_map - fp32_run.test_map) <= 0.15


def test_compile_equals_eager_and_reports_its_speedup(record):
    """fp32 without TF32, so that what differs is only the compiled kernels' order of sums: one
    step's update within 1e-4 of eager's (6.7e-6 on the 2-core CPU), and a two-epoch run within
    :data:`MAP_TOLERANCE`, as CUDA against the CPU."""
    before = _one_step(lr=1e-30)
    eager_step, compiled_step = _one_step(), _one_step(compile=True)
    difference = _update_difference(eager_step, compiled_step, before)
    record("one SGD step, |compiled update - eager update| / |eager update|", difference)
    assert difference <= 1e-4
    settings = {"amp": "none", "deterministic": True}
    eager, compiled = _run(device="cuda", **settings), _run(device="cuda", compile=True, **settings)
    assert (compiled.compiled, eager.compiled) == (True, False)  # --compile was not silently ignored
    speedup = compiled.history[-1]["images_per_second"] / eager.history[-1]["images_per_second"]
    record("--compile speed-up of the second epoch (small CNN at 32 x 32, fp32)", speedup)
    record("digits-mosaic test mAP, compiled minus eager", compiled.test_map - eager.test_map)
    assert abs(compiled.test_map - eager.test_map) <= MAP_TOLERANCE


def _feature_data():
    from spmlkit.training.run_data import RunData

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 32)).astype(np.float32)
    Y = (X @ rng.normal(size=(32, 6)) + rng.normal(size=(600, 6)) > 1.0).astype(np.uint8)
    Y[Y.sum(1) == 0, 0] = 1
    return RunData("features", "synthetic", tuple(f"c{k}" for k in range(6)), Y[:500], Y[500:], X_train=X[:500],
                   X_test=X[500:])


def test_feature_runs_on_cuda_equal_the_cpu(record):
    """A head on fixed features (the estimator's path), fp32: the same numbers up to rounding."""
    data = _feature_data()
    settings = {"dataset": "yeast", "method": "em", "epochs": 5, "lr": 0.01, "batch_size": 64}
    cpu = train(config_from_dict({**settings, "device": "cpu"}), data=data)
    gpu = train(config_from_dict({**settings, "device": "cuda"}), data=data)
    record("feature run test mAP, CUDA minus CPU", gpu.test_map - cpu.test_map)
    assert abs(gpu.test_map - cpu.test_map) <= 1e-3


@pytest.mark.parametrize("method", [name for name, method in METHODS.items() if method.on_features.trains])
def test_every_feature_method_trains_on_cuda_as_on_the_cpu(method, record):
    """Every method's label state, pseudo-labels, graphs and draws on the GPU: six epochs of a
    feature head, fp32 without TF32, the test mAP within :data:`MAP_TOLERANCE` of the CPU's."""
    data = _feature_data()
    settings = {"dataset": "yeast", "method": method, "epochs": 6, "lr": 0.01, "batch_size": 64,
                "deterministic": True}
    cpu = train(config_from_dict({**settings, "device": "cpu"}), data=data)
    gpu = train(config_from_dict({**settings, "device": "cuda"}), data=data)
    record(f"{method} on features, test mAP CUDA minus CPU", gpu.test_map - cpu.test_map)
    assert all(math.isfinite(h["train_loss"]) for h in gpu.history)
    assert abs(gpu.test_map - cpu.test_map) <= MAP_TOLERANCE


class _LabelQueriesWithoutDropout(models.LabelQueryNet):
    def __init__(self, *args, **head):
        super().__init__(*args, **{**head, "dropout": 0.0})


@pytest.mark.parametrize("method", [name for name, method in METHODS.items() if not method.on_features.trains])
def test_every_image_only_method_steps_on_cuda_as_on_the_cpu(method, tmp_path, record, monkeypatch):
    """The methods that need images (strong views, label queries, boosted CAMs) on RGB JPEGs, fp32
    without TF32: one SGD step's update within 1e-4 of the CPU's (relative, all weights at once,
    as compiled against eager); 5e-3 for the label-query head of plc and lac, whose transformer
    decoder rounds further apart (AN on that head: 5.4e-5 on the first H200, plc 1.6e-4, lac
    7.2e-4; the CNN's boostlu: 2.1e-6). Their whole runs are held only to finite losses: PLC and LAC
    threshold their predictions (pseudo-labels at 0.6 and 0.9), and an entry that rounds across a
    threshold on one device and not on the other sends the trajectories apart within a few steps
    (docs/architecture.md, "Numbers across devices", has what the first H200 showed). The
    label-query head's dropout draws its masks from the device's generator, so the step is compared
    with that dropout at 0; the runs keep it."""
    prepared = _jpeg_mosaic(tmp_path / "jpeg", n_train=80, n_test=40)  # 64 training rows: one step of 64
    settings = {**MOSAIC, "dataset": "prepared", "prepared": str(prepared), "method": method, "epochs": 1,
                "batch_size": 64, "optimizer": "sgd", "lr": 0.05, "amp": "none", "deterministic": True,
                **({"image_head": "label_query", "constant_bn": True} if method in ("plc", "lac") else {})}

    def step(**changes):
        return _state(train(config_from_dict({**settings, **changes})).model)

    with monkeypatch.context() as patch:
        patch.setattr(models, "LabelQueryNet", _LabelQueriesWithoutDropout)
        before, cpu = step(device="cpu", lr=1e-30), step(device="cpu")
        difference = _update_difference(cpu, step(device="cuda"), before)
    record(f"{method}: one SGD step, |CUDA update - CPU update| / |CPU update|", difference)
    assert difference <= (5e-3 if settings.get("image_head") == "label_query" else 1e-4)
    run = {**settings, "optimizer": "adam", "lr": 1e-4, "epochs": 2}
    gpu_run, cpu_run = train(config_from_dict({**run, "device": "cuda"})), train(config_from_dict({**run, "device": "cpu"}))
    record(f"{method}: two epochs, test mAP CUDA minus CPU", gpu_run.test_map - cpu_run.test_map)
    assert all(math.isfinite(h["train_loss"]) for h in gpu_run.history) and math.isfinite(gpu_run.test_map)


# ----------------------------------------------------------------------------- memory
def test_peak_gpu_memory_is_recorded_and_covers_the_model_and_its_batch(tmp_path, record):
    result = _run(device="cuda", amp="none", out=str(tmp_path / "run"))
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    peak = saved["peak_gpu_memory_bytes"]
    params = sum(p.numel() * p.element_size() for p in result.model.parameters())
    batch = MOSAIC["batch_size"] * 3 * 32 * 32 * 4
    record("digits-mosaic run, peak GPU memory (bytes)", peak)
    # weights, gradients and Adam's two moments, and one float32 input batch, all live at once
    assert isinstance(peak, int) and 4 * params + batch <= peak <= 2 * 2**30


# ----------------------------------------------------------------------------- nvJPEG
def _photographs(folder: Path) -> list[Path]:
    """One photograph saved in every form a dataset holds: baseline JPEG with 4:2:0 and 4:4:4
    chroma, progressive, grey, CMYK, and a PNG (VOC-sized, 500 x 375)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photo = Image.fromarray(load_sample_images().images[0]).resize((500, 375), Image.BICUBIC)
    folder.mkdir(parents=True, exist_ok=True)
    forms = {
        "baseline-420.jpg": (photo, {"quality": 90, "subsampling": 2}),
        "baseline-444.jpg": (photo, {"quality": 90, "subsampling": 0}),
        "progressive.jpg": (photo, {"quality": 90, "progressive": True}),
        "grey.jpg": (photo.convert("L"), {"quality": 90}),
        "cmyk.jpg": (photo.convert("CMYK"), {"quality": 90}),
        "lossless.png": (photo, {}),
    }
    paths = []
    for name, (image, options) in forms.items():
        image.save(folder / name, **options)
        paths.append(folder / name)
    return paths


def test_nvjpeg_decodes_every_form_as_pil_does_within_a_few_grey_levels(tmp_path, record):
    """Per image, mean |difference| <= 2 grey levels and none beyond 64 (nvJPEG's IDCT and chroma
    upsampling, and torch's resize, each round differently from libjpeg and PIL); CMYK and PNG
    are decoded by PIL in the worker, hence exactly as on the CPU."""
    paths = _photographs(tmp_path / "img")
    transform = ImageTransform(224)
    rows = np.arange(len(paths))
    reference = ImageFileDataset(paths, transform).pixels(rows)
    items = EncodedImages(paths, transform).encoded(rows)
    assert [is_jpeg for _, is_jpeg in items] == [True, True, True, True, False, False]
    decoded = GpuDecoder(transform, CUDA)(items, paths).cpu()
    for path, got, want in zip(paths, decoded, reference):
        levels = (got.int() - want.int()).abs().float()
        record(f"nvJPEG vs PIL, {path.name}: mean / max grey levels", [float(levels.mean()), float(levels.max())])
        assert float(levels.mean()) <= 2 and float(levels.max()) <= 64, path.name
    assert torch.equal(decoded[4], reference[4]) and torch.equal(decoded[5], reference[5])


def test_a_broken_jpeg_in_a_gpu_batch_is_named(tmp_path):
    paths = _photographs(tmp_path / "img")[:2]
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 4])
    # nvJPEG decodes a file cut short without an error (the first H200 showed it): such a file
    # never reaches it, the worker's PIL names it (spmlkit.data.gpu_decode.ends_whole)
    with pytest.raises(UnreadableImageError, match=f"cannot read image {paths[1]}"):
        GpuDecoder(ImageTransform(64), CUDA)(EncodedImages(paths, ImageTransform(64)).encoded([0, 1]), paths)


def test_decoding_never_overwrites_memory_that_queued_work_still_reads(tmp_path, record, monkeypatch):
    """The defect behind ``--decode gpu`` training to NaN: nvJPEG writes its outputs before the
    work queued on its stream has run, into blocks the caching allocator has just recycled.
    Each round queues a long kernel, then one sum per tensor, frees the tensors while the sums
    are still queued, and decodes: every sum must come out right. The freed tensors have the
    size of one decoded image (uint8, 3 x 375 x 500), so that the allocator can hand exactly
    their blocks to the decoder's outputs (a block of another size, or of its other pool, never
    could). The rounds without the drain are only counted (they show whether this GPU has the
    defect at all)."""
    paths = _photographs(tmp_path / "img")[:3]
    transform = ImageTransform(224)
    items = EncodedImages(paths, transform).encoded(range(3))
    decoder = GpuDecoder(transform, CUDA)

    def corrupted_rounds(rounds: int) -> int:
        bad = 0
        for _ in range(rounds):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the freed tensors' blocks are the only free ones of their size
            tensors = [torch.full((3, 375, 500), k, dtype=torch.uint8, device=CUDA) for k in range(1, 9)]
            torch.cuda.synchronize()
            torch.cuda._sleep(20_000_000)  # a kernel that keeps the stream busy for some milliseconds
            sums = [t.sum(dtype=torch.int64) for t in tensors]
            del tensors  # freed while their sums are still queued
            decoder(items, paths)
            torch.cuda.synchronize()
            bad += any(int(s) != k * 3 * 375 * 500 for k, s in zip(range(1, 9), sums))
        return bad

    assert corrupted_rounds(30) == 0
    monkeypatch.setattr(GpuDecoder, "_drain", lambda self: None)
    record("rounds corrupted without the drain (of 30)", corrupted_rounds(30))


def _jpeg_mosaic(folder: Path, n_train: int = 800, n_test: int = 400) -> Path:
    """The digits mosaic as RGB JPEG files (quality 95, 64 x 64) in a prepared folder."""
    from PIL import Image

    from spmlkit.data.digits_mosaic import make_digits_mosaic
    from spmlkit.data.formats.prepared import write_prepared

    mosaic = make_digits_mosaic(num_train=n_train, num_test=n_test, seed=0, image_size=64)
    names = {}
    for split in ("train", "test"):
        images, _ = mosaic.split(split)
        (folder / split).mkdir(parents=True, exist_ok=True)
        names[split] = [f"{split}/{i:05d}.jpg" for i in range(len(images))]
        for name, image in zip(names[split], images):
            Image.fromarray(image[0]).convert("RGB").save(folder / name, quality=95)
    write_prepared(folder / "prepared", dataset="mosaic-jpeg", class_names=mosaic.class_names,
                   train_images=names["train"], train_labels=mosaic.train_labels, test_images=names["test"],
                   test_labels=mosaic.test_labels, root=folder)
    return folder / "prepared"


def test_a_decode_gpu_run_is_finite_and_close_to_the_decode_cpu_run(tmp_path, record):
    prepared = _jpeg_mosaic(tmp_path / "jpeg")
    # 64 x 64 files trained at 48: the GPU path resizes every batch, as it does on real datasets
    settings = {**MOSAIC, "dataset": "prepared", "prepared": str(prepared), "image_size": 48, "device": "cuda",
                "num_workers": 2, "hflip": True}
    cpu = train(config_from_dict({**settings, "decode": "cpu"}))
    gpu = train(config_from_dict({**settings, "decode": "gpu"}))
    assert all(math.isfinite(h["train_loss"]) for h in gpu.history) and math.isfinite(gpu.test_map)
    record("JPEG mosaic test mAP, --decode gpu minus --decode cpu", gpu.test_map - cpu.test_map)
    assert abs(gpu.test_map - cpu.test_map) <= MAP_TOLERANCE


# ----------------------------------------------------------------------------- shipping a GPU-trained run
def test_export_and_predict_from_a_cuda_trained_run(tmp_path, record):
    from spmlkit.data.digits_mosaic import export_png
    from spmlkit.export import export_model
    from spmlkit.predict import predict_images

    run = tmp_path / "run"
    result = _run(device="cuda", out=str(run))
    exported = export_model(run, "torchscript", tmp_path / "model.torchscript.pt")
    assert exported.max_abs_diff is not None and exported.max_abs_diff <= 1e-4
    from spmlkit.data.digits_mosaic import make_digits_mosaic

    images = export_png(make_digits_mosaic(num_train=4, num_test=8, seed=1), tmp_path / "png") / "images" / "test"
    with deterministic_cuda(True):  # TF32 off: the GPU's float32 against the CPU's
        on_gpu = predict_images(run, [images], device="cuda")
    on_cpu = predict_images(run, [images], device="cpu")
    difference = float(np.abs(on_gpu.scores - on_cpu.scores).max())
    record("predict, largest |CUDA - CPU| probability", difference)
    assert on_gpu.images == on_cpu.images and difference <= 1e-4
    assert math.isfinite(result.test_map)


def test_a_one_process_nccl_run_equals_a_plain_run(tmp_path):
    """torchrun with one process on the GPU: the NCCL group starts and ends, and the run trains
    exactly as without torchrun (deterministic algorithms, so the two are compared bit for bit)."""
    import os
    import subprocess
    import sys

    from spmlkit.training.checkpoint import load_checkpoint

    helper = Path(__file__).parent / "helpers" / "distributed_runs.py"
    env = {**os.environ, "SPMLKIT_TEST_DEVICE": "cuda", "PYTHONUNBUFFERED": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    spec = "an:deterministic=true"
    # --standalone: torchrun's rendezvous takes a free port from the operating system (port 0)
    launches = {"plain": [], "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]}
    for name, launcher in launches.items():
        done = subprocess.run([sys.executable, *launcher, str(helper), str(tmp_path / name), spec], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plain, nccl = (load_checkpoint(tmp_path / name / "an" / "best.pt") for name in launches)
    assert all(torch.equal(plain["model"][k], nccl["model"][k]) for k in plain["model"])
    results = [json.loads((tmp_path / name / "an" / "result.json").read_text()) for name in launches]
    assert results[0]["test_map"] == results[1]["test_map"]
    assert [r["processes"] for r in results] == [1, 1]
