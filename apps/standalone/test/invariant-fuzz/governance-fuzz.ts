import fc from 'fast-check';
import { formatCredits, parseCredits } from '@gateway/platform';
import type { FuzzAccount, FuzzStack } from './fuzz-stack.js';
import { signedIn, type Person, type SignInStack } from '../sign-in-harness.js';

// Members and roles in the invariant fuzzer (issue 42, docs/governance.md "Sign-in and roles"): a person
// is made a member of a fuzz account with a generated role, signs in through the stack's signed-in edge
// (fuzz-stack.ts) and acts on the account's keys, low-balance threshold and webhooks, asks the operator's
// credits route, and reaches for another account's key and endpoint; the account's provisioning key
// (the owner) changes keys beside it. Each step is checked as it runs: a step the role table refuses is a
// 403 in the standard envelope and changes nothing of either account (their keys, budgets, thresholds,
// endpoints, top-ups, members and audit entries, read from the rows before and after); a step it allows
// answers as for the owner, and on another account's ids it is a 404 that changes nothing there either.
// What the key changes that took effect must produce as webhook events is left for account-events.ts.

export type MemberRole = 'owner' | 'admin' | 'billing' | 'viewer';
type Permission = 'keys.read' | 'keys.write' | 'budgets.write' | 'webhooks.read' | 'webhooks.write' | 'credits.write';

/**
 * docs/governance.md's role table for the actions generated here, written out again rather than imported
 * from libs/platform roles.ts: the routes are judged against the documented table, not against themselves.
 * `credits.write` (the operator's top-up route) is no account role's.
 */
const MAY: Readonly<Record<MemberRole, ReadonlySet<Permission>>> = {
  owner: new Set<Permission>(['keys.read', 'keys.write', 'budgets.write', 'webhooks.read', 'webhooks.write']),
  admin: new Set<Permission>(['keys.read', 'keys.write', 'budgets.write', 'webhooks.read', 'webhooks.write']),
  billing: new Set<Permission>(['keys.read', 'webhooks.read']),
  viewer: new Set<Permission>(['keys.read']),
};

type Actor = 'member' | 'owner';
type KeyChange = 'disableKey' | 'enableKey' | 'renameKey' | 'deleteKey';
type Foreign = 'getKey' | 'disableKey' | 'deleteKey' | 'putKeyBudget' | 'patchWebhook' | 'deleteWebhook';
export type GovernanceStep =
  | { op: 'createKey'; by: Actor; expiring: boolean }
  | { op: KeyChange; by: Actor; key: number }
  | { op: 'listKeys' | 'listWebhooks' | 'createWebhook' | 'setLowBalance'; by: 'member' }
  | { op: 'topUp'; on: 'own' | 'other' }
  | { op: 'foreign'; what: Foreign };

export interface GovernancePlan {
  kind: 'governance';
  account: number;
  role: MemberRole;
  /** The account reached for: another of the sequence's, or account B (-1). */
  other: number;
  /** The owner sets the account's low-balance threshold (lowBalanceThreshold) before the steps. */
  lowBalance: boolean;
  steps: GovernanceStep[];
}

/** Key events a key's changes must produce (account-events.ts), and its state as the steps left it. */
export interface TrackedKey {
  keyId: string;
  expiring: boolean;
  disabled: boolean;
  deleted: boolean;
  expected: { created: number; disabled: number; deleted: number; expired: number };
}

export interface GovernanceOutcome {
  accountId: string;
  role: MemberRole;
  keys: TrackedKey[];
  /** The threshold as set, and the balance the set answered with (the first set's is the highest). */
  lowBalance?: { thresholdPico: bigint; balanceAtSetPico: bigint };
  /** Steps answered as the role table and the account's state say they must not have been. */
  violations: string[];
  steps: number;
  /** How each step ended (`refused 403`, `foreign 404`, `allowed 201`…), for the run's tally. */
  answers: string[];
}

