#!/usr/bin/env bash
# One command to check a GPU runner (under five minutes on one GPU):
#
#   bench/gpu_check.sh [OUT.md]        # default: bench/results/gpu-check-<UTC time>.md
#
# 1. the reference backend on CUDA against the tiny fixtures (tests/fixtures/models): the healthy drafter
#    and the three seeded faults, float32 (must match the CPU's τ) and bfloat16 (what real runs use);
# 2. the same healthy run on CPU in the same session: the baseline for the CUDA speed-up and for τ;
# 3. where vLLM is installed: `--backend both` on the healthy drafter and the window-lost one, so the
#    differential verdict is exercised on a real engine;
# 4. EAGLE-3 (issue 33): the shipped head and its faults (tests/fixtures/vllm-models, made by
#    tests/fixtures/make_eagle3_models.py) on the device, and `--backend both` on the healthy head
#    where vLLM is installed;
# 5. with GPU_CHECK_HUB=1 (the Hub reachable, HF_TOKEN set for a gated target): a real public EAGLE-3
#    pair, by default the EAGLE authors' head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on its target
#    meta-llama/Llama-3.1-8B-Instruct (gated: accept Meta's licence first), under the reference
#    (bfloat16) and vLLM; GPU_CHECK_EAGLE3_TARGET / GPU_CHECK_EAGLE3_DRAFTER name another pair. The
#    reference reads safetensors only: a head that ships pytorch_model.bin alone is recorded as refused.
#
# Every run is a separate `draftguard accept` process with a time limit; a failing run is recorded
# (exit code and its one-line reason) and the check goes on. The file is markdown, ready for the
# README's performance section. GPU_CHECK_DEVICE=cpu runs the whole script on CPU (to test the script);
# GPU_CHECK_DRY_RUN=1 writes each run's command into the table instead of running it.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
FIX=tests/fixtures/models
EAGLE_FIX=tests/fixtures/vllm-models
MTP_FIX=tests/fixtures/mtp-models
EAGLE3_TARGET=${GPU_CHECK_EAGLE3_TARGET:-meta-llama/Llama-3.1-8B-Instruct}
EAGLE3_DRAFTER=${GPU_CHECK_EAGLE3_DRAFTER:-yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}
DRY=${GPU_CHECK_DRY_RUN:-0}
NEW_TOKENS=${GPU_CHECK_NEW_TOKENS:-32}
LIMIT=${GPU_CHECK_RUN_LIMIT:-150}
OUT=${1:-bench/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ).md}
mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$(date +%s)

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
versions=$("$PY" - <<'EOF'
import importlib.metadata as md
out = []
for name in ("draftguard", "torch", "transformers", "vllm"):
    try:
        out.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        out.append(f"{name} -")
print(", ".join(out))
EOF
)
cuda=$("$PY" -c "import torch; print(torch.version.cuda or '-', torch.cuda.is_available())" 2>/dev/null || echo "- False")
has_vllm=$("$PY" -c "import vllm" >/dev/null 2>&1 && echo yes || echo no)

{
  echo "## GPU check, $(date -u +%Y-%m-%d' '%H:%M' UTC')"
  echo
  echo "- GPU: ${gpu:-none found by nvidia-smi}; CUDA (torch): ${cuda}"
  echo "- ${versions}; host: $(uname -m), $(nproc) CPUs"
  echo "- fixtures: tests/fixtures/models, $(wc -l < $FIX/prompts.jsonl) prompts x ${NEW_TOKENS} new tokens, greedy, bar τ ≥ 3, every prompt run (no early stop)"
  echo
  echo "| run | backend | device | dtype | τ | per-position acceptance | tokens/s | wall s | verdict / exit |"
  echo "|---|---|---|---|---:|---|---:|---:|---|"
} > "$OUT"

