#!/bin/bash
# cudafix on a real GPU venv, where the GPU backends really load: the checks no CPU host makes.
#
#   bash benchmarks/gpu_host.sh [VENV] [WHEELS]
#
# VENV (default /opt/torch/.venv) holds torch, jax and cupy for CUDA; it is only read: each
# change is made on a hard-linked copy under $WORK (default /tmp/cudafix-gpu). cudafix runs
# from this checkout in a venv of its own, made with VENV's interpreter; its dependencies
# come from WHEELS (a directory of wheels: pydantic, pydantic-core, annotated-types,
# typing-inspection, typing-extensions, uv, filelock, click, packaging), for a host with no
# index. The oracle is each framework's own GPU work: a matrix product (torch), an FFT (jax,
# cupy), an elementwise kernel cupy compiles with NVRTC. Output: $OUT/log.txt (or stdout).
set -u
V=${1:-/opt/torch/.venv}
WHEELS=${2:-.whl}
WORK=${WORK:-/tmp/cudafix-gpu}
export PYTHONUNBUFFERED=1 UV_OFFLINE=1 NO_COLOR=1
[ -n "${OUT:-}" ] && exec > >(tee -a "$OUT/log.txt") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
timed() { /usr/bin/time -f '%e s %M KiB' "$@"; echo "exit $?"; }

step setup
nvidia-smi -L
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$V/bin/python" -m venv --without-pip "$WORK/cf" || exit 1
SITE=$("$WORK/cf/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$V/bin/python" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    "$WHEELS"/*.whl || exit 1
cp -r cudafix "$SITE"/ || exit 1
CF="$WORK/cf/bin/python -m cudafix"
$CF -V

gpu() {  # what each framework does on the GPU, in venv $1
    local P=$1/bin/python
    timeout 120 "$P" -c "import torch; x = torch.ones(64, 64, device='cuda'); \
print('torch ok', float((x @ x).sum()), torch.backends.cudnn.version())" 2>&1 | tail -1
    timeout 120 "$P" -c "import jax, jax.numpy as jnp; print('jax', jax.devices(), \
float(jnp.fft.fft(jnp.ones(8)).real.sum()))" 2>&1 | tail -1
    timeout 120 "$P" -c "import cupy as cp; print('cupy ok', \
float(cp.fft.fft(cp.ones(8)).real.sum()), int((cp.arange(5) * 3).sum()))" 2>&1 | tail -1
}

step "the venv as it is"
gpu "$V"
T="$WORK/venv"
cp -al "$V" "$T"
timed $CF doctor --venv "$T"
for how in "" -q -v --json; do timed $CF doctor --venv "$T" $how > /dev/null; done
for d in nvidia-cudnn-cu13 nvidia-cufft nvidia-cuda-nvrtc nvidia-cusparselt-cu13 cupy-cuda13x; do
    step "dry run: remove $d"
    timed $CF remove "$d" --venv "$T" --dry-run --no-fetch
done

for d in nvidia-cufft nvidia-cuda-nvrtc; do
    B="$WORK/without-$d"
    step "a copy after a plain uv pip uninstall $d"
    cp -al "$V" "$B"
    "$WORK/cf/bin/python" -m uv pip uninstall --python "$B/bin/python" "$d"
    gpu "$B"
    timed $CF doctor --venv "$B"
done

step "a transaction on the copy: remove cupy-cuda13x, then undo it"
timed $CF remove cupy-cuda13x --venv "$T" --yes
"$T/bin/python" -c 'import cupy' 2>&1 | tail -1
timed $CF undo last --venv "$T" --yes
gpu "$T"
$CF history --venv "$T"
step end
