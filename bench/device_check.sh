#!/usr/bin/env bash
# The cloud backend on a machine with an NVIDIA GPU, in one short run:
#   1. a virtualenv with the repo's constraints, jax[cuda12] at the pinned jax version and torch's
#      CUDA build at the pinned torch version (from the package registry; a few minutes);
#   2. the cloud tests on XLA:GPU (JAX_PLATFORMS=cuda,cpu: the GPU is JAX's default backend, the
#      CPU stays available for the build-time check that compares an artifact with torch on the host);
#   3. train steps/s of tpuedge's jitted step against torch CUDA eager for the three bench models
#      (bench/cloud_step.py --device cuda);
#   4. an LM's decode and prefill tokens/s on XLA:GPU: tpuedge's JAX decoder of SmolLM2-135M's shapes
#      (random weights: nothing to download) at batch 1 and 8 (bench/llm_cloud.py --decode-only).
# Writes OUT/device_check.json (the summary), OUT/cloud_tests.xml/.log, OUT/cloud_step_cuda.json,
# OUT/llm_cloud_decode.json, OUT/gpu.txt.
#
#   bash bench/device_check.sh [OUT]        # OUT defaults to bench/results/device_check
# Environment: PYTHON (3.11+, default python3), TPUEDGE_GPU_VENV (default .venv-gpu),
# JAX_CUDA_EXTRA (default cuda12; cuda13 for a CUDA 13 driver stack).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/device_check}
VENV=${TPUEDGE_GPU_VENV:-.venv-gpu}
mkdir -p "$OUT"

command -v nvidia-smi >/dev/null || { echo "device_check: no nvidia-smi, so no NVIDIA GPU here" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"

# constraints.txt pins the CPU set: keep every pin but jax/jaxlib/torch, which change build here
JAX_VERSION=$(sed -n 's/^jax==//p' constraints.txt)
TORCH_VERSION=$(sed -n 's/^torch==//p' constraints.txt)
grep -v -E '^(jax|jaxlib|torch)==' constraints.txt >"$OUT/constraints-gpu.txt"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -c "$OUT/constraints-gpu.txt" \
    "jax[${JAX_CUDA_EXTRA:-cuda12}]==$JAX_VERSION" "torch==$TORCH_VERSION" -e '.[test]'

export JAX_PLATFORMS=cuda,cpu
"$VENV/bin/python" - <<'EOF'
import jax, torch
assert jax.default_backend() == "gpu", f"JAX sees no GPU: {jax.devices()}"
assert torch.cuda.is_available(), "torch has no CUDA"
print("jax", jax.__version__, jax.devices()[0].device_kind, "| torch", torch.__version__, torch.cuda.get_device_name())
EOF

tests=0
"$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider tests/test_cloud_*.py \
    --junitxml="$OUT/cloud_tests.xml" >"$OUT/cloud_tests.log" 2>&1 || tests=$?
tail -n 15 "$OUT/cloud_tests.log"

bench=0
"$VENV/bin/python" bench/cloud_step.py --device cuda --no-compile --out "$OUT/cloud_step_cuda.json" || bench=$?

lm=0
"$VENV/bin/python" bench/llm_cloud.py --decode-only --random-weights --batches 1,8 --tokens 64 \
    --out "$OUT/llm_cloud_decode.json" || lm=$?

"$VENV/bin/python" - "$OUT" "$tests" "$bench" "$lm" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out, tests_rc, bench_rc, lm_rc = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
suite = ET.parse(out / "cloud_tests.xml").getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
bench = json.loads((out / "cloud_step_cuda.json").read_text()) if bench_rc == 0 else None
lm = json.loads((out / "llm_cloud_decode.json").read_text()) if lm_rc == 0 else None
summary = {
    "gpu": (out / "gpu.txt").read_text().strip().splitlines()[-1],
    "cloud_tests": {**counts, "exit_code": tests_rc},
    "cloud_step_cuda": None if bench is None else [
        {"model": r["model"], "tpuedge_jax_steps_per_s": r["tpuedge_jax"]["steps_per_s"],
         "torch_cuda_eager_steps_per_s": r["torch_eager"]["steps_per_s"], "speedup_vs_eager": r["speedup_vs_eager"]}
        for r in bench["rows"]
    ],
    "bench_exit_code": bench_rc,
    "llm_decode": None if lm is None else {
        "model": lm["model"], "device": lm["machine"]["jax_device"],
        "rows": [{"batch": r["batch"], **{k: round(v, 1) for k, v in r["tpuedge"].items()}} for r in lm["speed"]],
    },
    "llm_exit_code": lm_rc,
}
(out / "device_check.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
EOF
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$lm" -eq 0 ]
