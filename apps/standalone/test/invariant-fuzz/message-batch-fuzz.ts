import fc from 'fast-check';
import { parseCredits } from '@gateway/platform';
import { isPaid, MODEL_IDS, type FuzzAccount, type FuzzStack, type ModelId } from './fuzz-stack.js';
import { batchPrice, call, lineAttemptsArb, lineBehaviour, lineUsageArb, type BatchCharge, type LineAttempt, type LineUsage } from './batch-fuzz.js';

// Anthropic Message Batches in the invariant fuzzer (docs/jobs.md "Message Batches"), as batch-fuzz.ts does
// for OpenAI batches: an account creates a batch of 1–8 generated Messages requests through
// POST /v1/messages/batches (a sixth of them with one bad request, which refuses the whole batch with a 400
// before anything is stored), sometimes cancels it mid-run, reads its results, sometimes deletes it; another
// account tries every route on its id. checkMessageBatches then holds it to the ledger: each `succeeded`
// result's usage.cost is exactly the one standing charge of its request (request ids `<batch>-<index>`, then
// `<batch>-<index>.<n>`), at the batch prices; `errored` and `canceled` ones charged nothing.

export type MessageBatchMalformation = 'maxTokens' | 'duplicate' | 'model' | 'stream' | 'customId';

export interface MessageBatchPlan {
  kind: 'messageBatch';
  account: number;
  requests: { model: ModelId; maxTokens: number; attempts: LineAttempt[]; usage: LineUsage }[];
  /** One request broken this way (at `at`): the create is a 400 and nothing is stored. */
  malformed?: { kind: MessageBatchMalformation; at: number };
  cancelAfterMs?: number;
  /** The owner deletes it once it ended. */
  deleteAfter: boolean;
  /** Who tries the batch's id: another account of the sequence (index) or account B (-1). */
  stranger: number;
}

export const messageBatchArb = (accounts: number): fc.Arbitrary<MessageBatchPlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    requests: fc.array(fc.integer({ min: 8, max: 32 }).chain((maxTokens) => fc.record({
      model: fc.constantFrom(...MODEL_IDS), maxTokens: fc.constant(maxTokens), attempts: lineAttemptsArb(600), usage: lineUsageArb(maxTokens),
    })), { minLength: 1, maxLength: 8 }),
    malformed: fc.oneof(
      { weight: 5, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom<MessageBatchMalformation>('maxTokens', 'duplicate', 'model', 'stream', 'customId'), at: fc.nat() }) },
    ),
    cancelAfterMs: fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 1_500 }) }),
    deleteAfter: fc.boolean(),
    stranger: fc.integer({ min: -1, max: accounts - 1 }),
  }).map((plan): MessageBatchPlan => {
    const batch: MessageBatchPlan = { kind: 'messageBatch', account: plan.account, requests: plan.requests, deleteAfter: plan.deleteAfter, stranger: plan.stranger === plan.account ? -1 : plan.stranger };
    if (plan.malformed) {
      const at = plan.malformed.at % plan.requests.length;
      batch.malformed = { kind: plan.malformed.kind === 'duplicate' && at === 0 ? 'maxTokens' : plan.malformed.kind, at };
    }
    if (plan.cancelAfterMs !== undefined) batch.cancelAfterMs = plan.cancelAfterMs;
    return batch;
  });

interface ResultEntry {
  custom_id: string;
  result: { type: string; message?: { model?: string; usage?: { cost?: string } }; error?: { error?: { type?: string } } };
}

export interface MessageBatchOutcome {
  tag: string;
  account: number;
  plan: MessageBatchPlan;
  createStatus: number;
  batchId?: string;
  processingStatus: string;
  counts?: Record<'processing' | 'succeeded' | 'errored' | 'canceled' | 'expired', number>;
  results: ResultEntry[];
  cancelAsked: boolean;
  violations: string[];
}

const requestTag = (tag: string, index: number) => `${tag}q${index}`;
const DEADLINE_MS = 90_000;

function createBody(plan: MessageBatchPlan, tag: string): unknown {
  return {
    requests: plan.requests.map((request, index) => {
      let customId = requestTag(tag, index);
      let params: Record<string, unknown> = { model: request.model, max_tokens: request.maxTokens, messages: [{ role: 'user', content: `${customId} asks a question` }] };
      if (plan.malformed?.at === index) {
        switch (plan.malformed.kind) {
          case 'maxTokens': { const { max_tokens: _dropped, ...rest } = params; params = rest; break; }
          case 'duplicate': customId = requestTag(tag, 0); break;
          case 'model': params = { ...params, model: 'fz/nope' }; break;
          case 'stream': params = { ...params, stream: true }; break;
          case 'customId': customId = `${customId} not an id!`; break;
        }
      }
      return { custom_id: customId, params };
    }),
  };
}

