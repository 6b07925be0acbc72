#!/usr/bin/env bash
# The status page's browser test drives Debian's Chromium with playwright-core (whose own browser
# download cannot reach the internet here). Installs it from Debian's packages when it is missing;
# `npm test` and `.ci/run` call this first. CHROMIUM_PATH names another binary and skips the install.
set -euo pipefail
if [ -n "${CHROMIUM_PATH:-}" ] || command -v chromium >/dev/null; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "crm-sync tests: Chromium is missing and there is no apt-get; install Chromium and set CHROMIUM_PATH" >&2
  exit 1
fi
SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
echo "crm-sync tests: installing Debian's chromium for the status page's browser test" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
