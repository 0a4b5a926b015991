import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, formatCredits, parseCredits, type EventBus, type PromiseClient } from '@gateway/platform';
import { LedgerServiceClient, LedgerServiceService } from '@gateway/proto';
import { eventually, testLogger } from '@gateway/testing';
import { startEdgeReplica, startLedgerReplica, type RunningEdge, type RunningLedgerService } from '../src/index.js';
import { decimalField, exampleTokenCostPico, startAccountStack, type Account, type AccountStack } from './account-harness.js';
import { testAdmission } from './admission-mode.js';

// Keys that reset and expire (OpenRouter's limit_reset and expires_at) over the whole stack: Postgres,
// NATS, every service. A second ledger on the same database runs on a clock the test moves (the only
// way past a UTC midnight without waiting for one); a second edge admits through it. The stack's own
// ledger settles the charges (the second one's consumer is off).

let harness: AccountStack;
let account: Account;
let offsetMs = 0;
let clockedBus: EventBus;
let clockedEdgeBus: EventBus;
let clockedLedger: RunningLedgerService;
let clockedEdge: RunningEdge;
let ledger: PromiseClient<LedgerServiceClient>;

const DAY_MS = 86_400_000;
const nextUtcMidnight = (ms: number) => Math.floor(ms / DAY_MS) * DAY_MS + DAY_MS;
/** Windows as the test reckons them, apart from the gateway's code: Monday-based weeks, calendar months. */
const weekStart = (ms: number) => {
  const day = Math.floor(ms / DAY_MS) * DAY_MS;
  return day - ((new Date(day).getUTCDay() + 6) % 7) * DAY_MS;
};
const monthStart = (ms: number) => Date.UTC(new Date(ms).getUTCFullYear(), new Date(ms).getUTCMonth(), 1);

beforeAll(async () => {
  harness = await startAccountStack();
  account = await harness.newAccount('resets', '10');
  const { stack, testBus, database } = harness;
  // Each its own NATS connection, as separate processes would have: a connection does not hear its own broadcasts.
  clockedBus = await testBus.connectAnother();
  clockedEdgeBus = await testBus.connectAnother();
  clockedLedger = await startLedgerReplica({
    databaseUrl: database.url, bus: clockedBus, logger: testLogger('clocked-ledger'),
    consumer: { enabled: false }, now: () => Date.now() + offsetMs,
    // A lease recalled right after its request is kept (at the edge's spend estimate) until its charges
    // settle or this long: short here, so the next day's first request does not wait for the drain.
    leaseDrainMs: 1_000, sweepIntervalMs: 1_000,
  });
  clockedEdge = await startEdgeReplica(stack.addresses, {
    port: 0,
    ledgerAddress: clockedLedger.address,
    bus: clockedEdgeBus,
    logger: testLogger('clocked-edge'),
    admission: testAdmission,
  });
  ledger = createClient(LedgerServiceClient, LedgerServiceService, stack.addresses.ledger);
}, 120_000);

afterAll(async () => {
  ledger?.close();
  await clockedEdge?.stop();
  await clockedLedger?.stop();
  await clockedBus?.close();
  await clockedEdgeBus?.close();
  await harness?.stop();
});

/**
 * A long prompt for the cheap example model (0.0000005 a prompt token): its real tokens cost above 0.01
 * an answer, while the edge holds its worst case (a bound from the prompt's size) while it runs.
 */
const longChat = { model: 'chat-small', messages: [{ role: 'user', content: 'lorem ipsum '.repeat(10_000) }], max_completion_tokens: 16 };

/** What the edge holds for longChat: a key without room says so in its 402 ("this request needs X more"). */
async function longChatHoldPico(): Promise<bigint> {
  const probe = await harness.createKey(account, { name: 'probe', credit_limit: 0 });
  const refused = await harness.call('POST', '/v1/chat/completions', { bearer: probe.key, body: longChat });
  expect(refused.status, refused.text).toBe(402);
  const needs = /this request needs (\d+(?:\.\d+)?) more/.exec(refused.body.error.message as string);
  expect(needs, refused.text).not.toBeNull();
  return parseCredits(needs![1]!);
}

const getKey = (keyId: string, baseUrl?: string) => harness.call('GET', `/v1/account/keys/${keyId}`, { bearer: account.provisioningKey }, baseUrl);

