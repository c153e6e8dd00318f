#!/bin/sh
# Builds ferry_vllm (python/) into $WORK against the torch that $FERRY_PYTHON imports, as setup.py
# chooses: the CUDA build where torch has CUDA and nvcc is found (device="cpu" on ferry's host
# backend and device="cuda" on its CUDA one), else the host backend alone; then runs python/tests
# there (the device="cuda" tests skip, with the reason, where torch sees no GPU). The build is
# incremental ($WORK/tmp keeps its objects). Exits 77 (ctest: skipped) with the reason when that
# interpreter has no torch or no pytest.
set -u
py=${FERRY_PYTHON:-python3}
root=${FERRY_ROOT:?}
work=${WORK:?}
if ! err=$("$py" -c "import torch" 2>&1); then
  echo "SKIP: ferry_vllm needs torch: $py -c 'import torch' failed: $(printf '%s\n' "$err" | tail -n 1)"
  echo "      (tools/bootstrap makes build/venv with torch, numpy and pytest; FERRY_PYTHON names another interpreter)"
  exit 77
fi
if ! err=$("$py" -c "import pytest, numpy" 2>&1); then
  echo "SKIP: ferry_vllm's tests need pytest and numpy: $(printf '%s\n' "$err" | tail -n 1)"
  exit 77
fi
mkdir -p "$work"
cd "$root/python" || exit 1
start=$(date +%s)
# setup.py build: the package's Python files and data (build_py) and the extension (build_ext).
MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py build --build-lib "$work/lib" --build-temp "$work/tmp" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  echo "ferry_vllm: the build failed (log: $work/build.log)"
  exit 1
}
grep '^ferry-vllm ' "$work/build.log"
echo "ferry_vllm: built in $(( $(date +%s) - start )) s ($work/build.log)"
cd "$work" && PYTHONPATH="$work/lib" "$py" -m pytest -p no:cacheprovider -q -rs "$root/python/tests"
