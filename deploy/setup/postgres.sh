#!/usr/bin/env bash
# Installs the PostgreSQL 15 server binaries (Debian package postgresql-15) when they are missing,
# so the capture tests never skip on a fresh machine. Idempotent; needs root (or sudo) and apt.
set -euo pipefail

PG_BIN="${TXBUFFER_PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ]; then
  echo "postgres: server binaries present in $PG_BIN"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "postgres: $PG_BIN/initdb is missing and this is not root (no sudo): install postgresql-15" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null; then
  echo "postgres: $PG_BIN/initdb is missing and apt-get is not available: install PostgreSQL 15" >&2
  exit 1
fi

echo "postgres: installing postgresql-15 (Debian package)"
export DEBIAN_FRONTEND=noninteractive
# The package's post-install creates and starts a default cluster; the tests start their own, so
# policy-rc.d keeps services from starting and the default cluster is not created.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null && $SUDO chmod +x "$POLICY" && CREATED_POLICY=1
fi
trap '[ "$CREATED_POLICY" = 1 ] && $SUDO rm -f "$POLICY"' EXIT
$SUDO mkdir -p /etc/postgresql-common
echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
test -x "$PG_BIN/initdb" || { echo "postgres: installed, but $PG_BIN/initdb is still missing" >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "postgres: the package did not create the postgres user" >&2; exit 1; }
echo "postgres: installed $("$PG_BIN/postgres" --version)"
