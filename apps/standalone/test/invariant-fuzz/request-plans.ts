import fc from 'fast-check';
import { isPaid, MODEL_IDS, PROVIDERS, type ModelId, type ProviderId } from './fuzz-stack.js';
import { filePartArb, type FilePartPlan } from './file-input-fuzz.js';

// The invariant fuzzer's plans of interactive requests (HTTP in the three dialects, WebSocket turns,
// compaction, stored-response continuations) with the upstream behaviour of each attempt, and their
// generators; invariant-fuzz.ts mixes them with the batch, background and governance plans into sequences.

/**
 * Shapes that each reproduced a hole of issue 35 before its fix (the seeds and shrunk sequences are in that
 * issue's closing note). All are generated: every fix has merged. A shape may be set to false here only while a
 * newly found hole is being fixed on another branch, with a line naming it; FUZZ_HOLES turns one back on.
 */
export const KNOWN_HOLES = {
  // Hole 1: a free named model whose `models` fallback is paid, served by the paid one without paid admission.
  freeThenPaidFallback: true,
  // Hole 2: an upstream's unsupported_value refusal for one account dropped the parameter for other accounts.
  valueRefusals: true,
  // Hole 4: a client abort after the upstream got the prompt was charged nothing (the check "reached upstream ⇒ recorded").
  abortAfterPromptCharged: true,
  // Hole 6: reasoning_tokens reported beside completion_tokens: 0 were not billed.
  reasoningBesideZeroCompletion: true,
};
export type KnownHoles = typeof KNOWN_HOLES;

export type Dialect = 'chat' | 'messages' | 'responses';

export interface AttemptPlan {
  kind: 'ok' | 'fail' | 'slow' | 'refuseParameter' | 'refuseValue' | 'cut';
  status?: number;
  latencyMs?: number;
  cutAfter?: number;
}

export interface UsagePlan {
  present: boolean;
  prompt: number;
  cached: number;
  completion: number;
  reasoning: number;
}

export interface HttpRequestPlan {
  kind: 'http';
  account: number;
  dialect: Dialect;
  stream: boolean;
  model: ModelId;
  models?: ModelId[];
  provider?: { only?: ProviderId[]; ignore?: ProviderId[]; order?: ProviderId[] };
  temperature?: number;
  topP?: number;
  maxTokens: number;
  /** Chat `n` above 1: several choices (only the OpenAI-kind offers and unstreamed Gemini ones answer them; the hold is n × the output bound). */
  choices?: number;
  idempotency?: { slot: number; variant: number };
  abortAfterMs?: number;
  /** A `file_id` part (chat and responses only; file-input-fuzz.ts): the owner's file, its batch file, or a stranger naming it. */
  file?: FilePartPlan;
  attempts: AttemptPlan[];
  usage: UsagePlan;
}

export interface WsPlan {
  kind: 'ws';
  account: number;
  model: ModelId;
  turns: { warmup: boolean; attempts: AttemptPlan[]; usage: UsagePlan }[];
}

export interface CompactPlan {
  kind: 'compact';
  account: number;
  model: ModelId;
  attempts: AttemptPlan[];
  usage: UsagePlan;
}

/**
 * A stored response continued (issue 41 item 6): `owner` asks (responses, not streamed, stored), then
 * `continuer` sends `previous_response_id` naming that answer. The continuation's conversation carries
 * the first request's tag, so the fakes answer it by the same plan. Another account continuing is the
 * hostile case: 400 previous_response_not_found, nothing upstream, nothing charged.
 */
export interface ContinuePlan {
  kind: 'continue';
  account: number;
  continuer: number;
  model: ModelId;
  stream: boolean;
  maxTokens: number;
  attempts: AttemptPlan[];
  usage: UsagePlan;
}

// ---------------------------------------------------------------- generators

export const attemptArb = (holes: KnownHoles): fc.Arbitrary<AttemptPlan> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constant<AttemptPlan>({ kind: 'ok' }) },
    { weight: 2, arbitrary: fc.constantFrom(500, 429, 503).map((status): AttemptPlan => ({ kind: 'fail', status })) },
    { weight: 2, arbitrary: fc.integer({ min: 50, max: 900 }).map((latencyMs): AttemptPlan => ({ kind: 'slow', latencyMs })) },
    { weight: 1, arbitrary: fc.constant<AttemptPlan>({ kind: 'refuseParameter' }) },
    { weight: holes.valueRefusals ? 2 : 0, arbitrary: fc.constant<AttemptPlan>({ kind: 'refuseValue' }) },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: 2 }).map((cutAfter): AttemptPlan => ({ kind: 'cut', cutAfter })) },
  );

// Output stays ≤ max tokens and input small, so a charge never exceeds its 0.05-credit hold: the balance
// may then never go below zero (billing.md: only by what an admitted request cost beyond its hold).
export const usageArb = (holes: KnownHoles, maxTokens = 32): fc.Arbitrary<UsagePlan> =>
  fc.record({
    present: fc.boolean(),
    prompt: fc.integer({ min: 1, max: 40 }),
    cachedShare: fc.integer({ min: 0, max: 3 }),
    completion: fc.integer({ min: 1, max: maxTokens }),
    reasoningShape: fc.constantFrom(...(holes.reasoningBesideZeroCompletion ? ['none', 'inside', 'beside'] : ['none', 'inside'])),
  }).map(({ present, prompt, cachedShare, completion, reasoningShape }): UsagePlan => {
    const cached = cachedShare === 0 ? 0 : Math.floor((prompt * cachedShare) / 4);
    if (reasoningShape === 'beside') return { present, prompt, cached, completion: 0, reasoning: completion };
    return { present, prompt, cached, completion, reasoning: reasoningShape === 'inside' ? Math.floor(completion / 2) : 0 };
  });