# run NAME BACKEND DEVICE DTYPE DRAFTER [extra accept options...]
# (RUN_FIX: the fixtures' folder, default $FIX; RUN_TARGET / RUN_DRAFTER: a target and a drafter by
# name instead, for the Hub pair; RUN_ARGS: the prompts and the bar, default the fixtures' and τ ≥ 3)
run() {
  local name=$1 backend=$2 device=$3 dtype=$4 drafter=$5
  shift 5
  local json="$WORK/$name.json" err="$WORK/$name.err" t0 rc wall fix=${RUN_FIX:-$FIX}
  local cmd=(timeout "$LIMIT" "$PY" -m draftguard accept --target "${RUN_TARGET:-$fix/target}"
    --drafter "${RUN_DRAFTER:-$fix/$drafter}" ${RUN_ARGS:---prompts $FIX/prompts.jsonl --min-acceptance-length 3}
    --max-new-tokens "$NEW_TOKENS" --no-early-stop --quiet
    --backend "$backend" --device "$device" --dtype "$dtype" --format json --settings "$WORK" "$@")
  if [ "$DRY" = 1 ]; then
    echo "| $name | $backend | $device | $dtype | - | - | - | - | dry run: ${cmd[*]:2} |" >> "$OUT"
    return
  fi
  t0=$(date +%s.%N)
  "${cmd[@]}" > "$json" 2> "$err"
  rc=$?
  wall=$("$PY" -c "import time; print(f'{time.time() - $t0:.1f}')")
  "$PY" - "$json" "$err" "$name" "$backend" "$device" "$dtype" "$rc" "$wall" >> "$OUT" <<'EOF'
import json, sys
path, err, name, backend, device, dtype, rc, wall = sys.argv[1:]
try:
    r = json.load(open(path))
except (OSError, ValueError):
    lines = [l for l in open(err, errors="replace").read().splitlines() if l.strip()]
    why = (lines[-1] if lines else "no output").replace("|", "/")[:200]
    print(f"| {name} | {backend} | {device} | {dtype} | - | - | - | {wall} | exit {rc}: {why} |")
    sys.exit(0)
tau = r["mean_acceptance_length"]
pos = ", ".join(f"{x:.2f}" for x in r["per_position_acceptance"])
verdict = r["verdict"]["status"]
diff = (r.get("run") or {}).get("differential")
if diff:
    verdict = f"{diff['kind']} (reference τ {diff['reference_tau']:.2f})"
print(f"| {name} | {backend} | {device} | {dtype} | {tau:.2f} | {pos} | {r['tokens_per_second']:.0f} | {wall} | {verdict}, exit {rc} |")
EOF
  echo "$name: exit $rc in ${wall}s" >&2
}

label() { if [ "$1" = drafter ]; then echo healthy; else echo "${1#drafter-}"; fi; }

run healthy-cpu reference cpu float32 drafter
for drafter in drafter drafter-window-lost drafter-layers-off drafter-wrong-mask; do
  run "$(label "$drafter")-$DEVICE-fp32" reference "$DEVICE" float32 "$drafter"
done
run "healthy-$DEVICE-bf16" reference "$DEVICE" bfloat16 drafter
if [ "$has_vllm" = yes ] && [ "$DEVICE" != cpu ]; then
  # The fixture target is tiny: keep vLLM's context and memory small, and skip CUDA graphs (startup).
  for drafter in drafter drafter-window-lost; do
    run "$(label "$drafter")-vllm-both" both "$DEVICE" float32 "$drafter" \
      --max-model-len 128 --gpu-memory-utilization 0.3 --enforce-eager
  done
else
  echo "| vLLM | - | - | - | - | - | - | - | not run: $([ "$has_vllm" = yes ] && echo "device is $DEVICE" || echo "vLLM not installed") |" >> "$OUT"
fi

# EAGLE-3: the shipped head (τ 4.00 on CPU with 3 draft tokens, so its bar is τ ≥ 3.9) and its seeded
# faults, which must fail the bar (the shifted ids too: vLLM runs aux id 0, the embeddings, and so does
# the reference, DG103 beside its τ); the speculators layout of the same head (must pass) and the
# faults made from it without training (make_eagle3_models.py --derived: the format's default norm
# order, a head without d2t run with vLLM's zero map).
EAGLE_ARGS="--prompts $FIX/prompts.jsonl --min-acceptance-length 3.9"
for head in eagle3 eagle3-no-ids eagle3-bad-d2t eagle3-ids-shifted eagle3-speculators \
    eagle3-speculators-norm-default eagle3-no-d2t; do
  RUN_FIX=$EAGLE_FIX RUN_ARGS=$EAGLE_ARGS run "$head-$DEVICE-fp32" reference "$DEVICE" float32 "$head"
