#!/usr/bin/env bash
# Build draftguard's images with podman, offline-friendly: the bot target on a Debian bookworm base made
# locally with debootstrap (no registry needed), the runner target on a vLLM image when one is given.
#
#   scripts/build-images.sh                 # bot only (Debian base built here if missing)
#   RUNNER_BASE_IMAGE=vllm/vllm-openai:v0.33.0 scripts/build-images.sh runner
#
# Needs (Debian/Ubuntu, as root): apt-get install podman debootstrap. pip inside the build reaches PyPI
# directly (PIP_CERT, when set, is passed as a build secret); set PIP_INDEX_URL to use a mirror.
# Prints build time and image size.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-localhost/debian-python:bookworm}
ROOTFS=${ROOTFS:-/tmp/draftguard-rootfs}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
targets=("${@:-bot}")

if [[ "$BASE_IMAGE" == localhost/debian-python:bookworm ]] && ! podman image exists "$BASE_IMAGE"; then
  echo "== making $BASE_IMAGE with debootstrap ($MIRROR)"
  if [[ ! -x "$ROOTFS/usr/bin/python3" ]]; then
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip bookworm "$ROOTFS" "$MIRROR"
  fi
  # apt's lists and caches are not needed in a base that only runs pip.
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb
  tar -C "$ROOTFS" -c . | podman import - "$BASE_IMAGE"
fi

build_args=(--isolation chroot --build-arg "BASE_IMAGE=$BASE_IMAGE")
[[ -n "${RUNNER_BASE_IMAGE:-}" ]] && build_args+=(--build-arg "RUNNER_BASE_IMAGE=$RUNNER_BASE_IMAGE")
[[ -n "${PIP_INDEX_URL:-}" ]] && build_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")
# Behind a TLS-inspecting proxy pip needs this machine's CA bundle; it goes in as a build secret.
[[ -n "${PIP_CERT:-}" && -f "${PIP_CERT}" ]] && build_args+=(--secret "id=pip_cert,src=$PIP_CERT")

for target in "${targets[@]}"; do
  tag="draftguard-$target"
  echo "== podman build --target $target -t $tag"
  start=$(date +%s)
  podman build "${build_args[@]}" --target "$target" -t "$tag" .
  took=$(( $(date +%s) - start ))
  size=$(podman image inspect "$tag" --format '{{.Size}}')
  base_size=$(podman image inspect "$BASE_IMAGE" --format '{{.Size}}' 2>/dev/null || echo 0)
  printf '== %s: built in %ss, %s MB (base %s MB, draftguard adds %s MB)\n' "$tag" "$took" \
    "$(( size / 1000000 ))" "$(( base_size / 1000000 ))" "$(( (size - base_size) / 1000000 ))"
done
