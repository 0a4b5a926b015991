#!/usr/bin/env bash
# Builds chart-render (the Go sources beside this script) with Debian's Go toolchain and Debian's Go
# libraries, offline, and prints the binary's path. The packages: install-renderer-deps.sh (one up).
#
# GOPATH mode, not modules: Debian installs its Go libraries as a GOPATH tree (/usr/share/gocode) and
# no module proxy is reachable. An import of a /v3 module path resolves in GOPATH mode only from code
# that itself sits in a GOPATH beside a go.mod, hence the copy into a private GOPATH under .build/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/.build"
source_dir="$build/gopath/src/chart-render"
binary="$build/chart-render"

if ! command -v go >/dev/null 2>&1; then
  echo "chart-render: no Go toolchain; run helm/gateway/ci/install-renderer-deps.sh (Debian packages)" >&2
  exit 1
fi
mkdir -p "$source_dir"
rm -f "$source_dir"/*.go
cp "$here"/*.go "$source_dir"/
printf 'module chart-render\n\ngo 1.19\n' > "$source_dir/go.mod"
(
  cd "$source_dir"
  GO111MODULE=off GOFLAGS= GOPATH="$build/gopath:/usr/share/gocode" GOCACHE="$build/go-cache" \
    go build -o "$binary" .
)
echo "$binary"
