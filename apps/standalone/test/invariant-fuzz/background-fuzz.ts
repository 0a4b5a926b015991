import fc from 'fast-check';
import { parseCredits } from '@gateway/platform';
import { BACKGROUND_CAP, isPaid, MODEL_IDS, priceOf, tagOf, type FuzzAccount, type FuzzStack, type ModelId } from './fuzz-stack.js';
import { call, lineAttemptsArb, lineBehaviour, lineUsageArb, type LineAttempt, type LineUsage } from './batch-fuzz.js';

// Background responses in the invariant fuzzer (docs/stored-responses.md "Background responses"): an
// account creates one or several `background: true` responses at once (past the fuzz stack's per-account
// cap of BACKGROUND_CAP some answer 429), then polls each to its end, or cancels it (at once: usually still
// queued, or after a while: running), or deletes it when it ended or while it runs; another account tries
// retrieve, cancel, input_items and DELETE on each id first. The fakes answer each response by its plan
// (its tag is in the prompt). checkBackground then holds every response to the ledger: a completed one is
// charged exactly its usage.cost, once (the charges of all its attempts that stand); one that failed or
// never reached a provider charged nothing; a stranger's call changed nothing.

export type BackgroundAction = 'poll' | 'cancelAtOnce' | 'cancelLater' | 'deleteWhenDone' | 'deleteWhileRunning';

export interface BackgroundPlan {
  kind: 'background';
  account: number;
  model: ModelId;
  /** `models` fallbacks after `model` (free and paid mixed), or none. */
  fallbacks?: ModelId[];
  /** The copies are turns of one conversation of the owner's, which the stranger then tries too. */
  conversation: boolean;
  maxTokens: number;
  /** Responses created at once with this plan (each its own tag): more than the cap meets the 429. */
  copies: number;
  /** The fakes' behaviour per provider attempt (the last repeats): ok, an error status, slow. */
  attempts: LineAttempt[];
  usage: LineUsage;
  action: BackgroundAction;
  /** For cancelLater and deleteWhileRunning: this long after the create answered. */
  afterMs: number;
  /** Who tries the ids: another account of the sequence (index) or account B (-1). */
  stranger: number;
}

export const backgroundArb = (accounts: number): fc.Arbitrary<BackgroundPlan> =>
  fc.integer({ min: 8, max: 32 }).chain((maxTokens) => fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    model: fc.constantFrom(...MODEL_IDS),
    fallbacks: fc.option(fc.uniqueArray(fc.constantFrom(...MODEL_IDS), { minLength: 1, maxLength: 2 }), { freq: 3, nil: undefined }),
    conversation: fc.oneof({ weight: 2, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
    maxTokens: fc.constant(maxTokens),
    copies: fc.oneof({ weight: 3, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 2, max: BACKGROUND_CAP + 2 }) }),
    attempts: lineAttemptsArb(900),
    usage: lineUsageArb(maxTokens),
    action: fc.constantFrom<BackgroundAction>('poll', 'poll', 'poll', 'cancelAtOnce', 'cancelLater', 'deleteWhenDone', 'deleteWhileRunning'),
    afterMs: fc.integer({ min: 0, max: 800 }),
    stranger: fc.integer({ min: -1, max: accounts - 1 }),
  })).map((plan): BackgroundPlan => {
    const fallbacks = plan.fallbacks?.filter((model) => model !== plan.model);
    const { fallbacks: _given, ...rest } = plan;
    return { ...rest, ...(fallbacks && fallbacks.length > 0 ? { fallbacks } : {}), kind: 'background', stranger: plan.stranger === plan.account ? -1 : plan.stranger };
  });

/** Every model that may serve the plan: its model, then its fallbacks. */
const candidatesOf = (plan: BackgroundPlan): ModelId[] => [plan.model, ...(plan.fallbacks ?? [])];

