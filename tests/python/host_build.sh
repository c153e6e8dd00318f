#!/bin/sh
# Builds ferry_vllm's core on ferry's host backend (FERRY_VLLM_BACKEND=host) into $WORK, against
# the torch that $FERRY_PYTHON imports, and runs python/tests there. Exits 77 (ctest: skipped)
# with the reason when that interpreter has no torch or no pytest.
set -u
py=${FERRY_PYTHON:-python3}
root=${FERRY_ROOT:?}
work=${WORK:?}
if ! err=$("$py" -c "import torch" 2>&1); then
  echo "SKIP: ferry_vllm needs torch: $py -c 'import torch' failed: $(printf '%s\n' "$err" | tail -n 1)"
  exit 77
fi
if ! err=$("$py" -c "import pytest, numpy" 2>&1); then
  echo "SKIP: ferry_vllm's tests need pytest and numpy: $(printf '%s\n' "$err" | tail -n 1)"
  exit 77
fi
mkdir -p "$work"
cd "$root/python" || exit 1
FERRY_VLLM_BACKEND=host MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py -q build_ext \
  --build-lib "$work/lib" --build-temp "$work/tmp" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  echo "ferry_vllm: the host build failed (log: $work/build.log)"
  exit 1
}
cp ferry_vllm/__init__.py ferry_vllm/__init__.pyi ferry_vllm/py.typed "$work/lib/ferry_vllm/"
cd "$work" && PYTHONPATH="$work/lib" "$py" -m pytest -p no:cacheprovider -q "$root/python/tests"
