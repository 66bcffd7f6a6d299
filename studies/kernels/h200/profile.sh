#!/usr/bin/env bash
# One call on a lent GPU (the `device` tool): the GPU path of `executor launch --profile` (profile_check.py). The
# machine has torch but not this project's other needs: they travel as wheels in .whl/ (README.md). Run from the
# repository root.
set -u
out=${OUT:-/tmp/h200-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" \
  | tee "$out/gpu.txt"
timeout 240 python3 studies/kernels/h200/profile_check.py "$out" 2>&1 | tee "$out/profile.log"