/** What the owner and the stranger saw of one background response. */
export interface BackgroundOutcome {
  tag: string;
  account: number;
  plan: BackgroundPlan;
  createStatus: number;
  createCode?: string;
  responseId?: string;
  /** The last status the owner read (`deleted` once the owner's DELETE answered). */
  status: string;
  errorCode?: string;
  costPico?: bigint;
  /** The model the ended response names (a fallback's when one served). */
  servedModel?: string;
  /** The owner asked for a cancel. */
  ownerCancelled: boolean;
  /** The status the owner's cancel answered (`cancelled`, or the state it had ended in). */
  cancelAnswer?: string;
  ownerDeleted: boolean;
  violations: string[];
}

const BACKGROUND_DEADLINE_MS = 45_000;
/** The codes of a refusal for money (402-shaped): the balance, the key's credit limit, a budget's hard stop. */
const MONEY_CODES = ['insufficient_quota', 'key_limit_exceeded', 'budget_exceeded'];
const TERMINAL = ['completed', 'failed', 'cancelled', 'incomplete'];

const codeOf = (json: any): string | undefined => (typeof json?.error?.code === 'string' ? json.error.code : undefined);

/** Runs one plan: its copies created at once, then each driven by the plan's action. */
export async function runBackground(fuzz: FuzzStack, owner: FuzzAccount, stranger: FuzzAccount, plan: BackgroundPlan, tag: string): Promise<BackgroundOutcome[]> {
  const tags = Array.from({ length: plan.copies }, (_copy, copy) => `${tag}c${copy}`);
  for (const copyTag of tags) fuzz.plans.set(copyTag, { attempts: plan.attempts.map((attempt) => lineBehaviour(attempt, plan.usage)), used: 0, usage: plan.usage });
  const conversation = plan.conversation ? await call(fuzz, owner.apiKey, 'POST', '/v1/conversations', { metadata: { tag } }) : undefined;
  const conversationId = conversation?.status === 200 ? (conversation.json?.id as string) : undefined;
  const created = await Promise.all(tags.map((copyTag) => call(fuzz, owner.apiKey, 'POST', '/v1/responses', {
    model: plan.model, input: `${copyTag} asks a question`, max_output_tokens: plan.maxTokens, background: true,
    ...(plan.fallbacks ? { models: candidatesOf(plan) } : {}),
    ...(conversationId ? { conversation: conversationId } : {}),
  })));
  const conversationViolations = conversation === undefined ? [] : await tryConversation(fuzz, owner, stranger, plan, tag, conversation, conversationId);
  return Promise.all(created.map(async (answer, copy): Promise<BackgroundOutcome> => {
    const outcome: BackgroundOutcome = {
      tag: tags[copy]!, account: plan.account, plan, createStatus: answer.status, status: 'not created', ownerCancelled: false, ownerDeleted: false,
      violations: copy === 0 ? conversationViolations : [],
    };
    const code = codeOf(answer.json);
    if (code !== undefined) outcome.createCode = code;
    if (answer.status !== 200) return outcome;
    const id = answer.json?.id as string;
    outcome.responseId = id;
    const name = `${outcome.tag} (${id}, account ${plan.account})`;
    if (answer.json?.status !== 'queued' || answer.json?.background !== true) outcome.violations.push(`${name}: created as ${answer.json?.status}, background ${answer.json?.background}`);
    outcome.status = 'queued';

    const cancel = async () => {
      const cancelled = await call(fuzz, owner.apiKey, 'POST', `/v1/responses/${id}/cancel`);
      outcome.ownerCancelled = true;
      outcome.cancelAnswer = cancelled.json?.status;
      // A response that ended before the cancel arrived is answered as it is.
      if (cancelled.status !== 200 || !TERMINAL.includes(cancelled.json?.status)) outcome.violations.push(`${name}: the owner's cancel answered ${cancelled.status} ${cancelled.json?.status ?? codeOf(cancelled.json) ?? ''}`);
    };
    const remove = async () => {
      const deleted = await call(fuzz, owner.apiKey, 'DELETE', `/v1/responses/${id}`);
      outcome.ownerDeleted = true;
      if (deleted.status !== 200 || deleted.json?.deleted !== true) outcome.violations.push(`${name}: the owner's DELETE answered ${deleted.status}`);
      const after = await call(fuzz, owner.apiKey, 'GET', `/v1/responses/${id}`);
      if (after.status !== 404) outcome.violations.push(`${name}: a deleted response's GET answered ${after.status}`);
      outcome.status = 'deleted';
    };
    // Cancelled at once: before the runners (polling every 100 ms) took it up, as a rule.
    if (plan.action === 'cancelAtOnce') await cancel();
    // The stranger, while it is queued or running: every route is a 404 and changes nothing.
    for (const [method, path] of [
      ['GET', `/v1/responses/${id}`], ['GET', `/v1/responses/${id}/input_items`], ['POST', `/v1/responses/${id}/cancel`], ['DELETE', `/v1/responses/${id}`],
    ] as const) {
      const tried = await call(fuzz, stranger.apiKey, method, path);
      if (tried.status !== 404) outcome.violations.push(`${name}: a stranger's ${method} ${path} answered ${tried.status}`);
    }

    if (plan.action === 'cancelLater' || plan.action === 'deleteWhileRunning') {
      await new Promise((resolve) => setTimeout(resolve, plan.afterMs));
      if (plan.action === 'cancelLater') await cancel(); else await remove();
    }
    if (outcome.status === 'deleted') return outcome;

    const deadline = Date.now() + BACKGROUND_DEADLINE_MS;
    for (;;) {
      const polled = await call(fuzz, owner.apiKey, 'GET', `/v1/responses/${id}`);
      if (polled.status !== 200) { outcome.violations.push(`${name}: the owner's poll answered ${polled.status}`); return outcome; }
      outcome.status = polled.json?.status;
      if (TERMINAL.includes(outcome.status) || Date.now() > deadline) {
        const cost = polled.json?.usage?.cost;
        if (cost !== undefined && cost !== null) outcome.costPico = parseCredits(String(cost));
        if (typeof polled.json?.model === 'string') outcome.servedModel = polled.json.model;
        const errorCode = codeOf(polled.json);
        if (errorCode !== undefined) outcome.errorCode = errorCode;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (!TERMINAL.includes(outcome.status)) outcome.violations.push(`${name}: still ${outcome.status} ${BACKGROUND_DEADLINE_MS / 1000} s after it was created`);
    // Ended: a cancel now answers it as it is (nothing changes).
    if (plan.action === 'poll' && outcome.status === 'completed') {
      const late = await call(fuzz, owner.apiKey, 'POST', `/v1/responses/${id}/cancel`);
      if (late.status !== 200 || late.json?.status !== 'completed') outcome.violations.push(`${name}: a completed response's cancel answered ${late.status} ${late.json?.status ?? ''}`);
    }
    if (plan.action === 'deleteWhenDone') await remove();
    return outcome;
  }));
}

/**
 * A conversation the plan's copies are turns of: the stranger's every conversation route and a response made in
 * it are 404s, and what the owner then lists of it holds none of the stranger's text.
 */
async function tryConversation(
  fuzz: FuzzStack, owner: FuzzAccount, stranger: FuzzAccount, plan: BackgroundPlan, tag: string,
  created: { status: number; json: any }, id: string | undefined,
): Promise<string[]> {
  const name = `${tag} conversation (account ${plan.account})`;
  if (created.status !== 200 || id === undefined) return [`${name}: creating it answered ${created.status} ${codeOf(created.json) ?? ''}`];
  const violations: string[] = [];
  const intrusion = `${tag} intruder text`;
  for (const [method, path, body] of [
    ['GET', `/v1/conversations/${id}`, undefined],
    ['GET', `/v1/conversations/${id}/items`, undefined],
    ['POST', `/v1/conversations/${id}`, { metadata: { stolen: 'yes' } }],
    ['POST', `/v1/conversations/${id}/items`, { items: [{ type: 'message', role: 'user', content: intrusion }] }],
    ['POST', '/v1/responses', { model: plan.model, input: intrusion, conversation: id }],
    ['DELETE', `/v1/conversations/${id}`, undefined],
  ] as const) {
    const tried = await call(fuzz, stranger.apiKey, method, path, body);
    if (tried.status !== 404) violations.push(`${name}: a stranger's ${method} ${path} answered ${tried.status}`);
  }
  const mine = await call(fuzz, owner.apiKey, 'GET', `/v1/conversations/${id}`);
  if (mine.status !== 200 || mine.json?.metadata?.tag !== tag) violations.push(`${name}: after the stranger, the owner's GET answered ${mine.status} ${JSON.stringify(mine.json?.metadata ?? null)}`);
  const items = await call(fuzz, owner.apiKey, 'GET', `/v1/conversations/${id}/items?limit=100`);
  if (items.status !== 200) violations.push(`${name}: the owner's items list answered ${items.status}`);
  else if (items.text.includes(intrusion)) violations.push(`${name}: the stranger's text is in the owner's conversation`);
  return violations;
}

/** The ledger's charges as checkBackground needs them (the standing ones: voided attempts left out). */
export interface BackgroundCharge {
  requestId: string;
  accountId: string;
  modelId: string;
  providerId: string;
  costPico: bigint;
  input: bigint;
  cached: bigint;
  output: bigint;
  estimated: boolean;
  insured: string;
}

/** The background invariants after the sequence settled. */
export async function checkBackground(fuzz: FuzzStack, outcomes: BackgroundOutcome[], accounts: FuzzAccount[], charges: BackgroundCharge[], stats: { exactCharges: number }): Promise<string[]> {
  const violations: string[] = [];
  // An ended response stays as it ended (read again once the ledger settled): a cancelled one is not run after all.
  await Promise.all(outcomes.map(async (outcome) => {
    if (!outcome.responseId || !TERMINAL.includes(outcome.status)) return;
    const again = await call(fuzz, accounts[outcome.account]!.apiKey, 'GET', `/v1/responses/${outcome.responseId}`);
    if (again.status !== 200 || again.json?.status !== outcome.status) violations.push(`${outcome.tag} (${outcome.responseId}): ended ${outcome.status}, later read ${again.status} ${again.json?.status ?? ''}`);
  }));
  // The tags some provider got (the fakes' requests are kept until the sequence is checked).
  const reached = new Set(Object.values(fuzz.fakes).flatMap((fake) => fake.requests).map((request) => tagOf(request.body)));
  for (const outcome of outcomes) {
    violations.push(...outcome.violations);
    const { plan, responseId } = outcome;
    const owner = accounts[plan.account]!;
    // Created: 200 queued; refused: a 4xx in the envelope (the cap's 429, a rate limit, a 402), never a 5xx.
    if (outcome.createStatus >= 500 || outcome.createStatus === 0) violations.push(`${outcome.tag}: creating a background response answered ${outcome.createStatus} ${outcome.createCode ?? ''}`);
    if (outcome.createStatus === 429 && outcome.createCode !== 'background_responses_limit' && outcome.createCode !== 'rate_limit_exceeded') {
      violations.push(`${outcome.tag}: a 429 at creation with code ${outcome.createCode}`);
    }
    if (!responseId) continue;
    const name = `${outcome.tag} (${responseId}, account ${plan.account}, ${outcome.status}${outcome.ownerCancelled ? ', cancel asked' : ''})`;
    // Its attempts' request ids: the response id, then `<id>.<n>` (background-runner.ts).
    const mine = charges.filter((charge) => charge.requestId === responseId || charge.requestId.startsWith(`${responseId}.`));
    for (const charge of mine) if (charge.accountId !== owner.accountId) violations.push(`${name}: ${charge.requestId} charged to another account ${charge.accountId}`);
    if (mine.length > 1) violations.push(`${name}: ${mine.length} standing charges (${mine.map((charge) => charge.requestId).join(', ')}), one at most`);
    const charged = mine.reduce((sum, charge) => sum + charge.costPico, 0n);
    // Only the owner's own cancel ends it cancelled (the stranger's was a 404).
    if (outcome.status === 'cancelled' && !outcome.ownerCancelled) violations.push(`${name}: cancelled, though only a stranger asked`);
    // Cancelled stays cancelled: a run that ends after the cancel records nothing over it.
    if (outcome.cancelAnswer === 'cancelled' && outcome.status !== 'cancelled' && outcome.status !== 'deleted') violations.push(`${name}: its cancel answered cancelled, it ended ${outcome.status}`);
    if (outcome.status === 'deleted' && !outcome.ownerDeleted) violations.push(`${name}: gone, though only a stranger deleted it`);
    // Nothing reached a provider: nothing charged (a cancel before the run, a 0-credit refusal, a delete while queued).
    if (!reached.has(outcome.tag) && charged > 0n) violations.push(`${name}: charged ${charged} pico, no provider got its prompt`);
    if (outcome.status === 'completed') {
      // Charged exactly once, exactly the usage.cost its owner reads.
      if (outcome.costPico === undefined) { violations.push(`${name}: completed without usage.cost`); continue; }
      if (charged !== outcome.costPico) violations.push(`${name}: usage.cost is ${outcome.costPico} pico, the ledger charged ${charged}`);
      const served = (outcome.servedModel ?? plan.model) as ModelId;
      if (!candidatesOf(plan).includes(served)) violations.push(`${name}: asked ${candidatesOf(plan).join(', ')}, answered as ${served}`);
      if (mine.length === 0 && (outcome.costPico > 0n || isPaid(served))) violations.push(`${name}: completed on paid ${served} with no charge`);
      if (mine[0] && mine[0].modelId !== served) violations.push(`${name}: answered as ${served}, charged as ${mine[0].modelId}`);
      const charge = mine[0];
      if (charge && !candidatesOf(plan).includes(charge.modelId as ModelId)) violations.push(`${name}: asked ${candidatesOf(plan).join(', ')}, charged as ${charge.modelId}`);
      if (charge && plan.usage.present && !charge.estimated && !charge.insured) {
        stats.exactCharges++;
        const expected = priceOf(charge.modelId, BigInt(plan.usage.prompt), BigInt(plan.usage.cached), BigInt(plan.usage.completion));
        if (charge.costPico !== expected) violations.push(`${name}: the upstream reported ${JSON.stringify(plan.usage)} on ${charge.providerId}, charged ${charge.costPico} pico, expected ${expected}`);
      }
    } else if (outcome.status === 'failed') {
      // A provider's failure, a refusal for money or a budget: nothing charged.
      if (charged > 0n) violations.push(`${name}: failed (${outcome.errorCode ?? 'no code'}) and charged ${charged} pico`);
      // As for interactive answers, no server error: a refusal for money is 402-shaped, a provider's failure no_upstream.
      if (outcome.errorCode === undefined || outcome.errorCode === 'server_error') violations.push(`${name}: failed with ${outcome.errorCode ?? 'no code'}`);
      if (owner.initialPico < parseCredits('0.05') && candidatesOf(plan).some(isPaid) && !reached.has(outcome.tag) && !MONEY_CODES.includes(outcome.errorCode ?? '')) {
        violations.push(`${name}: a ${owner.initialPico}-pico account's paid run failed with ${outcome.errorCode}, not a refusal for money`);
      }
    }
    // An account without the least hold (0.05) is never served when any model that may serve is paid (its
    // admission covers them all: a free model with a paid fallback is a paid request), in the background either.
    if (owner.initialPico < parseCredits('0.05') && candidatesOf(plan).some(isPaid) && outcome.status === 'completed') {
      violations.push(`${name}: a ${owner.initialPico}-pico account's run on ${candidatesOf(plan).join(', ')} (some paid) completed`);
    }
  }
  return violations;
}
