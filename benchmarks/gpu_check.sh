#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (issue 17, docs/gpu.md): the device and the
# driver, the GPU tests (none skipped when a device is there), then `python -m sparsecc
# gpucheck` (sparsecc/gpucheck.py; this script is its wrapper): SpMV, SpMM (k=64),
# SDDMM and MTTKRP compiled with device="cuda", checked against SciPy/NumPy, timed, with
# achieved GB/s against the device's memory bandwidth and cuSPARSE's time via CuPy when
# installed.  Finishes in a few minutes.  Usage: bash benchmarks/gpu_check.sh [scale]
# (scale 1: SpMV with about 50M stored entries; 0.1 for a quick look).
set -u
cd "$(dirname "$0")/.."
export SPARSECC_CACHE_DIR="${SPARSECC_CACHE_DIR:-/tmp/sparsecc-gpucheck}"
SCALE="${1:-1}"
echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5
echo "== tests (tests/test_gpu.py)"
timeout 300 python -m pytest -q -rs tests/test_gpu.py tests/test_gpu_device_operands.py 2>&1 | tail -15
echo "== kernels (scale $SCALE): python -m sparsecc gpucheck"
timeout 400 python -m sparsecc gpucheck --scale "$SCALE"
rc=$?
echo "== done (gpucheck exit status $rc)"
exit $rc
