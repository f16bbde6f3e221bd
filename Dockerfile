# syntax=docker/dockerfile:1
# draftguard images. Two targets:
#
#   bot     slim, no torch: `draftguard serve` (webhooks + queue) and CPU workers
#           podman build --target bot -t draftguard-bot .
#   runner  on a vLLM image: `draftguard worker --queue gpu` and `draftguard accept --backend vllm|both`
#           podman build --target runner -t draftguard-runner .
#
# The base images are build arguments (a local base works offline: see scripts/build-images.sh).
# Each target ends with a smoke step that fails the build when the installed CLI does not work.

ARG BASE_IMAGE=python:3.12-slim-bookworm
# The vLLM the backend was checked against (0.33.0); DFlash needs a recent vLLM.
ARG RUNNER_BASE_IMAGE=vllm/vllm-openai:v0.33.0

# ---------------------------------------------------------------------------------------------------
# bot: a virtual environment built in one stage and copied into a clean one, so neither pip's cache
# nor the sources end up in the image.
FROM ${BASE_IMAGE} AS bot-build
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/draftguard
COPY pyproject.toml README.md constraints.txt /src/
COPY draftguard /src/draftguard
# constraints.txt pins what CI tests (transformers, huggingface_hub, the bot's libraries); the bot
# extra brings no torch, and the light check must never find one.
# A network behind a TLS-inspecting proxy passes its CA bundle as the optional secret `pip_cert`
# (podman/docker build --secret id=pip_cert,src=FILE); it is used by pip here and never stored.
RUN --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && /opt/draftguard/bin/pip install -c /src/constraints.txt "/src[bot]" \
 && ! /opt/draftguard/bin/python -c "import torch" 2>/dev/null \
 && /opt/draftguard/bin/pip uninstall -q -y pip setuptools

FROM ${BASE_IMAGE} AS bot
COPY --from=bot-build /opt/draftguard /opt/draftguard
COPY examples /opt/draftguard-examples
ENV PATH=/opt/draftguard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRANSFORMERS_VERBOSITY=error \
    DRAFTGUARD_QUEUE=sqlite:////var/lib/draftguard/queue.db \
    HF_HOME=/var/lib/draftguard/hf
# Smoke: the CLI starts, and the light check finds the shipped example's seeded error (exit 1 is the
# expected answer: 0 would mean the check missed it, 2 or 3 that it could not run).
RUN draftguard --version \
 && { draftguard check /opt/draftguard-examples/qwen3-swa-drafter --format json > /tmp/smoke.json; rc=$?; \
      test "$rc" -eq 1 || { echo "smoke: light check exited $rc, expected 1"; exit 1; }; } \
 && python3 -c "import json; r = json.load(open('/tmp/smoke.json')); assert r['summary']['error'] >= 1 and not r['errors'], r" \
 && rm /tmp/smoke.json \
 && (useradd --system --home-dir /var/lib/draftguard --create-home draftguard 2>/dev/null \
     || adduser --system --home /var/lib/draftguard draftguard)
USER draftguard
WORKDIR /var/lib/draftguard
EXPOSE 8080
CMD ["draftguard", "serve", "--host", "0.0.0.0", "--port", "8080"]

# ---------------------------------------------------------------------------------------------------
# runner: vLLM's image already holds CUDA, torch and vLLM. draftguard goes on top without moving them:
# the versions the base ships are frozen into a constraints file first.
FROM ${RUNNER_BASE_IMAGE} AS runner
ARG PIP_INDEX_URL=https://pypi.org/simple
# vLLM's images install into the system Python; newer bases mark it externally managed (PEP 668).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1
COPY pyproject.toml README.md /src/
COPY draftguard /src/draftguard
COPY examples /opt/draftguard-examples
RUN --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && { python3 -m pip freeze | grep -iE '^(torch|torchvision|torchaudio|vllm|transformers|tokenizers|huggingface[-_]hub|safetensors|numpy)==' || true; } > /tmp/base-pins.txt \
 && python3 -m pip install -c /tmp/base-pins.txt "/src[runner,vllm,bot]" \
 && rm -rf /src /tmp/base-pins.txt
ENV PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error HF_HOME=/var/lib/draftguard/hf
# Smoke: the CLI, the light check on the shipped example (exit 1 expected), and vLLM importable with
# the metric reader the backend relies on. No GPU is needed for any of it.
RUN draftguard --version \
 && { draftguard check /opt/draftguard-examples/qwen3-swa-drafter --format json > /dev/null; rc=$?; \
      test "$rc" -eq 1 || { echo "smoke: light check exited $rc, expected 1"; exit 1; }; } \
 && python3 -c "import vllm, vllm.v1.metrics.reader as r; r.Counter; r.Vector; print('vllm', vllm.__version__)" \
 && draftguard accept --help > /dev/null
# vLLM's image starts `vllm serve`; this one is a GPU queue worker (settings in runner/draftguard-runner.env).
ENTRYPOINT []
CMD ["draftguard", "worker", "--queue", "gpu"]
