import type { FuzzAccount, FuzzStack } from './fuzz-stack.js';
import { KEY_EVENT_TYPES, type GovernanceOutcome, type TrackedKey } from './governance-fuzz.js';

// Key and low-balance webhook events in the invariant fuzzer (issue 42, docs/governance.md "Webhooks" and
// "Low balance"), judged in the ledger's own `webhook_events` rows after a sequence, as budget-alerts.ts
// judges the thresholds':
// - every key change that took effect (governance-fuzz.ts: created, disabled from enabled, deleted, and a
//   key's expiry) of an account with an endpoint is exactly one event of its type, under its own account —
//   never another's, and never a second; a key nobody changed has none (the account's first key, made
//   before any endpoint, may have its `api_key.created`); an account without an endpoint has no rows;
// - `balance.low` fires once per crossing: with the balance falling from the first set (charges only), one
//   event when the balance the threshold was set at is at or above it and the settled balance below it,
//   none otherwise, and none for an account without a threshold.

const WAIT_MS = 15_000;

interface EventRow {
  account_id: string;
  type: string;
  key_id: string | null;
  key_account: string | null;
}

type KeyCounts = TrackedKey['expected'];
const kinds = ['created', 'disabled', 'deleted', 'expired'] as const;

export async function accountEventViolations(
  fuzz: FuzzStack, accounts: FuzzAccount[], outcomes: GovernanceOutcome[], balances: ReadonlyMap<string, { balance: bigint }>, tally: Record<string, number>,
): Promise<string[]> {
  const ids = accounts.map((account) => account.accountId);
  const nameOf = (accountId: string) => {
    const index = accounts.findIndex((account) => account.accountId === accountId);
    return index === accounts.length - 1 ? 'account B' : `account ${index}`;
  };
  const expectedKeys = new Map<string, { accountId: string; counts: KeyCounts }>();
  for (const outcome of outcomes) for (const key of outcome.keys) expectedKeys.set(key.keyId, { accountId: outcome.accountId, counts: key.expected });
  const lowBalance = new Map<string, { thresholdPico: bigint; balanceAtSetPico: bigint }>();
  for (const outcome of outcomes) {
    if (!outcome.lowBalance) continue;
    const known = lowBalance.get(outcome.accountId);
    if (!known || outcome.lowBalance.balanceAtSetPico > known.balanceAtSetPico) lowBalance.set(outcome.accountId, outcome.lowBalance);
  }
  const expectedLow = (accountId: string) => {
    const set = lowBalance.get(accountId);
    if (!set) return 0;
    const balance = balances.get(accountId)?.balance ?? 0n;
    return set.balanceAtSetPico >= set.thresholdPico && balance < set.thresholdPico ? 1 : 0;
  };

  const read = () => fuzz.db.query<EventRow>(
    `select e.account_id, e.type, e.data->>'key_id' as key_id, k.account_id as key_account
       from ledger.webhook_events e left join auth.api_keys k on k.id = e.data->>'key_id'
      where e.account_id = any($1) and (e.type = any($2) or e.type = 'balance.low')`, [ids, [...KEY_EVENT_TYPES]]);
  const countsOf = (rows: EventRow[], keyId: string): KeyCounts => {
    const counts: KeyCounts = { created: 0, disabled: 0, deleted: 0, expired: 0 };
    for (const row of rows) if (row.key_id === keyId) counts[row.type.replace('api_key.', '') as keyof KeyCounts]++;
    return counts;
  };
  // The relay and the expiry sweep are asynchronous: wait until every owed event is there (or the bound passed).
  const deadline = Date.now() + WAIT_MS;
  let rows = (await read()).rows;
  const owed = () => [...expectedKeys].some(([keyId, { counts }]) => kinds.some((kind) => countsOf(rows, keyId)[kind] < counts[kind]))
    || ids.some((accountId) => rows.filter((row) => row.account_id === accountId && row.type === 'balance.low').length < expectedLow(accountId));
  while (owed() && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    rows = (await read()).rows;
  }

  const violations: string[] = [];
  for (const row of rows) tally[`event ${row.type}`] = (tally[`event ${row.type}`] ?? 0) + 1;
  const { rows: endpoints } = await fuzz.db.query<{ account_id: string }>('select distinct account_id from ledger.webhook_endpoints where account_id = any($1)', [ids]);
  const hooked = new Set(endpoints.map((row) => row.account_id));
  const firstKeys = new Set(accounts.map((account) => account.keyId));
  for (const row of rows) {
    if (!hooked.has(row.account_id)) violations.push(`${nameOf(row.account_id)} has no webhook endpoint, yet a ${row.type} event`);
    if (row.type === 'balance.low') continue;
    if (row.key_account !== row.account_id) violations.push(`${nameOf(row.account_id)} got ${row.type} for key ${row.key_id ?? '(none)'} of ${row.key_account === null ? 'no account' : nameOf(row.key_account)}`);
    else if (!expectedKeys.has(row.key_id ?? '') && !(firstKeys.has(row.key_id ?? '') && row.type === 'api_key.created')) {
      violations.push(`${nameOf(row.account_id)} got ${row.type} for key ${row.key_id} that no step changed so`);
    }
  }
  for (const keyId of firstKeys) {
    const created = countsOf(rows, keyId).created;
    if (created > 1) violations.push(`the first key ${keyId} has ${created} api_key.created events`);
  }
  for (const [keyId, { accountId, counts }] of expectedKeys) {
    const got = countsOf(rows, keyId);
    for (const kind of kinds) {
      if (got[kind] !== counts[kind]) violations.push(`${nameOf(accountId)}'s key ${keyId}: ${got[kind]} api_key.${kind} events, its changes owe ${counts[kind]}`);
    }
  }
  // Refunds (a batch line's voided attempt) raise a balance again and may re-arm the threshold: then it
  // may fire again, once per refund at most.
  const { rows: raised } = await fuzz.db.query<{ account_id: string; n: number }>(
    `select account_id, count(*)::int as n from (
       select account_id from ledger.journal_entries where account_id = any($1) and amount_pico > 0 and kind <> 'topup'
       union all select account_id from ledger.charges where account_id = any($1) and voided) raised group by account_id`, [ids]);
  for (const accountId of ids) {
    const got = rows.filter((row) => row.account_id === accountId && row.type === 'balance.low').length;
    const expected = expectedLow(accountId);
    const refunds = raised.find((row) => row.account_id === accountId)?.n ?? 0;
    const set = lowBalance.get(accountId);
    const shown = set ? `threshold ${set.thresholdPico} pico, set at ${set.balanceAtSetPico}, balance now ${balances.get(accountId)?.balance ?? 0n}` : 'no threshold';
    if (refunds === 0 ? got !== expected : !set ? got !== 0 : got < expected || got > expected + refunds) {
      violations.push(`${nameOf(accountId)}: ${got} balance.low events, expected ${expected}${refunds ? ` (+ up to ${refunds} after refunds)` : ''} (${shown})`);
    }
  }
  return violations;
}
