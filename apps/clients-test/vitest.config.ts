import { defineConfig } from 'vitest/config';
import { testReporters } from '../../scripts/vitest-reporters.mjs';

// Each test runs a real client process (Claude Code, Codex) or SDK tool loop against a whole stack:
// generous bounds for a loaded 2-core machine, and one file at a time so the clients do not compete.
export default defineConfig({
  test: { ...testReporters(), include: ['test/**/*.test.ts'], testTimeout: 180_000, hookTimeout: 120_000, fileParallelism: false },
});
