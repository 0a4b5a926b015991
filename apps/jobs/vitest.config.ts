import { defineConfig } from 'vitest/config';
import { testReporters } from '../../scripts/vitest-reporters.mjs';

export default defineConfig({
  test: { ...testReporters(), include: ['src/**/*.test.ts', 'test/**/*.test.ts'], testTimeout: 30_000, hookTimeout: 60_000 },
});
