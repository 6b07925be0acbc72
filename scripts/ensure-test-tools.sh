#!/usr/bin/env bash
# Tools two tests need from Debian's packages, installed when missing (`npm test` and `.ci/run`
# call this first): Chromium, which the status page's browser test drives with playwright-core
# (whose own browser download cannot reach the internet here), and promtool (package prometheus),
# which unit-tests the alert rules. CHROMIUM_PATH names another browser binary and skips its install.
set -euo pipefail
missing=()
if [ -z "${CHROMIUM_PATH:-}" ] && ! command -v chromium >/dev/null; then missing+=(chromium); fi
if ! command -v promtool >/dev/null; then missing+=(prometheus); fi
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "crm-sync tests: ${missing[*]} missing and there is no apt-get; install Chromium (or set CHROMIUM_PATH) and promtool" >&2
  exit 1
fi
SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
echo "crm-sync tests: installing Debian's ${missing[*]} for the browser and alert-rule tests" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
