#!/bin/sh
# Runs a command on the Node major of package.json's engines.node: `sh scripts/node-major.sh nx …`.
# When the machine's node is another major, node-major.mjs fetches that major once into .data/ and
# its bin dir goes first on PATH, so the command and every child process (nx, vitest, npm, spawns of
# process.execPath) run on it. exec: no wrapper process stays between npm and the command.
set -e
bin=$(node "$(dirname "$0")/node-major.mjs")
if [ -n "$bin" ]; then
  PATH="$bin:$PATH"
  export PATH
fi
exec "$@"
