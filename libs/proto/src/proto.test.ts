import { describe, expect, it } from 'vitest';
import { ErrorDetail, ErrorReason, UsageEvent, UsageOutcome, idempotencyLevels } from './index.js';

describe('generated contracts', () => {
  it('round-trips a usage event with its price snapshot through the wire format', () => {
    const event = UsageEvent.fromPartial({
      requestId: 'req_1', accountId: 'acc', modelId: 'acme/chat-small', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
      usage: { inputTokens: 12, outputTokens: 30 }, prices: { perInputToken: '0.0000005' }, occurredAtMs: 1767225600123n,
    });
    const decoded = UsageEvent.decode(UsageEvent.encode(event).finish());
    expect(decoded.prices?.perInputToken).toBe('0.0000005');
    expect(decoded.prices?.perOutputToken).toBeUndefined();
    expect(decoded.occurredAtMs).toBe(1767225600123n);
    expect(decoded.usage?.outputTokens).toBe(30);
  });

  it('keeps the error reason enum stable on the wire', () => {
    const bytes = ErrorDetail.encode({ reason: ErrorReason.ERROR_REASON_RATE_LIMITED, message: 'x', code: '', param: '', retryAfterSeconds: 7 }).finish();
    expect(ErrorDetail.decode(bytes)).toMatchObject({ reason: ErrorReason.ERROR_REASON_RATE_LIMITED, retryAfterSeconds: 7 });
  });

  it('lists idempotency levels read from the proto options', () => {
    expect(idempotencyLevels['gateway.v1.LedgerService/Admit']).toBe('IDEMPOTENT');
    expect(idempotencyLevels['gateway.v1.AuthService/VerifyApiKey']).toBe('NO_SIDE_EFFECTS');
    expect(idempotencyLevels['gateway.v1.RouterService/Chat']).toBe('IDEMPOTENCY_UNKNOWN');
  });
});
