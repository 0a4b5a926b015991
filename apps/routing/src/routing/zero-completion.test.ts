import { describe, expect, it } from 'vitest';
import { UsageOutcome, type UsageEvent } from '@gateway/proto';
import { emptyUsage } from '../usage/token-counter.js';
import type { StreamCheckpoint } from '../usage/stream-checkpoints.js';
import type { UsagePublisher } from '../usage/usage-publisher.js';
import { Reservation } from './reservation.js';
import { chatInsurance } from './zero-completion.js';

describe('chatInsurance', () => {
  it('insures only answers with no output token and no (or an error) finish reason', () => {
    const none = { ...emptyUsage(), inputTokens: 50 };
    expect(chatInsurance(none, '')).toBe('no_output_no_finish_reason');
    expect(chatInsurance(none, 'error')).toBe('no_output_error_finish_reason');
    // An empty answer that says it stopped is an answer: charged.
    expect(chatInsurance(none, 'stop')).toBe('');
    expect(chatInsurance(none, 'length')).toBe('');
    // Anything delivered (text, or reasoning alone) is charged, whatever the finish reason.
    expect(chatInsurance({ ...none, outputTokens: 1 }, '')).toBe('');
    expect(chatInsurance({ ...none, reasoningTokens: 4 }, 'error')).toBe('');
  });
});

describe('Reservation: the generation facts on the usage event', () => {
  function recorder() {
    const events: UsageEvent[] = [];
    const publisher: UsagePublisher = {
      publish: async (event) => { events.push(event); },
      publishInBackground: (event) => { events.push(event); },
      trackStream: () => ({ finalStored: () => undefined }) as unknown as StreamCheckpoint,
      stop: async () => undefined,
    };
    return { publisher, events };
  }

  it('carries finish reason, latency, generation time, cancellation, native usage and the insured reason on SERVED', async () => {
    const { publisher, events } = recorder();
    const hold = new Reservation(publisher, 'req_1', { requestId: 'req_1', accountId: 'acc', keyId: 'key' }, 'acme/model', 'chat.completions', true);
    await new Promise((resolve) => setTimeout(resolve, 30));
    hold.firstByteAt = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 30));
    const native = { ...emptyUsage(), inputTokens: 9 };
    hold.finishReason = '';
    hold.nativeUsage = native;
    hold.cancelled = true;
    hold.insuredReason = 'no_output_no_finish_reason';
    hold.settleInBackground('prov-a', { ...emptyUsage(), inputTokens: 9 }, true);
    const event = events[0]!;
    expect(event.outcome).toBe(UsageOutcome.USAGE_OUTCOME_SERVED);
    expect(event).toMatchObject({ finishReason: '', cancelled: true, insuredReason: 'no_output_no_finish_reason', nativeUsage: native });
    expect(event.latencyMs).toBeGreaterThanOrEqual(25);
    expect(event.generationTimeMs).toBeGreaterThanOrEqual(event.latencyMs + 25);
  });

  it('never puts insurance on a FAILED event, and reports latency 0 when nothing came', () => {
    const { publisher, events } = recorder();
    const hold = new Reservation(publisher, 'req_2', undefined, 'acme/model', 'chat.completions', false);
    hold.insuredReason = 'no_output_no_finish_reason';
    hold.release();
    expect(events[0]).toMatchObject({ outcome: UsageOutcome.USAGE_OUTCOME_FAILED, insuredReason: '', latencyMs: 0 });
  });
});