/** Runs one message batch plan through the edge as its owner (and a stranger) would. */
export async function runMessageBatch(fuzz: FuzzStack, owner: FuzzAccount, stranger: FuzzAccount, plan: MessageBatchPlan, tag: string): Promise<MessageBatchOutcome> {
  const outcome: MessageBatchOutcome = { tag, account: plan.account, plan, createStatus: 0, processingStatus: 'not created', results: [], cancelAsked: false, violations: [] };
  plan.requests.forEach((request, index) => fuzz.plans.set(requestTag(tag, index), { attempts: request.attempts.map((attempt) => lineBehaviour(attempt, request.usage)), used: 0, usage: request.usage }));
  const created = await call(fuzz, owner.apiKey, 'POST', '/v1/messages/batches', createBody(plan, tag));
  outcome.createStatus = created.status;
  if (plan.malformed) {
    if (created.status !== 400 || created.json?.type !== 'error' || created.json?.error?.type !== 'invalid_request_error') {
      outcome.violations.push(`${tag}: a batch with a ${plan.malformed.kind} request answered ${created.status} ${created.text.slice(0, 200)}`);
    }
    return outcome;
  }
  if (created.status !== 200 || typeof created.json?.id !== 'string') {
    outcome.violations.push(`${tag}: creating the message batch answered ${created.status} ${created.text.slice(0, 200)}`);
    return outcome;
  }
  const batchId = created.json.id as string;
  outcome.batchId = batchId;
  const stranger404 = async (when: string) => {
    for (const [method, path] of [
      ['GET', `/v1/messages/batches/${batchId}`], ['POST', `/v1/messages/batches/${batchId}/cancel`],
      ['GET', `/v1/messages/batches/${batchId}/results`], ['DELETE', `/v1/messages/batches/${batchId}`],
      // Not an OpenAI batch's id either.
      ['GET', `/v1/batches/${batchId}`],
    ] as const) {
      const answer = await call(fuzz, stranger.apiKey, method, path);
      if (answer.status !== 404) outcome.violations.push(`${tag}: a stranger's ${method} ${path} ${when} answered ${answer.status}`);
    }
    const listed = await call(fuzz, stranger.apiKey, 'GET', '/v1/messages/batches?limit=1000');
    if (listed.status !== 200 || (listed.json?.data as { id: string }[] | undefined)?.some((batch) => batch.id === batchId)) {
      outcome.violations.push(`${tag}: a stranger's message batch list ${when} answered ${listed.status} or named the owner's batch`);
    }
  };
  await stranger404('while it ran');
  if (plan.cancelAfterMs !== undefined) {
    await new Promise((resolve) => setTimeout(resolve, plan.cancelAfterMs));
    const cancelled = await call(fuzz, owner.apiKey, 'POST', `/v1/messages/batches/${batchId}/cancel`);
    outcome.cancelAsked = true;
    if (cancelled.status !== 200 || !['canceling', 'ended'].includes(cancelled.json?.processing_status)) outcome.violations.push(`${tag}: the owner's cancel answered ${cancelled.status} ${cancelled.text.slice(0, 200)}`);
  }
  const deadline = Date.now() + DEADLINE_MS;
  let batch: any;
  for (;;) {
    const answer = await call(fuzz, owner.apiKey, 'GET', `/v1/messages/batches/${batchId}`);
    if (answer.status !== 200) { outcome.violations.push(`${tag}: the owner's GET of the message batch answered ${answer.status}`); return outcome; }
    batch = answer.json;
    if (batch.processing_status === 'ended' || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  outcome.processingStatus = batch.processing_status;
  outcome.counts = batch.request_counts;
  if (batch.processing_status !== 'ended') { outcome.violations.push(`${tag}: message batch ${batchId} still ${batch.processing_status} ${DEADLINE_MS / 1000} s after it was created`); return outcome; }
  const results = await call(fuzz, owner.apiKey, 'GET', `/v1/messages/batches/${batchId}/results`);
  if (results.status !== 200) outcome.violations.push(`${tag}: the owner's results answered ${results.status}`);
  else outcome.results = results.text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as ResultEntry);
  await stranger404('once it ended');
  if (plan.deleteAfter) {
    const deleted = await call(fuzz, owner.apiKey, 'DELETE', `/v1/messages/batches/${batchId}`);
    if (deleted.status !== 200 || deleted.json?.type !== 'message_batch_deleted') outcome.violations.push(`${tag}: the owner's delete answered ${deleted.status}`);
    const gone = await call(fuzz, owner.apiKey, 'GET', `/v1/messages/batches/${batchId}`);
    if (gone.status !== 404) outcome.violations.push(`${tag}: a deleted message batch answered ${gone.status}`);
  }
  return outcome;
}

/** The message batch invariants after the sequence settled; `charges` are the accounts' standing charges. */
export function checkMessageBatches(outcomes: MessageBatchOutcome[], accounts: FuzzAccount[], charges: BatchCharge[], stats: { exactCharges: number }): string[] {
  const violations: string[] = [];
  for (const outcome of outcomes) {
    violations.push(...outcome.violations);
    const { plan, tag, batchId } = outcome;
    if (!batchId || outcome.processingStatus !== 'ended') continue;
    const owner = accounts[plan.account]!;
    const name = `${tag} (message batch ${batchId}, account ${plan.account})`;
    // A request's attempts: `<batch>-<index>` and `<batch>-<index>.<n>`; at most one stands.
    const mine = charges.filter((charge) => charge.requestId.startsWith(`${batchId}-`));
    const byIndex = new Map<number, BatchCharge[]>();
    for (const charge of mine) {
      if (charge.accountId !== owner.accountId) violations.push(`${name}: ${charge.requestId} charged to another account ${charge.accountId}`);
      const index = Number(/-(\d+)(?:\.\d+)?$/.exec(charge.requestId)?.[1]);
      byIndex.set(index, [...(byIndex.get(index) ?? []), charge]);
    }
    for (const [index, standing] of byIndex) if (standing.length > 1) violations.push(`${name}: request ${index} has ${standing.length} standing charges`);
    if (outcome.results.length !== plan.requests.length) violations.push(`${name}: ${outcome.results.length} results for ${plan.requests.length} requests`);
    const counted = { processing: 0, succeeded: 0, errored: 0, canceled: 0, expired: 0 } as Record<string, number>;
    let succeededSum = 0n;
    outcome.results.forEach((entry, index) => {
      counted[entry.result.type] = (counted[entry.result.type] ?? 0) + 1;
      if (entry.custom_id !== requestTag(tag, index)) violations.push(`${name}: result ${index} is ${entry.custom_id}, not in request order`);
      const request = plan.requests[index];
      const charge = byIndex.get(index)?.[0];
      if (entry.result.type !== 'succeeded') {
        // errored (billing_error for a request that could not be paid, a provider's failure), canceled, expired: nothing charged.
        if (charge) violations.push(`${name}: request ${index} ended ${entry.result.type} ${entry.result.error?.error?.type ?? ''} and was charged ${charge.costPico} pico (${charge.requestId})`);
        if (entry.result.type === 'canceled' && !outcome.cancelAsked) violations.push(`${name}: request ${index} canceled, though only a stranger asked`);
        return;
      }
      const cost = entry.result.message?.usage?.cost;
      if (cost === undefined) { violations.push(`${name}: succeeded request ${index} has no usage.cost`); return; }
      const costPico = parseCredits(cost);
      succeededSum += costPico;
      if (!charge) { if (costPico > 0n || (request && isPaid(request.model))) violations.push(`${name}: succeeded request ${index} (cost ${cost}) has no charge`); return; }
      if (charge.costPico !== costPico) violations.push(`${name}: request ${index} says cost ${costPico} pico, the ledger charged ${charge.costPico}`);
      if (request && charge.modelId !== request.model) violations.push(`${name}: request ${index} for ${request.model} charged as ${charge.modelId}`);
      const expected = batchPrice(charge.modelId, charge.input, charge.cached, charge.output);
      if (charge.costPico !== expected) violations.push(`${name}: request ${index} charged ${charge.costPico} pico, its usage at the batch prices is ${expected}`);
      if (request?.usage.present && !charge.estimated) {
        stats.exactCharges++;
        const scripted = batchPrice(charge.modelId, BigInt(request.usage.prompt), BigInt(request.usage.cached), BigInt(request.usage.completion));
        if (charge.costPico !== scripted) violations.push(`${name}: request ${index}'s upstream reported ${JSON.stringify(request.usage)}, charged ${charge.costPico} pico, expected ${scripted}`);
      }
      if (owner.initialPico < parseCredits('0.05') && request && isPaid(request.model)) violations.push(`${name}: a ${owner.initialPico}-pico account had paid request ${index} (${request.model}) served`);
    });
    const ledgerSum = mine.reduce((sum, charge) => sum + charge.costPico, 0n);
    if (ledgerSum !== succeededSum) violations.push(`${name}: the ledger charged its requests ${ledgerSum} pico, the succeeded results say ${succeededSum}`);
    if (outcome.counts && JSON.stringify({ ...counted, processing: 0 }) !== JSON.stringify({ processing: outcome.counts.processing, succeeded: outcome.counts.succeeded, errored: outcome.counts.errored, canceled: outcome.counts.canceled, expired: outcome.counts.expired })) {
      violations.push(`${name}: request_counts ${JSON.stringify(outcome.counts)}, results ${JSON.stringify(counted)}`);
    }
  }
  return violations;
}
