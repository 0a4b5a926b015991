import { describe, expect, it } from 'vitest';
import { DEFAULT_WEBHOOK_OPTIONS, backoffMs } from './webhook-dispatcher.js';

/*
 * Issue 42: "a webhook target down for 5 minutes receives every event afterwards". The delivery test
 * (test/webhooks.test.ts) takes a receiver down for 600 ms with test-short backoff; this one checks that
 * the default schedule carries the same outcome over a real 5-minute outage: the attempts it spends on
 * the outage leave most of the budget before the dead letter, and the first attempt after the receiver is
 * back comes within minutes, not hours. Only the oldest pending delivery of an endpoint is ever attempted,
 * so the events behind it wait without spending attempts of their own.
 */

const OUTAGE_MS = 5 * 60_000;
const { baseBackoffMs, maxBackoffMs, maxAttempts, deadAfterMs } = DEFAULT_WEBHOOK_OPTIONS;

/** The bounds backoffMs draws from for the retry after `attempt`: half of min(max, base × 2^(attempt−1)), and all of it. */
function bounds(attempt: number): { least: number; most: number } {
  const full = Math.min(maxBackoffMs, baseBackoffMs * 2 ** (attempt - 1));
  return { least: Math.floor(full / 2), most: full };
}

describe('the default webhook retry schedule over a 5-minute outage', () => {
  it('draws every delay within its bounds', () => {
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      const { least, most } = bounds(attempt);
      for (let draw = 0; draw < 200; draw++) {
        const delay = backoffMs(attempt, baseBackoffMs, maxBackoffMs);
        expect(delay).toBeGreaterThanOrEqual(least);
        expect(delay).toBeLessThanOrEqual(most);
      }
    }
  });

  it('spends at most 6 of its 15 attempts on the outage and tries again within 6 minutes of its end, long before the dead letter', () => {
    // Densest schedule (every delay its least): the most attempts that can fall inside the outage.
    let at = 0;
    let attemptsInOutage = 0;
    while (at < OUTAGE_MS) {
      attemptsInOutage++;
      at += bounds(attemptsInOutage).least;
    }
    expect(attemptsInOutage).toBeLessThanOrEqual(6);
    // The first attempt after the outage is the one that gets through; it is not the dead letter's.
    expect(attemptsInOutage + 1).toBeLessThanOrEqual(maxAttempts);
    // The last attempt inside the outage is at most the densest schedule's last, and the wait after the
    // outage ends is less than the delay that follows it, which grows with the attempt's number.
    const longestWaitMs = bounds(attemptsInOutage).most;
    expect(longestWaitMs).toBeLessThanOrEqual(6 * 60_000);
    expect(OUTAGE_MS + longestWaitMs).toBeLessThan(deadAfterMs);
  });
});
