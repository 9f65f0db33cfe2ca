#!/usr/bin/env bash
# What anyone with a GPU runs first: spmlkit's GPU tests and the training-throughput benchmark,
# one command, a report at the end (about 6 minutes on one H200, the first it met).
#
#     benchmarks/gpu_check.sh OUT
#
# writes into OUT (created; an OUT that already holds a report is refused, nothing is replaced):
#   report.md, report.json   device, versions, every test (failures with their tracebacks), every
#                            figure the tests measured, the throughput table
#   environment.json, tests.xml, tests.log, measurements.jsonl, throughput.json, throughput.log,
#   steps.tsv                what each step left
#
# It uses the Python that has torch (PYTHON, default python3) and this checkout's spmlkit when
# none is installed. Settings, all optional:
#   GPU_CHECK_FULL=1        also run the whole test suite (needs the test extras: pip install -e ".[test]")
#   GPU_CHECK_IMAGES=N      generated images of the benchmark (default 2048)
#   GPU_CHECK_ALLOW_CPU=1   run without a GPU (a dry run of the script: GPU tests skipped, a small CPU benchmark)
# The exit status is 0 when every step and every test passed.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: benchmarks/gpu_check.sh OUT   (a folder for the report)" >&2
  exit 2
fi
OUT=$1
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
if [ -e "$OUT/report.md" ]; then
  echo "gpu_check: $OUT already holds a report; choose another folder (nothing was replaced)" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
cd "$REPO" || exit 2
if ! "$PYTHON" -c "import spmlkit" 2>/dev/null; then
  export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PYTHON" -c "import torch, torchvision, spmlkit" 2>"$OUT/import.log"; then
  echo "gpu_check: $PYTHON cannot import torch, torchvision and spmlkit (see $OUT/import.log);" \
       "install spmlkit's requirements (pip install -e .) or set PYTHON" >&2
  exit 2
fi
CUDA=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))")
if [ "$CUDA" != 1 ] && [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ]; then
  echo "gpu_check: torch sees no CUDA GPU here; run it on a GPU machine (or GPU_CHECK_ALLOW_CPU=1 for a dry run)" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1 SPMLKIT_MEASUREMENTS="$OUT/measurements.jsonl"
: > "$OUT/steps.tsv"

step() {  # step NAME COMMAND...: run it, its output to OUT/NAME.log, its status and time to steps.tsv
  local name=$1 start status ms
  shift
  start=$(date +%s%N)
  echo "== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  status=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s\t%s\t%d.%03d\n' "$name" "$status" $((ms / 1000)) $((ms % 1000)) >> "$OUT/steps.tsv"
  tail -n 3 "$OUT/$name.log"
  return 0
}

step environment "$PYTHON" - "$OUT/environment.json" <<'PY'
import json, os, platform, sys
import numpy, PIL, torch, torchvision
import spmlkit
env = {"python": sys.version.split()[0], "platform": platform.platform(), "spmlkit": spmlkit.__version__,
       "spmlkit_path": os.path.dirname(spmlkit.__file__), "torch": torch.__version__,
       "torchvision": torchvision.__version__, "numpy": numpy.__version__, "pillow": PIL.__version__,
       "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
       "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    env.update({"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1),
                "multiprocessors": p.multi_processor_count, "compute_capability": f"{p.major}.{p.minor}"})
else:
    env["gpu"] = "none (dry run on the CPU)"
json.dump(env, open(sys.argv[1], "w"), indent=1)
print(env)
PY

TESTS=(tests -m cuda)   # every test marked `cuda` (tests/test_cuda.py and the GPU case of test_peak_memory.py)
if [ "${GPU_CHECK_FULL:-0}" = 1 ]; then TESTS=(tests); fi
step tests "$PYTHON" -m pytest "${TESTS[@]}" -p no:cacheprovider -rA --junitxml="$OUT/tests.xml" -o junit_family=xunit2

if [ "$CUDA" = 1 ]; then
  BENCH=(--device cuda --backbone torchvision:resnet50 --image-size 448 --source-size 640x480
         --images "${GPU_CHECK_IMAGES:-2048}" --batch-size 64 --compile)
else
  BENCH=(--images 160 --batch-size 32)
fi
step throughput "$PYTHON" benchmarks/bench_train_throughput.py "${BENCH[@]}" --json "$OUT/throughput.json"

"$PYTHON" benchmarks/gpu_report.py "$OUT"
