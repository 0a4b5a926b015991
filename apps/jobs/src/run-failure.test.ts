import { describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { failedLine } from './batches/batch-runner.js';
import { storedFailure } from './responses/background-runner.js';
import { runFailure } from './run-failure.js';
import { TransientRunFailure } from './run-steps.js';

/** Every value of the generated enum, UNRECOGNIZED included. */
const reasons = Object.values(ErrorReason).filter((value): value is ErrorReason => typeof value === 'number');
const name = (reason: ErrorReason) => ErrorReason[reason];
const failing = (reason: ErrorReason, status = GrpcStatus.FAILED_PRECONDITION, code = '') => new GatewayError(status, reason, `failed: ${name(reason)}`, { code });

const MONEY = [ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA, ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED, ErrorReason.ERROR_REASON_BUDGET_EXCEEDED];
/** The only reasons that are the gateway's or the upstreams' failure, not the request's. */
const SERVER = [ErrorReason.ERROR_REASON_UNSPECIFIED, ErrorReason.ERROR_REASON_INTERNAL, ErrorReason.ERROR_REASON_NO_UPSTREAM, ErrorReason.UNRECOGNIZED];

describe('how a failed run of a batch line or a background response ends (run-failure.ts)', () => {
  it('walks the whole ErrorReason enum', () => {
    expect(reasons.length).toBeGreaterThanOrEqual(23);
    for (const reason of reasons) {
      const failure = runFailure(failing(reason));
      expect(failure.status, name(reason)).toBeGreaterThanOrEqual(400);
      expect(failure.code, name(reason)).not.toBe('');
      expect(failure.type, name(reason)).not.toBe('');
    }
  });

  it('every refusal for money is a 402 insufficient_quota, never retried, whatever code the service set', () => {
    for (const reason of MONEY) {
      for (const error of [failing(reason), failing(reason, GrpcStatus.RESOURCE_EXHAUSTED, 'other'), new TransientRunFailure('admission failed', { cause: failing(reason) })]) {
        const failure = runFailure(error instanceof TransientRunFailure ? error.cause : error);
        expect(failure, name(reason)).toMatchObject({ status: 402, type: 'insufficient_quota', transient: false });
      }
    }
    expect(reasons.filter((reason) => runFailure(failing(reason)).status === 402).sort()).toEqual([...MONEY].sort());
    expect(runFailure(failing(ErrorReason.ERROR_REASON_BUDGET_EXCEEDED)).code).toBe('budget_exceeded');
    expect(runFailure(failing(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED)).code).toBe('key_limit_exceeded');
  });

  it('nothing is a 5xx but the genuinely server-side reasons (and our own services unreachable)', () => {
    const fiveHundreds = reasons.filter((reason) => runFailure(failing(reason)).status >= 500);
    expect(fiveHundreds.map(name).sort()).toEqual(SERVER.map(name).sort());
    // A transport failure of our services (no typed reason) is a 503 worth another attempt; an exception is ours.
    expect(runFailure(new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'connect ECONNREFUSED'))).toMatchObject({ status: 503, code: 'service_unavailable', transient: true });
    expect(runFailure(new Error('boom'))).toMatchObject({ status: 500, code: 'server_error', message: 'The gateway failed to process the request.' });
    expect(runFailure(failing(ErrorReason.ERROR_REASON_NO_UPSTREAM))).toMatchObject({ status: 503, code: 'no_upstream', transient: true });
  });

  it('only failures another attempt may mend are retried; a refusal of the request never is', () => {
    const transient = reasons.filter((reason) => runFailure(failing(reason)).transient).map(name).sort();
    expect(transient).toEqual([
      ...SERVER, ErrorReason.ERROR_REASON_RATE_LIMITED, ErrorReason.ERROR_REASON_USAGE_NOT_RECORDED,
    ].map(name).sort());
    expect(runFailure(failing(ErrorReason.ERROR_REASON_RATE_LIMITED))).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
  });

  it('a batch line and a background response end with the same decision for every reason', () => {
    for (const reason of reasons) {
      for (const error of [failing(reason), failing(reason, GrpcStatus.INVALID_ARGUMENT, 'some_code'), new TransientRunFailure('routing failed', { cause: failing(reason) })]) {
        const { transient: _transient, ...decided } = runFailure(error instanceof TransientRunFailure ? error.cause : error);
        const line = failedLine({ customId: 'c1' }, 'req-1', error);
        const body = (line.result.response as { status_code: number; body: { error: Record<string, unknown> } });
        expect(line.isError).toBe(true);
        expect(line.costPico).toBe(0n);
        expect({ status: body.status_code, ...body.body.error }, name(reason)).toEqual({ ...decided, param: null });
        expect(storedFailure(error), name(reason)).toEqual(decided);
      }
    }
  });
});
