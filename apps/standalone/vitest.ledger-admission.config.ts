import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { testReporters } from '../../scripts/vitest-reporters.mjs';

/**
 * The second end-to-end pass, with per-request `Ledger.Admit` at the edge (GATEWAY_TEST_ADMISSION=ledger;
 * `npm test` sets it). It runs the files whose outcome depends on how the edge admits and settles: who is
 * refused (402, 429, 403 for a tier), what is held and charged, key and account limits, failover's
 * admission, streams cut or lost, and crashes with requests in flight. Files about wire shapes, catalogs,
 * files, roles, tracing, logs and the jobs service's own admission run once, in the leased pass (the
 * product default): admission mode does not change what they check. Running all 85 files twice cost about
 * 22 of CI's 60 minutes.
 */
const ADMISSION_FILES = [
  'answer-cost',
  'audio-hostile',
  'billing-integrity',
  'budgets',
  'chat-completions-create',
  'chat-completions-faults',
  'client-cancel-billing',
  'fallback-admission',
  'generation-lookup',
  'idempotency',
  'key-reset-expiry',
  'keys-revocation',
  'load-shedding',
  'messages-billing-errors',
  'model-fallbacks',
  'model-tiers',
  'prompt-caching',
  'rate-limits',
  'reasoning-usage',
  'replica-outage',
  'responses-websocket',
  'stream-completeness',
  'undelivered-answer',
  'usage-crash-routing-process',
  'usage-crash-single-process',
  'webhooks',
  'zero-completion-media',
];

const here = dirname(fileURLToPath(import.meta.url));
const include = ADMISSION_FILES.map((name) => `test/${name}.e2e.test.ts`);
const missing = include.filter((file) => !existsSync(join(here, file)));
if (missing.length > 0) throw new Error(`vitest.ledger-admission.config.ts lists files that do not exist: ${missing.join(', ')}`);

export default defineConfig({
  test: { ...testReporters(), include, testTimeout: 30_000, hookTimeout: 60_000 },
});
