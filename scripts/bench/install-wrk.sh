#!/usr/bin/env bash
# The HTTP load generator of `make bench-api` (and so of `make bench`): Debian's wrk, installed
# when missing, like the stack's PostgreSQL (scripts/stack/postgres.sh). Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../stack/common.sh"

command -v wrk >/dev/null 2>&1 && exit 0
[[ $EUID -eq 0 ]] || die "wrk is missing; install it: sudo apt-get install wrk"
log "installing wrk from Debian packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq wrk >&2
