#!/usr/bin/env bash
# One call on a lent H200 (the `device` tool): the GPU path of `executor bench-kernels` and a cross-check of its
# timing against CUDA events (triton's do_bench). The machine has torch but not this project's other needs: they
# travel as wheels in .whl/ (studies/kernels/h200/README.md says which). Run from the repository root.
set -u
out=${OUT:-/tmp/h200-out}
mkdir -p "$out/tables"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total --format=csv \
  > "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" \
  | tee -a "$out/gpu.txt"
timeout 240 python3 -m executor bench-kernels --hardware h200 --out "$out/tables" --ops gemm,attention,grouped_gemm \
  2>&1 | tee "$out/bench.log"
timeout 75 python3 studies/kernels/h200/crosscheck.py "$out/crosscheck.txt" 2>&1 | tee -a "$out/bench.log"
