import { Webhook } from 'standardwebhooks';
import { parseCredits } from '@gateway/platform';
import type { FuzzAccount, FuzzBudget, FuzzStack } from './fuzz-stack.js';

// Budget thresholds in the invariant fuzzer (docs/governance.md): what the listing shows (budgetViolations)
// and what the account's endpoint received (webhookViolations), then the ledger's own rows after a sequence of concurrent charges:
// each threshold of a scope (the account, or one key) fires at most once per period — one budget_alerts
// row and one budget.threshold_crossed webhook event per scope, period, period start and threshold — only
// once the period's spend reached it, only for a scope of the account's own, and each alert of an account
// with an endpoint is exactly one event, fanned out to one delivery per endpoint.

interface AlertRow {
  account_id: string;
  key_id: string;
  period: string;
  period_start: string;
  threshold_percent: number;
  limit_pico: string;
  spent_pico: string;
  event_id: string;
}

export async function alertRowViolations(fuzz: FuzzStack, accounts: FuzzAccount[]): Promise<string[]> {
  const ids = accounts.map((account) => account.accountId);
  const [alerts, events, deliveries] = await Promise.all([
    fuzz.db.query<AlertRow>(
      `select account_id, key_id, period, period_start::text, threshold_percent, limit_pico::text, spent_pico::text, event_id
         from ledger.budget_alerts where account_id = any($1)`, [ids]),
    fuzz.db.query<{ account_id: string; event_id: string; scope_key: string; period: string; period_start: string; threshold: string }>(
      `select account_id, event_id, coalesce(data->>'key_id', '') as scope_key, data->>'period' as period, data->>'period_start' as period_start, data->>'threshold' as threshold
         from ledger.webhook_events where type = 'budget.threshold_crossed' and account_id = any($1)`, [ids]),
    fuzz.db.query<{ event_id: string; endpoint_id: string; account_id: string }>(
      `select e.event_id, d.endpoint_id, d.account_id from ledger.webhook_deliveries d join ledger.webhook_events e on e.id = d.event_row_id
         where e.type = 'budget.threshold_crossed' and e.account_id = any($1)`, [ids]),
  ]);
  const violations: string[] = [];
  const nameOf = (accountId: string) => `account ${accounts.findIndex((account) => account.accountId === accountId)}`;
  const counted = (keys: string[]) => {
    const counts = new Map<string, number>();
    for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
    return [...counts].filter(([, count]) => count > 1);
  };
  const scopeOf = (accountId: string, keyId: string, period: string, periodStart: string, threshold: number | string) =>
    `${accountId} ${keyId === '' ? 'account' : `key ${keyId}`} ${period} from ${periodStart} at ${threshold}%`;

  for (const [scope, count] of counted(alerts.rows.map((row) => scopeOf(row.account_id, row.key_id, row.period, row.period_start, row.threshold_percent)))) {
    violations.push(`${nameOf(scope.split(' ')[0]!)}: the threshold ${scope} fired ${count} times (budget_alerts rows)`);
  }
  for (const [scope, count] of counted(events.rows.map((row) => scopeOf(row.account_id, row.scope_key, row.period, row.period_start, row.threshold)))) {
    violations.push(`${nameOf(scope.split(' ')[0]!)}: the threshold ${scope} has ${count} budget.threshold_crossed events`);
  }
  const eventIds = new Set(events.rows.map((row) => row.event_id));
  for (const alert of alerts.rows) {
    const account = accounts.find((candidate) => candidate.accountId === alert.account_id)!;
    const name = `${nameOf(alert.account_id)}'s alert ${alert.event_id} (${alert.threshold_percent}% of ${alert.limit_pico} pico)`;
    // Fired only once the spend reached the threshold.
    if (BigInt(alert.spent_pico) * 100n < BigInt(alert.limit_pico) * BigInt(alert.threshold_percent)) violations.push(`${name} fired at ${alert.spent_pico} pico spent`);
    if (alert.key_id !== '' && alert.key_id !== account.keyId) violations.push(`${name} names key ${alert.key_id}, not the account's`);
    if (!account.budget) violations.push(`${name}: the account set no budget`);
    else if (account.budget.scope === 'account' && alert.key_id !== '') violations.push(`${name}: a key's alert under an account budget`);
    else if (!account.budget.thresholds.includes(alert.threshold_percent)) violations.push(`${name}: no such threshold (set ${account.budget.thresholds.join(',')})`);
    // Every fuzz account with a budget registered an endpoint: its alert is one event, delivered to that one endpoint.
    if (account.webhookSecret !== undefined && !eventIds.has(alert.event_id)) violations.push(`${name} has no webhook event`);
  }
  const alertIds = new Set(alerts.rows.map((row) => row.event_id));
  for (const event of events.rows) if (!alertIds.has(event.event_id)) violations.push(`${nameOf(event.account_id)}: webhook event ${event.event_id} is no alert of its account`);
  for (const [pair, count] of counted(deliveries.rows.map((row) => `${row.event_id} to ${row.endpoint_id}`))) violations.push(`event ${pair} has ${count} deliveries`);
  for (const delivery of deliveries.rows) {
    const event = events.rows.find((row) => row.event_id === delivery.event_id);
    if (event && event.account_id !== delivery.account_id) violations.push(`event ${delivery.event_id} of ${nameOf(event.account_id)} delivered under account ${delivery.account_id}`);
  }
  return violations;
}

