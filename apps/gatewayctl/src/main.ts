#!/usr/bin/env node
import { runGatewayctl } from './index.js';

process.exitCode = await runGatewayctl(process.argv.slice(2), {
  env: process.env,
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
});
