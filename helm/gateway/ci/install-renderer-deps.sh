#!/usr/bin/env bash
# What the chart test (apps/standalone/test/helm-chart.test.ts) renders the chart with: helm when it is on
# PATH, otherwise chart-render (renderer/), built from these Debian packages. Idempotent: installs only
# what is missing, and nothing when helm is there. Needs root (CI runs as root) and Debian's archive.
set -euo pipefail
packages=(golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev golang-github-xeipuuv-gojsonschema-dev)

if command -v helm >/dev/null 2>&1; then
  echo "== chart rendering: $(command -v helm)"
  exit 0
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "== chart rendering: chart-render on $(go version | cut -d' ' -f3) (Debian packages present)"
  exit 0
fi
echo "== installing for the chart renderer: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "== chart rendering: chart-render on $(go version | cut -d' ' -f3)"
