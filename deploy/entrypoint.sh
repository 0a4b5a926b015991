#!/bin/sh
# Entry point of every image. A first argument that is not a command on PATH goes to the image's app:
# gatewayctl in the gatewayctl image (`docker run IMAGE accounts list`), node otherwise (as the
# node image's own entry point does: `docker run IMAGE --version`). A command runs as given
# (`node ... apps/<app>/dist/main.js`, as compose and the chart start services; `gatewayctl ...`).
set -e
if [ "$#" -gt 0 ] && ! command -v "$1" >/dev/null 2>&1; then
  if [ "$GATEWAY_APP" = gatewayctl ]; then set -- gatewayctl "$@"; else set -- node "$@"; fi
fi
exec "$@"
