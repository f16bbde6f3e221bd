#!/usr/bin/env bash
# A length forced past what the model's config allows (the target holds 128 positions).
set -euo pipefail
MODEL=../../fixtures/vllm-models/target
export VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
exec vllm serve "$MODEL" \
  --max-model-len 32k \
  --port "${PORT:-8000}"
