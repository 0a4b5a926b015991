import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startFuzzStack, type FuzzStack } from './invariant-fuzz/fuzz-stack.js';
import { invariantProperty, KNOWN_HOLES, type KnownHoles, type RunStats } from './invariant-fuzz/invariant-fuzz.js';

// Issue 35: the ledger's invariants checked by a property-based fuzzer against one whole stack (see
// invariant-fuzz/). CI runs a fixed seed for a bounded time; `npm run fuzz -- --minutes N [--seed S]`
// runs the same property for longer through this file (FUZZ_MINUTES, FUZZ_SEED, FUZZ_HOLES).

const minutes = Number(process.env.FUZZ_MINUTES ?? '1.5');
const seed = Number(process.env.FUZZ_SEED ?? '35');
// FUZZ_HOLES=name,... turns on a shape KNOWN_HOLES leaves out while its hole is being fixed (none today).
const holes: KnownHoles = { ...KNOWN_HOLES };
for (const name of (process.env.FUZZ_HOLES ?? '').split(',').filter(Boolean)) {
  if (!(name in holes)) throw new Error(`FUZZ_HOLES: no known hole ${name} (${Object.keys(holes).join(', ')})`);
  holes[name as keyof KnownHoles] = true;
}
const budgetMs = minutes * 60_000;
// FUZZ_PATH (with FUZZ_SEED): replay the counterexample fast-check printed, then shrink it further.
const path = process.env.FUZZ_PATH;

describe('the ledger invariants under generated traffic (issue 35)', () => {
  let fuzz: FuzzStack;
  beforeAll(async () => {
    fuzz = await startFuzzStack();
  }, 120_000);
  afterAll(async () => {
    await fuzz?.stop();
  });

  it(`keeps every invariant for a fixed seed (${seed}) for ${minutes} min`, async () => {
    const stats: RunStats = { runs: 0, requests: 0, failures: 0, outcomes: {}, exactCharges: 0 };
    const started = Date.now();
    const progress = setInterval(() => {
      console.log(`[fuzz] seed ${seed}: ${stats.runs} runs, ${stats.requests} requests, ${stats.failures} failing runs, ${Math.round((Date.now() - started) / 1000)} s`);
      console.log(`[fuzz] charges checked exactly against the upstream's usage: ${stats.exactCharges}; answers: ${JSON.stringify(stats.outcomes)}`);
      console.log(`[fuzz] upstream requests for several choices: ${JSON.stringify(stats.choiceRequests ?? {})}`);
    }, process.env.FUZZ_MINUTES ? 30_000 : 60_000);
    try {
      await fc.assert(invariantProperty(fuzz, stats, { holes, logFailures: true }), {
        seed,
        ...(path ? { path } : {}),
        numRuns: 1_000_000,
        interruptAfterTimeLimit: budgetMs,
        // Shrinking reruns sequences on the stack; the time limit bounds it too, and the failure printed
        // is the smallest sequence found by then.
        verbose: 1,
      });
    } finally {
      clearInterval(progress);
      await stats.current?.catch(() => undefined);
      console.log(`[fuzz] done: seed ${seed}, ${stats.runs} runs, ${stats.requests} requests, ${stats.failures} failing runs, ${Math.round((Date.now() - started) / 1000)} s`);
      console.log(`[fuzz] charges checked exactly against the upstream's usage: ${stats.exactCharges}; answers: ${JSON.stringify(stats.outcomes)}`);
      console.log(`[fuzz] upstream requests for several choices: ${JSON.stringify(stats.choiceRequests ?? {})}`);
    }
  }, budgetMs * 3 + 120_000);
});