export const modelArb = fc.constantFrom(...MODEL_IDS);

export const httpArb = (holes: KnownHoles, accounts: number): fc.Arbitrary<HttpRequestPlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    dialect: fc.constantFrom<Dialect>('chat', 'messages', 'responses'),
    stream: fc.boolean(),
    model: modelArb,
    fallbacks: fc.option(fc.uniqueArray(modelArb, { minLength: 1, maxLength: 2 }), { freq: 3 }),
    provider: fc.option(fc.record({
      only: fc.option(fc.uniqueArray(fc.constantFrom(...PROVIDERS), { minLength: 1, maxLength: 2 }), { nil: undefined }),
      ignore: fc.option(fc.uniqueArray(fc.constantFrom(...PROVIDERS), { minLength: 1, maxLength: 1 }), { nil: undefined }),
      order: fc.option(fc.uniqueArray(fc.constantFrom(...PROVIDERS), { minLength: 1, maxLength: 3 }), { nil: undefined }),
    }, { requiredKeys: [] }), { freq: 3, nil: undefined }),
    temperature: fc.option(fc.constantFrom(0, 0.5, 1), { nil: undefined }),
    topP: fc.option(fc.constantFrom(0.5, 0.9), { nil: undefined }),
    maxTokens: fc.integer({ min: 8, max: 32 }),
    // A quarter of the chat requests ask for several choices (the rest keep the shapes found before).
    choices: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(2, 3) }),
    idempotency: fc.option(fc.record({ slot: fc.integer({ min: 0, max: 1 }), variant: fc.integer({ min: 0, max: 1 }) }), { freq: 3, nil: undefined }),
    abortAfterMs: fc.option(fc.integer({ min: 0, max: 700 }), { freq: 4, nil: undefined }),
    // About one request in three names a stored file by id (the chat and responses ones keep it).
    file: fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: filePartArb(accounts) }),
    attempts: fc.array(attemptArb(holes), { minLength: 1, maxLength: 3 }),
    usage: usageArb(holes),
  }).map((plan): HttpRequestPlan => {
    let models: ModelId[] | undefined = plan.fallbacks === null ? undefined : [plan.model, ...plan.fallbacks.filter((model) => model !== plan.model)];
    if (models && !holes.freeThenPaidFallback && !isPaid(plan.model)) models = models.filter((model) => !isPaid(model));
    if (models && models.length < 2) models = undefined;
    const { fallbacks: _fallbacks, ...rest } = plan;
    const request: HttpRequestPlan = { ...rest, kind: 'http' };
    if (models) request.models = models; else delete request.models;
    // Several choices are a chat completions field.
    if (request.dialect !== 'chat') request.choices = undefined;
    // File ids are chat completions' and responses' inputs. A file request has its own tag (no Idempotency-Key
    // slot shared with a request without it); a refused one (batch file, stranger) is never aborted: its answer
    // is the check.
    if (request.dialect === 'messages') request.file = undefined;
    if (request.file) {
      request.idempotency = undefined;
      if (request.file.kind !== 'own') request.abortAfterMs = undefined;
      // A stranger is another account: the owner drawn as its own stranger is account B instead.
      if (request.file.kind === 'stranger' && request.file.stranger === request.account) request.file = { ...request.file, stranger: -1 };
    }
    for (const field of ['provider', 'temperature', 'topP', 'idempotency', 'abortAfterMs', 'choices', 'file'] as const) if (request[field] === undefined) delete request[field];
    if (request.usage.completion > request.maxTokens) request.usage = { ...request.usage, completion: request.maxTokens, reasoning: Math.min(request.usage.reasoning, request.maxTokens) };
    // n choices: the upstream reports every choice's tokens (each within the output bound).
    if (request.choices !== undefined) request.usage = { ...request.usage, completion: request.usage.completion * request.choices };
    return request;
  });

export const wsArb = (holes: KnownHoles, accounts: number): fc.Arbitrary<WsPlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    model: modelArb,
    turns: fc.array(fc.record({ warmup: fc.boolean(), attempts: fc.array(attemptArb(holes), { minLength: 1, maxLength: 2 }), usage: usageArb(holes) }), { minLength: 1, maxLength: 3 }),
  }).map((plan) => ({ ...plan, kind: 'ws' as const }));

export const compactArb = (holes: KnownHoles, accounts: number): fc.Arbitrary<CompactPlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    model: modelArb,
    attempts: fc.array(attemptArb(holes), { minLength: 1, maxLength: 2 }),
    usage: usageArb(holes),
  }).map((plan) => ({ ...plan, kind: 'compact' as const }));

export const continueArb = (holes: KnownHoles, accounts: number): fc.Arbitrary<ContinuePlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    continuer: fc.integer({ min: 0, max: accounts - 1 }),
    model: modelArb,
    stream: fc.boolean(),
    maxTokens: fc.integer({ min: 8, max: 32 }),
    attempts: fc.array(attemptArb(holes), { minLength: 1, maxLength: 2 }),
    usage: usageArb(holes),
  }).map((plan) => {
    const usage = plan.usage.completion > plan.maxTokens ? { ...plan.usage, completion: plan.maxTokens, reasoning: Math.min(plan.usage.reasoning, plan.maxTokens) } : plan.usage;
    return { ...plan, usage, kind: 'continue' as const };
  });