export const governanceArb = (accounts: number): fc.Arbitrary<GovernancePlan> => {
  const by = fc.constantFrom<Actor>('member', 'member', 'owner');
  const step: fc.Arbitrary<GovernanceStep> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ op: fc.constant('createKey' as const), by, expiring: fc.boolean() }) },
    { weight: 4, arbitrary: fc.record({ op: fc.constantFrom<KeyChange>('disableKey', 'enableKey', 'renameKey', 'deleteKey'), by, key: fc.nat(3) }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constantFrom('listKeys' as const, 'listWebhooks' as const, 'createWebhook' as const, 'setLowBalance' as const), by: fc.constant('member' as const) }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('topUp' as const), on: fc.constantFrom<'own' | 'other'>('own', 'other') }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('foreign' as const), what: fc.constantFrom<Foreign>('getKey', 'disableKey', 'deleteKey', 'putKeyBudget', 'patchWebhook', 'deleteWebhook') }) },
  );
  return fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    role: fc.constantFrom<MemberRole>('owner', 'admin', 'billing', 'viewer'),
    other: fc.integer({ min: -1, max: accounts - 1 }),
    lowBalance: fc.boolean(),
    steps: fc.array(step, { minLength: 1, maxLength: 8 }),
  }).map((plan) => ({ ...plan, other: plan.other === plan.account ? -1 : plan.other, kind: 'governance' as const }));
};

/** One threshold per account (whichever plan sets it): 0.0001 credits under its first balance, so a paid answer or two crosses it. */
export function lowBalanceThreshold(account: FuzzAccount): bigint {
  const margin = parseCredits('0.0001');
  return account.initialPico > margin ? account.initialPico - margin : 0n;
}

export const KEY_EVENT_TYPES = ['api_key.created', 'api_key.disabled', 'api_key.deleted', 'api_key.expired'] as const;

// Every change of governed state (a plan's set-up and steps) runs alone: the rows read before and after a
// refused step can then differ only by that step.
let governed: Promise<unknown> = Promise.resolve();
function alone<T>(work: () => Promise<T>): Promise<T> {
  const next = governed.then(work, work);
  governed = next.catch(() => undefined);
  return next;
}

/** What a refused step must leave as it was: the account's governed rows, as one string. */
async function stateOf(fuzz: FuzzStack, accountId: string): Promise<string> {
  const { rows } = await fuzz.db.query<Record<string, string | null>>(
    `select (select coalesce(json_agg(json_build_array(id, name, disabled, deleted_at, credit_limit, expires_at) order by id), '[]') from auth.api_keys where account_id = $1)::text as keys,
            (select coalesce(json_agg(json_build_array(key_id, period, limit_pico, thresholds, hard_stop, updated_at) order by key_id), '[]') from ledger.budgets where account_id = $1)::text as budgets,
            (select coalesce(json_agg(json_build_array(id, url, event_types, enabled, updated_at) order by id), '[]') from ledger.webhook_endpoints where account_id = $1)::text as webhooks,
            (select low_balance_threshold_pico::text from ledger.balances where account_id = $1) as low_balance,
            (select count(*)::text from ledger.journal where account_id = $1 and kind = 'topup') as top_ups,
            (select count(*)::text from auth.members where account_id = $1) as members,
            (select count(*)::text from auth.audit_log where account_id = $1) as auth_audit,
            (select count(*)::text from ledger.audit_log where account_id = $1) as ledger_audit`,
    [accountId]);
  return JSON.stringify(rows[0]);
}

interface Answer { status: number; text: string }

