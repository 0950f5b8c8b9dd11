#!/usr/bin/env bash
# The prepared GPU check, at most 6 minutes on one GPU (BUDGET, default 360 s):
#   the GPU-marked tests (pytest -m gpu: fused SDPA kernels, AmpOptimWrapper training, compiled = eager), then the
#   benchmarks, bf16, forward + backward: every image encoding against ape_learned at ViT-S/16 224 px batch 64 and
#   ViT-B/16 448 px batch 16 (timm's own models beside vispe's at the first), the attention cores against SDPA and
#   SDPA with a learned bias, mixed-size batches, the Runner against a plain loop, and last the compiled runs, row
#   by row, most important first, leaving out (and naming) what would overrun the budget. One summary with the
#   targets and whether each is met: OUT/summary.md. The steps: workbench/gpu_steps.py.
#
#   tools/gpu_check.sh                 # on the GPU machine: .venv/bin/python if there is one, else python3
#   tools/gpu_check.sh --device cpu    # the same steps at toy sizes, to test the script where there is no GPU
# It needs torch, timm, mmengine and kornia (not open3d) and no internet: models are randomly initialised.
# Environment: PY (the python), OUT (default outputs/gpu_check), BUDGET (s), ENCODINGS (rows; default every image
# encoding). Other options: tools/gpu_check.py --help. A failure of the GPU tests does not stop the benchmarks; the
# script exits with it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export HF_HUB_OFFLINE=1  # nothing is downloaded: a hub lookup fails at once instead of waiting on the network
exec "$PY" tools/gpu_check.py "$@"
