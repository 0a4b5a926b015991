#!/usr/bin/env node
// The `gatewayctl` command (`npx gatewayctl` in this repository). A committed, executable file: the
// build writes dist/main.js without the executable bit, and npm can only set it on files that exist
// when it links bins, before the first build.
import '../dist/main.js';