/**
 * A budget's invariants after a settled sequence (one key per account, so the key's spend is the
 * account's): a hard stop was never passed; the thresholds fired this period are exactly those the
 * period's spend reached, each once (the listing holds each fired threshold once per period).
 */
export async function budgetViolations(fuzz: FuzzStack, name: string, account: FuzzAccount, budget: FuzzBudget, chargedPico: bigint): Promise<string[]> {
  const violations: string[] = [];
  const limitPico = parseCredits(budget.limit);
  if (budget.hardStop && chargedPico > limitPico) violations.push(`${name}'s ${budget.scope} budget (hard stop ${budget.limit}) was passed: ${chargedPico} pico charged`);
  const answer = await fetch(`${fuzz.url}/v1/account/budgets`, { headers: { authorization: `Bearer ${account.provisioningKey}` } });
  if (answer.status !== 200) return [...violations, `${name}'s budgets answered ${answer.status}`];
  const listed = (await answer.json()) as { data: Array<{ spent: string; fired_thresholds: number[]; period_start: string }>; alerts: Array<{ id: string; threshold: number; period_start: string }> };
  const row = listed.data[0];
  if (!row || listed.data.length !== 1) return [...violations, `${name} lists ${listed.data.length} budgets, set 1`];
  // Charges of this sequence all fall in the current period but at a boundary; then the listing's spend is the judge.
  const spentPico = parseCredits(row.spent);
  if (spentPico !== chargedPico) return violations;
  const expected = [...new Set(budget.thresholds)].filter((percent) => spentPico * 100n >= limitPico * BigInt(percent)).sort((a, b) => a - b);
  if (JSON.stringify(row.fired_thresholds) !== JSON.stringify(expected)) {
    violations.push(`${name}'s budget (${budget.limit}, thresholds ${budget.thresholds.join(',')}) spent ${spentPico} pico fired ${row.fired_thresholds.join(',') || 'none'}, expected ${expected.join(',') || 'none'}`);
  }
  const firedNow = listed.alerts.filter((alert) => alert.period_start === row.period_start).map((alert) => alert.threshold);
  if (firedNow.length !== new Set(firedNow).size) violations.push(`${name}'s budget fired a threshold twice in one period: ${firedNow.join(',')}`);
  if (account.webhookSecret !== undefined) violations.push(...(await webhookViolations(fuzz, name, account, account.webhookSecret, listed.alerts.map((alert) => alert.id))));
  return violations;
}

/**
 * Webhooks (docs/governance.md): every fired alert of the account reaches its endpoint, once, signed with
 * its own endpoint's secret; nothing of another account's is signed with it.
 */
async function webhookViolations(fuzz: FuzzStack, name: string, account: FuzzAccount, secret: string, alertIds: string[]): Promise<string[]> {
  const verifier = new Webhook(secret);
  // The account's other endpoints (governance-fuzz.ts registers one for key and balance events) get its other types.
  const mine = () => fuzz.webhooks.received.filter((entry) => {
    const event = JSON.parse(entry.body) as { account_id?: string; type?: string };
    return event.account_id === account.accountId && event.type === 'budget.threshold_crossed';
  });
  const deadline = Date.now() + 10_000;
  while (mine().length < alertIds.length && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  const violations: string[] = [];
  const ids = mine().map((entry) => String(entry.headers['webhook-id']));
  if (JSON.stringify([...ids].sort()) !== JSON.stringify([...alertIds].sort())) {
    violations.push(`${name}'s webhooks delivered ${ids.join(',') || 'none'}, its alerts are ${alertIds.join(',') || 'none'}`);
  }
  for (const entry of fuzz.webhooks.received) {
    let verified = true;
    try {
      verifier.verify(entry.body, { 'webhook-id': String(entry.headers['webhook-id']), 'webhook-timestamp': String(entry.headers['webhook-timestamp']), 'webhook-signature': String(entry.headers['webhook-signature']) });
    } catch {
      verified = false;
    }
    const event = JSON.parse(entry.body) as { account_id?: string; type?: string };
    const ofAccount = event.account_id === account.accountId;
    // Its own other types went to its other endpoint, signed with that one's secret.
    if (ofAccount && event.type !== 'budget.threshold_crossed') continue;
    if (verified !== ofAccount) violations.push(`${name}'s webhook secret ${verified ? 'verifies another account\'s event' : 'does not verify its own event'} ${String(entry.headers['webhook-id'])}`);
  }
  return violations;
}