done
if [ "$has_vllm" = yes ] && [ "$DEVICE" != cpu ]; then
  RUN_FIX=$EAGLE_FIX RUN_ARGS=$EAGLE_ARGS run "eagle3-vllm-both" both "$DEVICE" float32 eagle3 \
    --max-model-len 128 --gpu-memory-utilization 0.3 --enforce-eager
  RUN_FIX=$EAGLE_FIX RUN_ARGS=$EAGLE_ARGS run "eagle3-speculators-vllm-both" both "$DEVICE" float32 \
    eagle3-speculators --max-model-len 128 --gpu-memory-utilization 0.3 --enforce-eager
fi
# MTP (issue 43): the shipped MiMo target's own MTP layer (τ 2.00 on CPU with 1 draft token, so its bar
# is τ ≥ 1.8) and its two faulty copies (MTP shard dropped, MTP layer left FP8), which must fail the
# bar with the diagnosis mtp-weights; `--backend both` on the healthy one. A model with MTP layers is
# its own target and drafter. DeepSeek-V3's MoE MTP layer (dsv3-moe, τ 2.00 on CPU) on the reference: its
# experts and vLLM's grouped_topk routing on CUDA (vLLM's MLA on the tiny fixture is not tried here).
# GLM-4.5's (glm4-moe, τ 2.00), ERNIE-4.5's (ernie45, τ 1.88) and MiMo-V2-Flash's (mimo-v2-flash, τ 1.89)
# on the reference, and `--backend both` on each: on CPU vLLM matched GLM-4.5 and MiMo-V2-Flash token for
# token, and ran ERNIE-4.5 without its e_score_correction_bias (the CPU router's bug; CUDA's router
# applies it, so the two backends should agree there).
MTP_ARGS="--prompts $FIX/prompts.jsonl --min-acceptance-length 1.8"
for model in mimo mimo-mtp-dropped mimo-mtp-fp8 dsv3-moe glm4-moe ernie45 mimo-v2-flash; do
  RUN_TARGET=$MTP_FIX/$model RUN_DRAFTER=$MTP_FIX/$model RUN_ARGS=$MTP_ARGS \
    run "mtp-$model-$DEVICE-fp32" reference "$DEVICE" float32 -
done
if [ "$has_vllm" = yes ] && [ "$DEVICE" != cpu ]; then
  for model in mimo glm4-moe ernie45 mimo-v2-flash; do
    RUN_TARGET=$MTP_FIX/$model RUN_DRAFTER=$MTP_FIX/$model RUN_ARGS=$MTP_ARGS run "mtp-$model-vllm-both" both \
      "$DEVICE" float32 - --max-model-len 128 --gpu-memory-utilization 0.3 --enforce-eager
  done
fi
if [ "${GPU_CHECK_HUB:-0}" = 1 ]; then
  # The real pair: built-in prompts, no bar (its τ is the figure), bfloat16 as it is served.
  for backend in reference vllm; do
    RUN_TARGET=$EAGLE3_TARGET RUN_DRAFTER=$EAGLE3_DRAFTER RUN_ARGS="--prompts builtin" \
      run "eagle3-hub-$backend" "$backend" "$DEVICE" bfloat16 - --max-model-len 4096
  done
else
  echo "| eagle3-hub | - | - | - | - | - | - | - | not run: GPU_CHECK_HUB=1 runs $EAGLE3_DRAFTER on $EAGLE3_TARGET |" >> "$OUT"
fi

# The CUDA speed-up and τ agreement against the CPU baseline of the same session.
"$PY" - "$OUT" "$DEVICE" >> "$OUT" <<'EOF'
import sys
out, device = sys.argv[1:]
rows = {}
for line in open(out):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 9 and cells[4] not in ("τ", "-", "---:"):
        rows[cells[0]] = cells
cpu, gpu = rows.get("healthy-cpu"), rows.get(f"healthy-{device}-fp32")
print()
if cpu and gpu:
    print(f"Healthy drafter, reference backend: τ {gpu[4]} on {device} (float32) against {cpu[4]} on CPU; "
          f"{float(gpu[6]) / max(float(cpu[6]), 1e-9):.1f}x the CPU's tokens/s ({gpu[6]} against {cpu[6]}).")
else:
    print("Healthy drafter: no CPU/GPU pair to compare (a run failed; see the table).")
EOF
echo >> "$OUT"
echo "Whole check: $(( $(date +%s) - started )) s." >> "$OUT"
cat "$OUT"
