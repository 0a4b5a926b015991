import { defineConfig } from 'vitest/config';
import { testReporters } from '../../scripts/vitest-reporters.mjs';

export default defineConfig({
  test: {
    ...testReporters(),
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    // Chaos tests restart the machine's NATS: they run alone, through vitest.chaos.config.ts (npm run test-chaos).
    exclude: ['**/node_modules/**', 'test/**/*.chaos.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
