#!/usr/bin/env bash
# Install the pinned kustomize that scripts/deploy/validate.py prefers, from the Go module proxy,
# into ~/.cache/switchboard/bin (SWITCHBOARD_CACHE_DIR). Idempotent: a second run does nothing.
# Without Go, the validator falls back to `kustomize` or `kubectl kustomize` on the PATH.
set -euo pipefail

VERSION="${SWITCHBOARD_KUSTOMIZE_VERSION:-v5.7.1}"
CACHE_DIR="${SWITCHBOARD_CACHE_DIR:-$HOME/.cache/switchboard}"
BIN="$CACHE_DIR/bin/kustomize"

if [[ -x "$BIN" ]] && "$BIN" version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
if ! command -v go >/dev/null; then
  if command -v kustomize >/dev/null || command -v kubectl >/dev/null; then
    echo "install-kustomize: no Go; the validator will use $(command -v kustomize || command -v kubectl)" >&2
    exit 0
  fi
  echo "install-kustomize: needs Go (or kustomize/kubectl on the PATH)" >&2
  exit 1
fi
mkdir -p "$CACHE_DIR/bin"
echo "install-kustomize: go install sigs.k8s.io/kustomize/kustomize/v5@$VERSION (about a minute, once)" >&2
GOBIN="$CACHE_DIR/bin" GOFLAGS=-mod=mod go install "sigs.k8s.io/kustomize/kustomize/v5@$VERSION"
"$BIN" version >&2