describe('limit_reset: a daily credit limit over the real stack', () => {
  it('refuses with 402 once the day\'s spend leaves no room, shows usage_daily/weekly/monthly to the pico, admits again past UTC midnight', async () => {
    // Room for one hold and 0.01 of spend; each answer costs more than 0.01, so the first is served
    // and, once it is charged, the day has less room than a hold: a refusal. Exact in both admission
    // modes (a margin much tighter than one answer would meet the leases' conservative spend estimate).
    const holdPico = await longChatHoldPico();
    expect(holdPico).toBeGreaterThan(parseCredits('0.05'));
    const limit = formatCredits(holdPico + parseCredits('0.01'));
    const created = await harness.createKey(account, { name: 'daily', credit_limit: limit, limit_reset: 'daily' });
    expect(created).toMatchObject({ limit_reset: 'daily', usage: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0, expires_at: null });
    expect(decimalField(JSON.stringify(created), 'limit_remaining')).toBe(limit);
    const chat = () => harness.call('POST', '/v1/chat/completions', { bearer: created.key, body: longChat }, clockedEdge.url);

    let spentPico = 0n;
    let refusal: Awaited<ReturnType<AccountStack['chat']>> | undefined;
    for (let attempt = 0; attempt < 5 && !refusal; attempt++) {
      const answer = await chat();
      if (answer.status === 200) {
        spentPico += exampleTokenCostPico('acme/chat-small', { input: answer.body.usage.prompt_tokens, output: answer.body.usage.completion_tokens });
        // Sequential requests: each one's charge settles before the next asks (what the window counts).
        await eventually(async () => expect(parseCredits(decimalField((await getKey(created.id, clockedEdge.url)).text, 'usage_daily'))).toBe(spentPico), 10_000);
      } else {
        refusal = answer;
      }
    }
    expect(refusal?.status, refusal?.text).toBe(402);
    expect(refusal!.body.error).toMatchObject({ type: 'insufficient_quota', code: 'key_limit_exceeded' });
    expect(spentPico, refusal?.text).toBeGreaterThan(parseCredits('0.01'));

    const ledgerActivity = await ledger.getActivity({ accountId: account.accountId, days: 1, keyId: created.id });
    const chargedPico = ledgerActivity.rows.reduce((sum, row) => sum + parseCredits(row.credits), 0n);
    expect(chargedPico).toBe(spentPico);
    const record = await getKey(created.id, clockedEdge.url);
    for (const field of ['usage', 'usage_daily', 'usage_weekly', 'usage_monthly']) {
      expect(parseCredits(decimalField(record.text, field)), field).toBe(spentPico);
    }
    const remainingPico = parseCredits(decimalField(record.text, 'limit_remaining'));
    expect(remainingPico).toBe(parseCredits(limit) - spentPico);
    // Why it was refused: less room than one hold. And never more spent than the limit.
    expect(remainingPico < holdPico, `spent ${formatCredits(spentPico)} remaining ${formatCredits(remainingPico)}`).toBe(true);
    expect(spentPico <= parseCredits(limit), `spent ${formatCredits(spentPico)}`).toBe(true);
    // A refusal for money is final within the window.
    expect((await chat()).status).toBe(402);

    // Past the next UTC midnight (the clocked ledger's clock): a new day, the limit's room is back.
    const before = Date.now();
    offsetMs = nextUtcMidnight(before) + 1_000 - before;
    const after = Date.now() + offsetMs;
    const movedRecord = await getKey(created.id, clockedEdge.url);
    expect(movedRecord.body).toMatchObject({ usage_daily: 0 });
    expect(decimalField(movedRecord.text, 'limit_remaining')).toBe(limit);
    // The day's charges are still in this week and month unless the new day starts one.
    const sameWeek = weekStart(after) === weekStart(before);
    const sameMonth = monthStart(after) === monthStart(before);
    expect(parseCredits(decimalField(movedRecord.text, 'usage_weekly'))).toBe(sameWeek ? spentPico : 0n);
    expect(parseCredits(decimalField(movedRecord.text, 'usage_monthly'))).toBe(sameMonth ? spentPico : 0n);
    expect(parseCredits(decimalField(movedRecord.text, 'usage'))).toBe(spentPico);
    // Holds of the previous day's last requests may still be settling (their leases drain): admitted within moments.
    await eventually(async () => {
      const admitted = await chat();
      expect(admitted.status, admitted.text).toBe(200);
    }, 20_000, 250);
  });

  it('a weekly key shows the same spend, its limit counting the week; update moves it to monthly and back to lifetime', async () => {
    offsetMs = 0;
    const created = await harness.createKey(account, { name: 'weekly', credit_limit: 1, limit_reset: 'weekly' });
    const answer = await harness.chat(created.key, clockedEdge.url);
    expect(answer.status, answer.text).toBe(200);
    const costPico = exampleTokenCostPico('acme/chat-small', { input: answer.body.usage.prompt_tokens, output: answer.body.usage.completion_tokens });
    await eventually(async () => expect(parseCredits(decimalField((await getKey(created.id, clockedEdge.url)).text, 'usage_weekly'))).toBe(costPico), 10_000);
    const record = await getKey(created.id, clockedEdge.url);
    expect(decimalField(record.text, 'limit_remaining')).toBe(formatCredits(parseCredits('1') - costPico));

    const monthly = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { limit_reset: 'monthly' } });
    expect(monthly.status, monthly.text).toBe(200);
    expect(monthly.body).toMatchObject({ limit_reset: 'monthly', credit_limit: 1 });
    const lifetime = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { limit_reset: null } });
    expect(lifetime.body.limit_reset).toBeNull();
    expect(decimalField(lifetime.text, 'limit_remaining')).toBe(formatCredits(parseCredits('1') - costPico));
  });

  it('refuses a bad limit_reset or expires_at with a 400 naming the field, and creates nothing', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ name: 'x', credit_limit: 1, limit_reset: 'hourly' }, 'body.limit_reset', /must be one of daily, weekly, monthly or null/],
      [{ name: 'x', credit_limit: 1, expires_at: new Date(Date.now() - 60_000).toISOString() }, 'body.expires_at', /must be in the future/],
      [{ name: 'x', credit_limit: 1, expires_at: 'next tuesday' }, 'body.expires_at', /must be an ISO 8601 date-time/],
      [{ name: 'x', credit_limit: 1, expires_at: '2030-02-30T00:00:00Z' }, 'body.expires_at', /must be an ISO 8601 date-time/],
    ];
    const listed = async () => (await harness.call('GET', '/v1/account/keys', { bearer: account.provisioningKey })).body.data.length as number;
    const before = await listed();
    for (const [body, param, message] of cases) {
      const answer = await harness.call('POST', '/v1/account/keys', { bearer: account.provisioningKey, body });
      expect(answer.status, answer.text).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'invalid_request_error', param });
      expect(answer.body.error.message).toMatch(message);
    }
    expect(await listed()).toBe(before);
  });
});

