import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError, GrpcStatus } from '@gateway/platform';
import { ErrorReason } from '@gateway/proto';
import { uniqueName } from '@gateway/testing';
import { createLedgerHarness, type LedgerClient, type LedgerHarness, rejection } from './harness.js';

let harness: LedgerHarness;
let client: LedgerClient;

beforeAll(async () => {
  harness = await createLedgerHarness();
  ({ client } = await harness.start({ consumer: { enabled: false } }));
});
afterAll(async () => { await harness?.close(); });

const context = (accountId: string, requestId = uniqueName('req'), keyId = 'key_main') => ({ requestId, accountId, keyId });

describe('Admit', () => {
  it('admits exactly as many paid requests as the balance covers under 500 concurrent calls', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '5', idempotencyKey: uniqueName('topup'), note: 'race' });
    const results = await Promise.allSettled(
      Array.from({ length: 500 }, (_, index) =>
        client.admit({ context: context(accountId, `race-${accountId}-${index}`, `key_${index % 7}`), modelId: 'acme/chat-small', paid: true, tier: 'tier-1', limitGroup: 'default' }, { deadlineMs: 60_000 }),
      ),
    );
    const admitted = results.filter((result) => result.status === 'fulfilled');
    const refused = results.filter((result): result is PromiseRejectedResult => result.status === 'rejected');
    expect(admitted).toHaveLength(100);
    expect(refused).toHaveLength(400);
    for (const result of refused) {
      expect(result.reason).toBeInstanceOf(GatewayError);
      expect(result.reason.status).toBe(GrpcStatus.FAILED_PRECONDITION);
      expect(result.reason.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
      expect(result.reason.message).toMatch(/^Insufficient credits/);
    }
    expect(await client.getBalance({ accountId })).toEqual({ balance: '5', available: '0', reserved: '5' });
    const verification = await client.verifyJournal({ accountId: '' });
    expect(verification.mismatches).toEqual([]);
    expect(verification.accountsChecked).toBeGreaterThanOrEqual(1);
    const open = await harness.db.selectFrom('reservations').select((eb) => eb.fn.countAll<string>().as('count'))
      .where('account_id', '=', accountId).where('closed_at', 'is', null).executeTakeFirstOrThrow();
    expect(Number(open.count)).toBe(100);
    const keyReserved = await harness.db.selectFrom('key_totals').select((eb) => eb.fn.sum<string>('reserved_pico').as('total'))
      .where('account_id', '=', accountId).executeTakeFirstOrThrow();
    expect(BigInt(keyReserved.total)).toBe(5_000_000_000_000n);
  });

  it('is idempotent on the request id: a repeat returns the first answer and reserves nothing more', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '1', idempotencyKey: uniqueName('topup'), note: '' });
    const requestContext = context(accountId);
    const first = await client.admit({ context: requestContext, modelId: 'm', paid: true, tier: '', limitGroup: '' });
    const again = await client.admit({ context: requestContext, modelId: 'm', paid: true, tier: '', limitGroup: '' });
    expect(first.reservedCredits).toBe('0.05');
    expect(again).toEqual(first);
    expect(first.reservationExpiresAtMs).toBeGreaterThan(BigInt(Date.now() + 19 * 60_000));
    expect(await client.getBalance({ accountId })).toEqual({ balance: '1', available: '0.95', reserved: '0.05' });
  });

  it('reserves reserve_credits (the worst case) when above 0.05, and refuses when the balance cannot hold it', async () => {
    const { client } = await harness.start();
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '0.5', idempotencyKey: uniqueName('topup'), note: '' });
    const large = await client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '', reserveCredits: '0.3' });
    expect(large.reservedCredits).toBe('0.3');
    const small = await client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '', reserveCredits: '0.01' });
    expect(small.reservedCredits).toBe('0.05');
    expect(await client.getBalance({ accountId })).toEqual({ balance: '0.5', available: '0.15', reserved: '0.35' });
    const refused = await rejection(client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '', reserveCredits: '0.2' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(refused.message).toContain('0.2');
    const tooLarge = await rejection(client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '', reserveCredits: '100000' }));
    expect(tooLarge.reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
  });

  it('admits a free model without a reservation, even with no credits', async () => {
    const accountId = uniqueName('acc');
    const answer = await client.admit({ context: context(accountId), modelId: 'free/model', paid: false, tier: '', limitGroup: '' });
    expect(answer).toEqual({ reservedCredits: '0', reservationExpiresAtMs: 0n });
    expect(await client.getBalance({ accountId })).toEqual({ balance: '0', available: '0', reserved: '0' });
  });

  it('writes nothing for a free request: no reservation row without rate limits, no key row for a key limit', async () => {
    const accountId = uniqueName('acc');
    const keyId = uniqueName('key');
    const requestIds = [uniqueName('req'), uniqueName('req')];
    await client.admit({ context: context(accountId, requestIds[0], keyId), modelId: 'free/model', paid: false, tier: '', limitGroup: '' });
    const withLimit = await client.admit({ context: context(accountId, requestIds[1], keyId), modelId: 'free/model', paid: false, tier: '', limitGroup: '', keyCreditLimit: '0' });
    expect(withLimit).toEqual({ reservedCredits: '0', reservationExpiresAtMs: 0n });
    expect(await harness.db.selectFrom('reservations').select('request_id').where('account_id', '=', accountId).execute()).toEqual([]);
    expect(await harness.db.selectFrom('key_totals').select('key_id').where('key_id', '=', keyId).execute()).toEqual([]);
    expect(await harness.db.selectFrom('rate_windows').select('account_id').where('account_id', '=', accountId).execute()).toEqual([]);
  });

  it('keeps a key without a credit limit counted in key_totals, and takes a refused reservation back off it', async () => {
    const accountId = uniqueName('acc');
    const keyId = uniqueName('key');
    await client.topUp({ accountId, credits: '0.05', idempotencyKey: uniqueName('topup'), note: '' });
    await client.admit({ context: context(accountId, uniqueName('req'), keyId), modelId: 'm', paid: true, tier: '', limitGroup: '' });
    const refused = await rejection(client.admit({ context: context(accountId, uniqueName('req'), keyId), modelId: 'm', paid: true, tier: '', limitGroup: '' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(await harness.db.selectFrom('key_totals').select(['spent_pico', 'reserved_pico']).where('key_id', '=', keyId).execute())
      .toEqual([{ spent_pico: 0n, reserved_pico: 50_000_000_000n }]);
  });

  it('refuses a paid request when less than 0.05 is available, and admits at exactly 0.05', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '0.049999999999', idempotencyKey: uniqueName('topup'), note: '' });
    const refused = await rejection(client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '' }));
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA);
    expect(refused.message).toContain('0.049999999999');
    await client.topUp({ accountId, credits: '0.000000000001', idempotencyKey: uniqueName('topup'), note: '' });
    const admitted = await client.admit({ context: context(accountId), modelId: 'm', paid: true, tier: '', limitGroup: '' });
    expect(admitted.reservedCredits).toBe('0.05');
  });

  it('refuses when the key credit limit would be exceeded, counting spend and open reservations', async () => {
    const accountId = uniqueName('acc');
    await client.topUp({ accountId, credits: '10', idempotencyKey: uniqueName('topup'), note: '' });
    const admitWithLimit = (requestId: string, keyId = 'key_limited') =>
      client.admit({ context: context(accountId, requestId, keyId), modelId: 'm', paid: true, tier: '', limitGroup: '', keyCreditLimit: '0.1' });
    await admitWithLimit(`${accountId}-1`);
    await admitWithLimit(`${accountId}-2`);
    const refused = await rejection(admitWithLimit(`${accountId}-3`));
    expect(refused.status).toBe(GrpcStatus.FAILED_PRECONDITION);
    expect(refused.reason).toBe(ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED);
    // Another key of the same account is not affected.
    await admitWithLimit(`${accountId}-other`, 'key_other');
    // Releasing one reservation makes room again.
    expect(await client.release({ context: context(accountId, `${accountId}-1`, 'key_limited') })).toEqual({ released: true });
    expect(await client.release({ context: context(accountId, `${accountId}-1`, 'key_limited') })).toEqual({ released: false });
    await admitWithLimit(`${accountId}-4`);
    expect((await client.getBalance({ accountId })).reserved).toBe('0.15');
    expect((await client.verifyJournal({ accountId })).mismatches).toEqual([]);
  });

  it('rejects a missing request id, and a key limit malformed, negative or without its key', async () => {
    const missing = await rejection(client.admit({ context: { requestId: '', accountId: 'a', keyId: 'k' }, modelId: 'm', paid: true, tier: '', limitGroup: '' }));
    expect(missing.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(missing.param).toBe('context.request_id');
    const malformed = await rejection(client.admit({ context: context('acc_x'), modelId: 'm', paid: true, tier: '', limitGroup: '', keyCreditLimit: '1e3' }));
    expect(malformed.status).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(malformed.param).toBe('key_credit_limit');
    const negative = await rejection(client.admit({ context: context('acc_x'), modelId: 'm', paid: true, tier: '', limitGroup: '', keyCreditLimit: '-1' }));
    expect([negative.status, negative.param]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'key_credit_limit']);
    const keyless = await rejection(client.admit({ context: context('acc_x', uniqueName('req'), ''), modelId: 'm', paid: true, tier: '', limitGroup: '', keyCreditLimit: '1' }));
    expect([keyless.status, keyless.param]).toEqual([GrpcStatus.INVALID_ARGUMENT, 'context.key_id']);
  });
});
