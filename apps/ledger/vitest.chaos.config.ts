import { defineConfig } from 'vitest/config';
import { testReporters } from '../../scripts/vitest-reporters.mjs';

// Chaos tests kill processes and restart the machine's nats-server: one file at a time, nothing else
// alongside. `npm run test-chaos` builds the ledger first (the test runs dist/main.js as the settler).
export default defineConfig({
  test: {
    ...testReporters(),
    include: ['test/**/*.chaos.test.ts'],
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