/** Runs one governance plan: set-up by the owner, then each step, checked as it answers. */
export async function runGovernance(fuzz: FuzzStack, account: FuzzAccount, other: FuzzAccount, plan: GovernancePlan, name: string): Promise<GovernanceOutcome> {
  const outcome: GovernanceOutcome = { accountId: account.accountId, role: plan.role, keys: [], violations: [], steps: 0, answers: [] };
  const asOwner = async (method: string, path: string, body?: unknown): Promise<Answer> => {
    const response = await fetch(`${fuzz.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${account.provisioningKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, text: await response.text() };
  };
  const threshold = lowBalanceThreshold(account);
  const setLowBalance = async (send: (method: string, path: string, body?: unknown) => Promise<Answer>) => {
    const answer = await send('PUT', '/v1/account/budgets/low-balance', { threshold: formatCredits(threshold) });
    if (answer.status === 200) {
      const balance = parseCredits((JSON.parse(answer.text) as { balance: string }).balance);
      if (!outcome.lowBalance || balance > outcome.lowBalance.balanceAtSetPico) outcome.lowBalance = { thresholdPico: threshold, balanceAtSetPico: balance };
    }
    return answer;
  };

  // Set-up by the owner: an endpoint for the key and balance events first (so every change after it is
  // announced), the threshold, then the member, who signs in.
  const person = `${name}-m`;
  const browser = await alone(async () => {
    const hook = await asOwner('POST', '/v1/account/webhooks', { url: fuzz.webhooks.url, event_types: [...KEY_EVENT_TYPES, 'balance.low'] });
    if (hook.status !== 201) throw new Error(`${name}: webhook create ${hook.status}: ${hook.text}`);
    if (plan.lowBalance) {
      const set = await setLowBalance(asOwner);
      if (set.status !== 200) throw new Error(`${name}: low-balance set ${set.status}: ${set.text}`);
    }
    fuzz.signIn.issuer.addPerson({ id: person, email: `${person}@example.com`, groups: [] });
    const member = await asOwner('POST', '/v1/account/members', { issuer: fuzz.signIn.issuer.issuer, subject: person, role: plan.role });
    if (member.status !== 201) throw new Error(`${name}: member add ${member.status}: ${member.text}`);
    return signedIn({ url: fuzz.signIn.url, issuer: fuzz.signIn.issuer } as SignInStack, person as Person);
  });
  const asMember = async (method: string, path: string, body?: unknown): Promise<Answer> => {
    const answer = await browser.browser.fetch(`${fuzz.signIn.url}${path}`, {
      method,
      headers: { 'x-csrf-token': browser.csrf, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      stopBefore: () => true,
    });
    return { status: answer.status, text: answer.text };
  };

  for (const [index, step] of plan.steps.entries()) {
    await alone(async () => {
      outcome.steps++;
      const label = `${name} step ${index} (${plan.role}${'by' in step && step.by === 'owner' ? ' account, by its provisioning key' : ''}: ${JSON.stringify(step)})`;
      const run = await stepRequest(fuzz, account, other, outcome, step, setLowBalance);
      if (run === undefined) return;
      const by = 'by' in step ? step.by : 'member';
      const send = by === 'owner' ? asOwner : asMember;
      const allowed = by === 'owner' || MAY[plan.role].has(run.permission);
      const before = allowed && !run.foreign ? undefined : await Promise.all([stateOf(fuzz, account.accountId), stateOf(fuzz, other.accountId)]);
      const answer = await run.send(send);
      outcome.answers.push(`${!allowed ? 'refused' : run.foreign ? 'foreign' : 'allowed'} ${answer.status}`);
      if (!allowed) {
        let envelope: { error?: { type?: unknown; code?: unknown; message?: unknown } } | undefined;
        try { envelope = JSON.parse(answer.text) as typeof envelope; } catch { envelope = undefined; }
        const error = envelope?.error;
        if (answer.status !== 403) outcome.violations.push(`${label}: the role may not ${run.permission}, answered ${answer.status} ${answer.text.slice(0, 200)}`);
        else if (error?.type !== 'permission_error' || typeof error.code !== 'string' || typeof error.message !== 'string') outcome.violations.push(`${label}: a 403 outside the standard envelope: ${answer.text.slice(0, 200)}`);
      } else if (answer.status !== run.expected) {
        outcome.violations.push(`${label}: expected ${run.expected}, answered ${answer.status} ${answer.text.slice(0, 200)}`);
      } else {
        run.applied?.(answer);
      }
      if (before) {
        const after = await Promise.all([stateOf(fuzz, account.accountId), stateOf(fuzz, other.accountId)]);
        if (after[0] !== before[0]) outcome.violations.push(`${label}: ${allowed ? 'a foreign step' : 'a refused step'} changed its account: ${before[0]} → ${after[0]}`);
        if (after[1] !== before[1]) outcome.violations.push(`${label}: ${allowed ? 'a foreign step' : 'a refused step'} changed the other account: ${before[1]} → ${after[1]}`);
      }
    });
  }
  return outcome;
}

interface StepRequest {
  permission: Permission;
  /** On another account's ids (or its credits). */
  foreign: boolean;
  /** The answer when the role may (the owner's own answer; 404 on another account's ids). */
  expected: number;
  send(send: (method: string, path: string, body?: unknown) => Promise<Answer>): Promise<Answer>;
  /** Records what an allowed step changed (the key events it owes). */
  applied?(answer: Answer): void;
}

/** The request of a step, what it needs, and what it changes once it answered as expected; undefined: nothing to do. */
async function stepRequest(
  fuzz: FuzzStack, account: FuzzAccount, other: FuzzAccount, outcome: GovernanceOutcome, step: GovernanceStep,
  setLowBalance: (send: (method: string, path: string, body?: unknown) => Promise<Answer>) => Promise<Answer>,
): Promise<StepRequest | undefined> {
  const mine = (permission: Permission, expected: number, send: StepRequest['send'], applied?: StepRequest['applied']): StepRequest => ({ permission, foreign: false, expected, send, ...(applied ? { applied } : {}) });
  const theirs = (permission: Permission, send: StepRequest['send']): StepRequest => ({ permission, foreign: true, expected: 404, send });
  switch (step.op) {
    case 'createKey': {
      const body = { name: 'governed', credit_limit: null, ...(step.expiring ? { expires_at: new Date(Date.now() + 1_000).toISOString() } : {}) };
      return mine('keys.write', 201, (send) => send('POST', '/v1/account/keys', body), (answer) => {
        const keyId = (JSON.parse(answer.text) as { id: string }).id;
        outcome.keys.push({ keyId, expiring: step.expiring, disabled: false, deleted: false, expected: { created: 1, disabled: 0, deleted: 0, expired: step.expiring ? 1 : 0 } });
      });
    }
    case 'disableKey': case 'enableKey': case 'renameKey': case 'deleteKey': {
      // Only keys without an expiry change: an expiring key's one event is its expiry.
      const changeable = outcome.keys.filter((key) => !key.expiring);
      const key = changeable[step.key % Math.max(1, changeable.length)];
      if (!key) return undefined;
      const path = `/v1/account/keys/${key.keyId}`;
      const expected = key.deleted ? 404 : 200;
      if (step.op === 'deleteKey') return mine('keys.write', expected, (send) => send('DELETE', path), () => { key.deleted = true; key.expected.deleted = 1; });
      const body = step.op === 'renameKey' ? { name: 'renamed' } : { disabled: step.op === 'disableKey' };
      return mine('keys.write', expected, (send) => send('PATCH', path, body), () => {
        // The 404 of a deleted key: nothing changed, and no event is owed.
        if (key.deleted) return;
        if (step.op === 'disableKey' && !key.disabled) key.expected.disabled++;
        if (step.op !== 'renameKey') key.disabled = step.op === 'disableKey';
      });
    }
    case 'listKeys': return mine('keys.read', 200, (send) => send('GET', '/v1/account/keys'));
    case 'listWebhooks': return mine('webhooks.read', 200, (send) => send('GET', '/v1/account/webhooks'));
    // An endpoint for a type nothing here sends: the account had one already, so what it is announced does not change.
    case 'createWebhook': return mine('webhooks.write', 201, (send) => send('POST', '/v1/account/webhooks', { url: fuzz.webhooks.url, event_types: ['credits.topped_up'] }));
    case 'setLowBalance': return mine('budgets.write', 200, (send) => setLowBalance(send));
    case 'topUp': {
      const target = step.on === 'own' ? account : other;
      return { permission: 'credits.write', foreign: true, expected: 403, send: (send) => send('POST', `/v1/admin/accounts/${target.accountId}/credits`, { amount: '5' }) };
    }
    case 'foreign': {
      const keyPath = `/v1/account/keys/${other.keyId}`;
      switch (step.what) {
        case 'getKey': return theirs('keys.read', (send) => send('GET', keyPath));
        case 'disableKey': return theirs('keys.write', (send) => send('PATCH', keyPath, { disabled: true }));
        case 'deleteKey': return theirs('keys.write', (send) => send('DELETE', keyPath));
        case 'putKeyBudget': return theirs('budgets.write', (send) => send('PUT', `/v1/account/budgets/keys/${other.keyId}`, { period: 'monthly', limit: '0.01', thresholds: [50], hard_stop: true }));
        case 'patchWebhook': case 'deleteWebhook': {
          const { rows } = await fuzz.db.query<{ id: string }>('select id from ledger.webhook_endpoints where account_id = $1 order by id limit 1', [other.accountId]);
          const endpoint = rows[0]?.id;
          if (endpoint === undefined) return undefined;
          const path = `/v1/account/webhooks/${endpoint}`;
          return step.what === 'patchWebhook' ? theirs('webhooks.write', (send) => send('PATCH', path, { enabled: false })) : theirs('webhooks.write', (send) => send('DELETE', path));
        }
      }
    }
  }
}