describe('expires_at over the real stack', () => {
  it('serves the key until its instant, then refuses it at once with 401 key_expired although its verification is cached', async () => {
    const expiresAtMs = Date.now() + 4_000;
    const expiresAt = new Date(expiresAtMs).toISOString();
    const created = await harness.createKey(account, { name: 'expiring', credit_limit: null, expires_at: expiresAt });
    expect((created as unknown as { expires_at: string }).expires_at).toBe(expiresAt);
    expect((await getKey(created.id)).body.expires_at).toBe(expiresAt);

    // Verified once and cached by the stack's edge (its cache lives 30 s).
    const served = await harness.chat(created.key);
    expect(served.status, served.text).toBe(200);
    expect(Date.now()).toBeLessThan(expiresAtMs);

    await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresAtMs - Date.now()) + 20));
    const refused = await harness.chat(created.key);
    expect(refused.status, refused.text).toBe(401);
    expect(refused.body.error).toMatchObject({ type: 'invalid_api_key', code: 'key_expired' });
    // An edge that never saw the key hears the same from Auth.
    const elsewhere = await harness.chat(created.key, clockedEdge.url);
    expect(elsewhere.status).toBe(401);
    expect(elsewhere.body.error.code).toBe('key_expired');
    // Still listed for its account, with its instant.
    expect((await getKey(created.id)).body).toMatchObject({ id: created.id, expires_at: expiresAt });

    // Clearing the expiry revives it; setting one in the past is refused.
    const past = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { expires_at: expiresAt } });
    expect(past.status).toBe(400);
    expect(past.body.error.param).toBe('body.expires_at');
    const revived = await harness.call('PATCH', `/v1/account/keys/${created.id}`, { bearer: account.provisioningKey, body: { expires_at: null } });
    expect(revived.status, revived.text).toBe(200);
    expect(revived.body.expires_at).toBeNull();
    expect((await harness.chat(created.key)).status).toBe(200);
  });
});
