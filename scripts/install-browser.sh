#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver for the browser tests (no browser download at
# test time). Idempotent: does nothing when both are already installed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "chromium and chromedriver present: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
chromium --version
