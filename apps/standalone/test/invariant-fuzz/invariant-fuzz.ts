import fc from 'fast-check';
import { parseCredits } from '@gateway/platform';
import type { FakeBehaviour } from '@gateway/testing';
import {
  isPaid, MODEL_IDS, newAccount, priceOf, PROVIDERS, tagOf, upstreamModelOf, WebSocket,
  type FuzzAccount, type FuzzBudget, type FuzzStack, type ModelId, type ProviderId,
} from './fuzz-stack.js';
import { batchArb, checkBatches, runBatch, type BatchOutcome, type BatchPlan } from './batch-fuzz.js';
import { accountEventViolations } from './account-events.js';
import { alertRowViolations, budgetViolations } from './budget-alerts.js';
import { governanceArb, runGovernance, type GovernanceOutcome, type GovernancePlan } from './governance-fuzz.js';
import { settledLedger } from './ledger-rows.js';
import {
  compactArb, continueArb, httpArb, KNOWN_HOLES, wsArb,
  type AttemptPlan, type CompactPlan, type ContinuePlan, type HttpRequestPlan, type KnownHoles, type UsagePlan, type WsPlan,
} from './request-plans.js';
import { checkMessageBatches, messageBatchArb, runMessageBatch, type MessageBatchOutcome, type MessageBatchPlan } from './message-batch-fuzz.js';
import { backgroundArb, checkBackground, runBackground, type BackgroundOutcome, type BackgroundPlan } from './background-fuzz.js';
import { checkFileInputs, fileIdOf, uploadOwnerFiles, type FileOutcome, type OwnerFiles } from './file-input-fuzz.js';

// Issue 35's invariant fuzzer: fast-check generates sequences of requests from several fresh accounts
// (dialects, streams, `models`, `provider`, Idempotency-Keys, client aborts, WebSocket turns and warm-ups,
// compaction, small balances, credit limits, a rate-limited tier, files and batches: batch-fuzz.ts, background
// responses: background-fuzz.ts, Anthropic message batches: message-batch-fuzz.ts, file ids as inputs:
// file-input-fuzz.ts) and the behaviour of the fake upstreams
// for each (failures, slow first byte, refused parameters and values, streams cut, usage in each
// provider's shape or absent); after each sequence checkSequence asserts the ledger's invariants, and a
// failure shrinks to a minimal sequence whose seed fast-check prints.

export { KNOWN_HOLES, type KnownHoles };

type RequestPlan = HttpRequestPlan | WsPlan | CompactPlan | ContinuePlan | BatchPlan | BackgroundPlan | MessageBatchPlan | GovernancePlan;

interface AccountPlan {
  balance: string;
  tier: 'tier-1' | 'free';
  creditLimit: string | null;
  /** A budget on the account or its key (issue 42): a hard stop bounds spend, thresholds fire once. */
  budget: FuzzBudget | null;
}

export interface SequencePlan {
  accounts: AccountPlan[];
  concurrency: number;
  requests: RequestPlan[];
}

export function sequenceArb(holes: KnownHoles = KNOWN_HOLES): fc.Arbitrary<SequencePlan> {
  const accountArb = fc.record({
    // 0.12: a batch of dear lines runs out of it midway (each line holds 0.05 while it runs).
    balance: fc.constantFrom('0', '0.01', '0.12', '0.3', '2', '2'),
    tier: fc.constantFrom<'tier-1' | 'free'>('tier-1', 'tier-1', 'free'),
    creditLimit: fc.constantFrom<string | null>(null, null, '0.06', '0.2'),
    budget: fc.option(fc.record({
      scope: fc.constantFrom<'account' | 'key'>('account', 'key'),
      period: fc.constantFrom<'weekly' | 'monthly'>('weekly', 'monthly'),
      limit: fc.constantFrom('0.000002', '0.00005', '0.08', '0.3'),
      thresholds: fc.uniqueArray(fc.integer({ min: 1, max: 100 }), { minLength: 0, maxLength: 3 }),
      hardStop: fc.boolean(),
    }), { freq: 2, nil: null }),
  });
  return fc.integer({ min: 1, max: 3 }).chain((accounts) =>
    fc.record({
      accounts: fc.array(accountArb, { minLength: accounts, maxLength: accounts }),
      concurrency: fc.integer({ min: 1, max: 4 }),
      requests: fc.array(
        fc.oneof(
          { weight: 8, arbitrary: httpArb(holes, accounts) },
          { weight: 1, arbitrary: wsArb(holes, accounts) },
          { weight: 1, arbitrary: compactArb(holes, accounts) },
          { weight: 1, arbitrary: continueArb(holes, accounts) },
          { weight: 2, arbitrary: batchArb(accounts) },
          { weight: 2, arbitrary: backgroundArb(accounts) },
          { weight: 1, arbitrary: messageBatchArb(accounts) },
          { weight: 1, arbitrary: governanceArb(accounts) },
        ),
        { minLength: 1, maxLength: 14 },
      ),
    }));
}

// ---------------------------------------------------------------- running a sequence

const REFUSAL = (param: string, code: string) => ({
  error: { message: `Unsupported ${code === 'unsupported_value' ? 'value' : 'parameter'}: '${param}'.`, type: 'invalid_request_error', param, code },
});

function behaviourOf(attempt: AttemptPlan, usage: UsagePlan): FakeBehaviour {
  const scripted: FakeBehaviour = {
    usage: usage.present
      ? { prompt_tokens: usage.prompt, completion_tokens: usage.completion, cached_tokens: usage.cached, ...(usage.reasoning > 0 ? { reasoning_tokens: usage.reasoning } : {}) }
      : 'absent',
    // Reasoning beside completion_tokens: 0 comes with no text (a reasoning model that only thought):
    // with text, the gateway rightly counts the text itself (it never believes 0 output for content).
    ...(usage.present && usage.completion === 0 ? { text: '' } : {}),
  };
  switch (attempt.kind) {
    case 'ok': return scripted;
    case 'fail': return { ...scripted, status: attempt.status! };
    case 'slow': return { ...scripted, latencyMs: attempt.latencyMs! };
    case 'refuseParameter': return { ...scripted, status: 400, errorBody: REFUSAL('top_p', 'unsupported_parameter') };
    case 'refuseValue': return { ...scripted, status: 400, errorBody: REFUSAL('temperature', 'unsupported_value') };
    case 'cut': return { ...scripted, cutAfterChunks: attempt.cutAfter! };
  }
}

/** What the client saw of one HTTP request or WebSocket turn. */
interface Outcome {
  tag: string;
  account: number;
  kind: Exclude<RequestPlan['kind'], 'batch' | 'background' | 'messageBatch' | 'governance'>;
  plan: HttpRequestPlan | CompactPlan | ContinuePlan | WsPlan['turns'][number];
  /** A continuation: whose response it named (`first` of the same tag: the answer it continued). */
  continued?: { owner: number; firstStatus: number };
  models: readonly string[];
  status: number;
  code?: string;
  requestId?: string;
  aborted: boolean;
  replayed: boolean;
  /** usage.cost of a completed answer (the last `"cost"` in its body or stream), pico-credits. */
  costPico?: bigint;
  servedModel?: string;
}

export interface RunStats {
  runs: number;
  requests: number;
  failures: number;
  /** Answers by status (`200`, `402 insufficient_quota`, `ws 200`, `aborted`…), to see what the runs exercised. */
  outcomes: Record<string, number>;
  /** Charges compared exactly with the usage the fake upstream reported. */
  exactCharges: number;
  /** Upstream requests for several choices, per wire (OpenAI `n`, Gemini `candidateCount`): to see both were exercised. */
  choiceRequests?: { openai: number; gemini: number };
  /** The sequence running now: fast-check's time limit stops waiting for it, the caller must not. */
  current?: Promise<void>;
}

const COST = /"cost":"?(\d+(?:\.\d+)?)"?/g;
function lastCost(text: string): bigint | undefined {
  let last: string | undefined;
  for (const match of text.matchAll(COST)) last = match[1];
  return last === undefined ? undefined : parseCredits(last);
}
const MODEL = /"model":"(fz\/\w+)"/;

function bodyOf(plan: HttpRequestPlan, content: string, fileId?: string): { path: string; body: Record<string, unknown> } {
  const extras: Record<string, unknown> = {};
  if (plan.models) extras.models = plan.models;
  if (plan.provider) extras.provider = plan.provider;
  if (plan.temperature !== undefined) extras.temperature = plan.temperature;
  if (plan.topP !== undefined) extras.top_p = plan.topP;
  if (plan.choices !== undefined) extras.n = plan.choices;
  switch (plan.dialect) {
    case 'chat': {
      const parts = fileId === undefined ? content : [{ type: 'text', text: content }, { type: 'file', file: { file_id: fileId } }];
      return { path: '/v1/chat/completions', body: { model: plan.model, messages: [{ role: 'user', content: parts }], max_completion_tokens: plan.maxTokens, stream: plan.stream, ...extras } };
    }
    case 'messages':
      return { path: '/v1/messages', body: { model: plan.model, max_tokens: plan.maxTokens, messages: [{ role: 'user', content }], stream: plan.stream, ...extras } };
    case 'responses': {
      const input = fileId === undefined ? content : [{ role: 'user', content: [{ type: 'input_text', text: content }, { type: 'input_file', file_id: fileId }] }];
      return { path: '/v1/responses', body: { model: plan.model, input, max_output_tokens: plan.maxTokens, stream: plan.stream, ...extras } };
    }
  }
}

async function sendHttp(
  fuzz: FuzzStack, apiKey: string, path: string, body: unknown, headers: Record<string, string>, abortAfterMs: number | undefined,
): Promise<Pick<Outcome, 'status' | 'code' | 'requestId' | 'aborted' | 'replayed' | 'costPico' | 'servedModel'>> {
  const controller = new AbortController();
  const timer = abortAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), abortAfterMs);
  let status = 0;
  let requestId: string | undefined;
  let replayed = false;
  try {
    const response = await fetch(`${fuzz.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    status = response.status;
    requestId = response.headers.get('x-gateway-request-id') ?? undefined;
    replayed = response.headers.get('idempotent-replayed') === 'true';
    const text = await response.text();
    // The chat envelope's code; the messages envelope has none, so its 503 is known by its message.
    const code = status >= 400 ? /"code":"([\w.-]+)"/.exec(text)?.[1] ?? (text.includes('No upstream available.') ? 'no_upstream' : undefined) : undefined;
    const costPico = status === 200 ? lastCost(text) : undefined;
    return {
      status, requestId, aborted: false, replayed,
      ...(code ? { code } : {}), ...(costPico !== undefined ? { costPico } : {}),
      ...(status === 200 ? { servedModel: MODEL.exec(text)?.[1] } : {}),
    };
  } catch (error) {
    if (controller.signal.aborted) return { status, requestId, aborted: true, replayed };
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

async function runWs(fuzz: FuzzStack, account: FuzzAccount, plan: WsPlan, tags: string[]): Promise<Outcome[]> {
  const ws = new WebSocket(`${fuzz.url.replace(/^http/, 'ws')}/v1/responses`, { headers: { authorization: `Bearer ${account.apiKey}` } });
  const events: string[] = [];
  let closed = false;
  let wake: (() => void) | undefined;
  ws.on('message', (data) => { events.push(data.toString()); wake?.(); });
  ws.on('close', () => { closed = true; wake?.(); });
  ws.on('error', () => undefined);
  const outcomes: Outcome[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_request, response) => reject(new Error(`WebSocket upgrade refused: ${response.statusCode}`)));
      ws.once('error', reject);
    });
    let read = 0;
    for (const [index, turn] of plan.turns.entries()) {
      const tag = tags[index]!;
      ws.send(JSON.stringify({ type: 'response.create', model: plan.model, input: `${tag} says hello`, max_output_tokens: 32, ...(turn.warmup ? { generate: false } : {}) }));
      const deadline = Date.now() + 15_000;
      let terminal: string | undefined;
      while (terminal === undefined && !closed && Date.now() < deadline) {
        const found = events.slice(read).findIndex((event) => /"type":"(response\.completed|response\.incomplete|response\.failed|error)"/.test(event));
        if (found >= 0) { terminal = events[read + found]; read += found + 1; break; }
        await new Promise<void>((resolve) => { wake = resolve; setTimeout(resolve, 200); });
      }
      const isError = terminal === undefined || /"type":"error"/.test(terminal);
      const statusMatch = terminal ? /"status":(\d{3})/.exec(terminal) : null;
      const costPico = terminal && !isError ? lastCost(terminal) : undefined;
      outcomes.push({
        tag, account: plan.account, kind: 'ws', plan: turn, models: [plan.model],
        status: isError ? Number(statusMatch?.[1] ?? 0) : 200, aborted: terminal === undefined, replayed: false,
        ...(terminal && isError ? { code: /"code":"([\w.-]+)"/.exec(terminal)?.[1] } : {}),
        ...(costPico !== undefined ? { costPico } : {}),
      });
      if (terminal === undefined) break;
    }
  } catch {
    // A refused upgrade (402, 429 before the socket opens) is an answer like any other: no turn ran.
  } finally {
    ws.terminate();
  }
  return outcomes;
}

async function pool<T>(items: readonly T[], concurrency: number, run: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) {
      const index = next++;
      await run(items[index]!, index);
    }
  }));
}

let runCounter = 0;

export interface PropertyOptions {
  holes?: KnownHoles;
  /** Process RSS bound checked after each sequence. */
  maxRssBytes?: number;
  onRun?: (stats: RunStats) => void;
  /** Print each failing run's broken invariants as it happens (shrinking included). */
  logFailures?: boolean;
}

/** Runs one generated sequence against the stack and checks every invariant; throws naming the broken one. */
export async function runSequence(fuzz: FuzzStack, sequence: SequencePlan, stats: RunStats, options: PropertyOptions = {}): Promise<void> {
  const run = ++runCounter;
  const prefix = `fz${run}`;
  await fuzz.forgetLearned();
  const accounts = await Promise.all(sequence.accounts.map((plan, index) => newAccount(fuzz, `${prefix}-a${index}`, plan.balance, plan.tier, plan.creditLimit, plan.budget)));
  // 50 credits: account B, a stranger naming another's file, is admitted even with four such requests on
  // fz/dear at once (a file by id holds for a full context window), so its answer is the file's 404.
  const probe = await newAccount(fuzz, `${prefix}-b`, '50', 'tier-1', null);
  const probeTag = `${prefix}probe`;
  const probeBody = { model: 'fz/cheap', messages: [{ role: 'user', content: `${probeTag} is account B` }], temperature: 0.7, max_completion_tokens: 16, provider: { only: ['oa'] } };
  const probeIdempotent = { model: 'fz/cheap', messages: [{ role: 'user', content: `${prefix}probeidem is account B` }], max_completion_tokens: 16 };
  const probeKey = `${prefix}-b-idem`;
  const outcomes: Outcome[] = [];
  const batchOutcomes: BatchOutcome[] = [];
  const backgroundOutcomes: BackgroundOutcome[] = [];
  const messageBatchOutcomes: MessageBatchOutcome[] = [];
  const governanceOutcomes: GovernanceOutcome[] = [];
  const fileOutcomes: FileOutcome[] = [];
  // The files of each account some plan names (its own, or a stranger's target), uploaded before the traffic.
  const files = new Map<number, OwnerFiles>();
  const owners = new Set(sequence.requests.flatMap((request) => (request.kind === 'http' && request.file ? [request.account] : [])));
  for (const owner of owners) files.set(owner, await uploadOwnerFiles(fuzz, accounts[owner]!));
  stats.requests += owners.size * 3;

  const probeFirst = await sendHttp(fuzz, probe.apiKey, '/v1/chat/completions', probeBody, {}, undefined);
  const probeIdemFirst = await sendHttp(fuzz, probe.apiKey, '/v1/chat/completions', probeIdempotent, { 'idempotency-key': probeKey }, undefined);

  // The tag of each HTTP request: its own, or its Idempotency-Key slot's (same key, same body: one tag).
  await pool(sequence.requests, sequence.concurrency, async (request, index) => {
    const account = accounts[request.account]!;
    if (request.kind === 'batch') {
      const stranger = request.stranger < 0 ? probe : accounts[request.stranger]!;
      const outcome = await runBatch(fuzz, account, stranger, request, `${prefix}b${index}`);
      batchOutcomes.push(outcome);
      stats.requests += request.lines.length + 1;
      const count = (name: string) => { stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1; };
      count(`batch ${outcome.status}${request.cancelAfterMs !== undefined ? ' (cancel asked)' : ''}`);
      for (const line of outcome.output) count(`batch line ${line.response?.status_code ?? 'none'}`);
      for (const line of outcome.errorLines) count(`batch line ${line.response?.status_code ?? line.error?.code ?? 'none'} ${line.response?.body.error?.code ?? ''}`.trim());
      return;
    }
    if (request.kind === 'messageBatch') {
      const stranger = request.stranger < 0 ? probe : accounts[request.stranger]!;
      const outcome = await runMessageBatch(fuzz, account, stranger, request, `${prefix}m${index}`);
      messageBatchOutcomes.push(outcome);
      stats.requests += request.requests.length + 1;
      const name = outcome.batchId ? `message batch ${outcome.processingStatus}${request.cancelAfterMs !== undefined ? ' (cancel asked)' : ''}` : `message batch create ${outcome.createStatus}`;
      stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1;
      for (const entry of outcome.results) {
        const result = `message batch request ${entry.result.type} ${entry.result.error?.error?.type ?? ''}`.trim();
        stats.outcomes[result] = (stats.outcomes[result] ?? 0) + 1;
      }
      return;
    }
    if (request.kind === 'governance') {
      const outcome = await runGovernance(fuzz, account, request.other < 0 ? probe : accounts[request.other]!, request, `${prefix}v${index}`);
      governanceOutcomes.push(outcome);
      stats.requests += outcome.steps;
      for (const answer of outcome.answers) stats.outcomes[`governance ${answer}`] = (stats.outcomes[`governance ${answer}`] ?? 0) + 1;
      return;
    }
    if (request.kind === 'background') {
      const stranger = request.stranger < 0 ? probe : accounts[request.stranger]!;
      const seen = await runBackground(fuzz, account, stranger, request, `${prefix}g${index}`);
      backgroundOutcomes.push(...seen);
      stats.requests += seen.length;
      for (const outcome of seen) {
        const name = outcome.createStatus === 200 ? `background ${outcome.status}${outcome.errorCode ? ` ${outcome.errorCode}` : ''} (${request.action})` : `background create ${outcome.createStatus} ${outcome.createCode ?? ''}`.trim();
        stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1;
      }
      return;
    }
    if (request.kind === 'ws') {
      const tags = request.turns.map((_turn, turn) => `${prefix}w${index}t${turn}`);
      request.turns.forEach((turn, turnIndex) => fuzz.plans.set(tags[turnIndex]!, { attempts: turn.attempts.map((attempt) => behaviourOf(attempt, turn.usage)), used: 0, usage: turn.usage }));
      outcomes.push(...(await runWs(fuzz, account, request, tags)));
      stats.requests += request.turns.length;
      return;
    }
    if (request.kind === 'compact') {
      const tag = `${prefix}c${index}`;
      fuzz.plans.set(tag, { attempts: request.attempts.map((attempt) => behaviourOf(attempt, request.usage)), used: 0, usage: request.usage });
      const body = { model: request.model, input: [{ role: 'user', content: `${tag} wrote a long story` }, { role: 'assistant', content: 'It was long.' }] };
      const seen = await sendHttp(fuzz, account.apiKey, '/v1/responses/compact', body, {}, undefined);
      outcomes.push({ tag, account: request.account, kind: 'compact', plan: request, models: [request.model], ...seen });
      stats.requests++;
      return;
    }
    if (request.kind === 'continue') {
      const tag = `${prefix}n${index}`;
      fuzz.plans.set(tag, { attempts: request.attempts.map((attempt) => behaviourOf(attempt, request.usage)), used: 0, usage: request.usage });
      const body = { model: request.model, input: `${tag} asks a question`, max_output_tokens: request.maxTokens };
      const first = await sendHttp(fuzz, account.apiKey, '/v1/responses', body, {}, undefined);
      outcomes.push({ tag, account: request.account, kind: 'continue', plan: request, models: [request.model], ...first });
      stats.requests++;
      if (first.status !== 200 || first.requestId === undefined) return;
      const continuer = accounts[request.continuer]!;
      // No tag of its own: the conversation it continues carries the first one's.
      const next = { model: request.model, previous_response_id: `resp_${first.requestId.slice(4)}`, input: 'And then?', max_output_tokens: request.maxTokens, stream: request.stream };
      const seen = await sendHttp(fuzz, continuer.apiKey, '/v1/responses', next, {}, undefined);
      outcomes.push({ tag, account: request.continuer, kind: 'continue', plan: request, models: [request.model], continued: { owner: request.account, firstStatus: first.status }, ...seen });
      stats.requests++;
      return;
    }
    const tag = request.idempotency ? `${prefix}i${request.account}s${request.idempotency.slot}v${request.idempotency.variant}` : `${prefix}r${index}`;
    // The first request of an Idempotency-Key slot decides what the fakes answer for every request of it.
    if (!fuzz.plans.has(tag)) fuzz.plans.set(tag, { attempts: request.attempts.map((attempt) => behaviourOf(attempt, request.usage)), used: 0, usage: request.usage });
    const { path, body } = bodyOf(request, `${tag} asks a question`, request.file ? fileIdOf(files.get(request.account)!, request.file) : undefined);
    const headers: Record<string, string> = request.idempotency ? { 'idempotency-key': `${prefix}-a${request.account}-k${request.idempotency.slot}` } : {};
    if (request.dialect === 'messages') headers['anthropic-version'] = '2023-06-01';
    // A stranger's plan is sent with another account's key (account B's for -1) naming the owner's file.
    const caller = request.file?.kind === 'stranger' ? (request.file.stranger < 0 ? probe : accounts[request.file.stranger]!) : account;
    const callerIndex = caller === probe ? -1 : accounts.indexOf(caller);
    const seen = await sendHttp(fuzz, caller.apiKey, path, body, headers, request.abortAfterMs);
    outcomes.push({ tag, account: callerIndex, kind: 'http', plan: request, models: request.models ?? [request.model], ...seen });
    if (request.file) fileOutcomes.push({ tag, owner: request.account, file: request.file, status: seen.status, aborted: seen.aborted, ...(seen.code ? { code: seen.code } : {}), ...(seen.requestId ? { requestId: seen.requestId } : {}) });
    stats.requests++;
  });

  const probeLast = await sendHttp(fuzz, probe.apiKey, '/v1/chat/completions', probeBody, {}, undefined);
  const probeIdemLast = await sendHttp(fuzz, probe.apiKey, '/v1/chat/completions', probeIdempotent, { 'idempotency-key': probeKey }, undefined);
  stats.requests += 4;

  try {
    for (const outcome of outcomes) {
      const name = outcome.aborted ? `${outcome.kind} aborted` : `${outcome.kind} ${outcome.status}${outcome.code ? ` ${outcome.code}` : ''}${outcome.replayed ? ' replayed' : ''}`;
      stats.outcomes[name] = (stats.outcomes[name] ?? 0) + 1;
    }
    await checkSequence(fuzz, { run, accounts, probe, outcomes, batchOutcomes, backgroundOutcomes, messageBatchOutcomes, governanceOutcomes, fileOutcomes, files, probeTag, probes: { probeFirst, probeLast, probeIdemFirst, probeIdemLast } }, stats, options);
  } finally {
    for (const tag of [...fuzz.plans.keys()]) if (tag.startsWith(prefix)) fuzz.plans.delete(tag);
    for (const fake of Object.values(fuzz.fakes)) fake.requests.length = 0;
  }
}

// ---------------------------------------------------------------- the invariants

async function checkSequence(
  fuzz: FuzzStack,
  seen: {
    run: number; accounts: FuzzAccount[]; probe: FuzzAccount; outcomes: Outcome[]; batchOutcomes: BatchOutcome[]; backgroundOutcomes: BackgroundOutcome[]; messageBatchOutcomes: MessageBatchOutcome[]; governanceOutcomes: GovernanceOutcome[];
    fileOutcomes: FileOutcome[]; files: Map<number, OwnerFiles>; probeTag: string;
    probes: Record<'probeFirst' | 'probeLast' | 'probeIdemFirst' | 'probeIdemLast', Awaited<ReturnType<typeof sendHttp>>>;
  },
  stats: RunStats,
  options: PropertyOptions,
): Promise<void> {
  const holes = options.holes ?? KNOWN_HOLES;
  const violations: string[] = [];
  const all = [...seen.accounts, seen.probe];
  const ledger = await settledLedger(fuzz, all.map((account) => account.accountId));
  for (const reservation of ledger.open) {
    const outcome = seen.outcomes.find((candidate) => candidate.requestId === reservation.request_id);
    violations.push(`reservation ${reservation.request_id} (${reservation.amount_pico} pico, ${reservation.age} s old) still open 15 s after the sequence: ${outcome ? show(outcome) : 'no answer with its id'}`);
  }
  const accountIndex = new Map(seen.accounts.map((account, index) => [account.accountId, index]));
  const byRequest = new Map(ledger.charges.map((charge) => [charge.requestId, charge]));

  // No 5xx but the upstream-caused 503 (no_upstream); the probes answer 200.
  for (const outcome of seen.outcomes) {
    if (outcome.status >= 500 && !(outcome.status === 503 && outcome.code === 'no_upstream')) {
      violations.push(`${outcome.tag} (${outcome.kind}) answered ${outcome.status} ${outcome.code ?? ''}`);
    }
  }
  for (const [name, probe] of Object.entries(seen.probes)) if (probe.status !== 200) violations.push(`account B's ${name} answered ${probe.status} ${probe.code ?? ''}`);

  // Money per account, in pico-credits from the ledger's own rows.
  for (const account of all) {
    const balance = ledger.balances.get(account.accountId)?.balance ?? 0n;
    const charges = ledger.charges.filter((charge) => charge.accountId === account.accountId);
    const charged = charges.reduce((sum, charge) => sum + charge.costPico, 0n);
    const journal = ledger.journal.get(account.accountId) ?? 0n;
    const generations = charges.reduce((sum, charge) => sum + (charge.generationCostPico ?? 0n), 0n);
    const name = account === seen.probe ? 'account B' : `account ${accountIndex.get(account.accountId)}`;
    if (balance < 0n) violations.push(`${name}'s balance is below zero: ${balance} pico`);
    if (account.initialPico - balance !== charged) violations.push(`${name}: balance moved by ${account.initialPico - balance} pico, charges sum to ${charged}`);
    if (journal !== balance) violations.push(`${name}: the journal sums to ${journal} pico, the balance is ${balance}`);
    if (generations !== charged) violations.push(`${name}: generation records sum to ${generations} pico, charges to ${charged}`);
    const missing = charges.filter((charge) => charge.generationCostPico === undefined).length;
    if (missing > 0) violations.push(`${name}: ${missing} charges without a generation record`);
    const spent = ledger.keys.get(account.keyId) ?? 0n;
    if (account.creditLimitPico !== undefined && spent > account.creditLimitPico) violations.push(`${name}'s key spent ${spent} pico past its credit limit ${account.creditLimitPico}`);
    if (account.budget) violations.push(...(await budgetViolations(fuzz, name, account, account.budget, charged)));
    // A key with no available credit (below the 0.05 hold) is never served by a paid model.
    if (account.initialPico < parseCredits('0.05')) {
      for (const charge of charges) if (charge.costPico > 0n || isPaid(charge.modelId)) violations.push(`${name} (balance ${account.initialPico} pico) was served paid ${charge.modelId}: ${charge.requestId} cost ${charge.costPico}`);
    }
  }

  // Thresholds in the ledger's own rows: each fired once per scope and period, when reached, one event each.
  violations.push(...(await alertRowViolations(fuzz, seen.accounts)));
  // Members: what the role table refuses was a 403 that changed nothing; key and balance.low events once each.
  for (const outcome of seen.governanceOutcomes) violations.push(...outcome.violations);
  violations.push(...(await accountEventViolations(fuzz, all, seen.governanceOutcomes, ledger.balances, stats.outcomes)));

  const choiceRequests = (stats.choiceRequests ??= { openai: 0, gemini: 0 });
  for (const fake of [fuzz.fakes.oa, fuzz.fakes.oa2]) choiceRequests.openai += fake.requests.filter((request) => ((request.body as { n?: number }).n ?? 1) > 1).length;
  choiceRequests.gemini += fuzz.fakes.gm.requests.filter((request) => ((request.body as { generationConfig?: { candidateCount?: number } }).generationConfig?.candidateCount ?? 1) > 1).length;

  // Each charge = the served model's prices × its normalized usage (input incl. cache reads, output incl. reasoning).
  for (const charge of ledger.charges) {
    // A batch line's charge (its request id is `batch_…` or a message batch's `msgbatch_…`, set by the jobs
    // service only) is at the batch prices.
    const batchLine = charge.requestId.startsWith('batch_') || charge.requestId.startsWith('msgbatch_');
    const expected = charge.insured ? 0n : priceOf(charge.modelId, charge.input, charge.cached, charge.output, batchLine);
    if (charge.costPico !== expected) violations.push(`${charge.requestId} (${charge.modelId}): charged ${charge.costPico} pico, its usage prices at ${expected}`);
  }

  // What the client saw: the answer's usage.cost is its ledger charge; a completed answer whose upstream
  // reported usage is charged exactly that usage at the served model's prices; it was a model it asked for.
  const clientCost = new Map<string, bigint>();
  for (const outcome of seen.outcomes) {
    const charge = outcome.requestId ? byRequest.get(outcome.requestId) : undefined;
    if (outcome.costPico !== undefined && outcome.requestId) {
      clientCost.set(outcome.requestId, outcome.costPico);
      if (!charge) violations.push(`${outcome.tag}: answer says cost ${outcome.costPico} pico, the ledger has no charge for ${outcome.requestId}`);
      else if (charge.costPico !== outcome.costPico) violations.push(`${outcome.tag}: answer says cost ${outcome.costPico} pico, the ledger charged ${charge.costPico}`);
    }
    if (charge && !outcome.models.includes(charge.modelId)) violations.push(`${outcome.tag}: served by ${charge.modelId}, asked for ${outcome.models.join(',')}`);
    const usage = fuzz.plans.get(outcome.tag)?.usage as UsagePlan | undefined;
    if (charge && usage?.present && outcome.status === 200 && outcome.costPico !== undefined && !charge.insured && !charge.estimated && isScriptedUsageServed(fuzz, outcome.tag)) {
      const output = charge.providerId === 'an' ? usage.completion : Math.max(usage.completion, usage.reasoning);
      const expected = priceOf(charge.modelId, BigInt(usage.prompt), BigInt(usage.cached), BigInt(output));
      stats.exactCharges++;
      if (charge.costPico !== expected) violations.push(`${outcome.tag}: upstream reported ${JSON.stringify(usage)} on ${charge.providerId}, ${charge.modelId} charged ${charge.costPico} pico, expected ${expected}`);
    }
  }
  // Stored responses: a continuation of another account's response is not found (400, before any provider,
  // nothing charged); of the account's own answered response, it is found (whatever else refuses it).
  for (const outcome of seen.outcomes) {
    if (outcome.continued === undefined) continue;
    const foreign = outcome.continued.owner !== outcome.account;
    if (foreign) {
      if (outcome.status !== 400 || outcome.code !== 'previous_response_not_found') violations.push(`${outcome.tag}: account ${outcome.account} continued account ${outcome.continued.owner}'s response and got ${outcome.status} ${outcome.code ?? ''}`);
      if (outcome.requestId && byRequest.has(outcome.requestId)) violations.push(`${outcome.tag}: a refused foreign continuation was charged (${outcome.requestId})`);
    } else if (outcome.code === 'previous_response_not_found') {
      violations.push(`${outcome.tag}: account ${outcome.account}'s own stored response was not found for its continuation`);
    }
  }

  const seenSum = [...clientCost.values()].reduce((sum, cost) => sum + cost, 0n);
  const clientRequestIds = new Set(clientCost.keys());
  const ledgerSumOfSeen = ledger.charges.filter((charge) => clientRequestIds.has(charge.requestId)).reduce((sum, charge) => sum + charge.costPico, 0n);
  if (seenSum !== ledgerSumOfSeen) violations.push(`usage.cost the clients saw sums to ${seenSum} pico, the ledger's charges of those requests to ${ledgerSumOfSeen}`);

  // Hole 4's invariant: a request whose prompt reached an upstream that answered it is recorded (and
  // charged at its usage), even when the client went away first.
  if (holes.abortAfterPromptCharged) {
    for (const account of seen.accounts) {
      const index = accountIndex.get(account.accountId)!;
      const reached = new Set<string>();
      const abortedTags = new Set(seen.outcomes.filter((outcome) => outcome.account === index && outcome.kind === 'http' && outcome.aborted).map((outcome) => outcome.tag));
      // An Idempotency-Key repeat carries its original's prompt, so its tag: the upstream requests of a tag
      // some answered request also carries are that request's (counted in `answered` below), not the abort's.
      const answeredTags = new Set(seen.outcomes.filter((outcome) => outcome.account === index && !outcome.aborted && outcome.requestId && byRequest.has(outcome.requestId)).map((outcome) => outcome.tag));
      for (const tag of abortedTags) {
        if (answeredTags.has(tag)) continue;
        const plan = fuzz.plans.get(tag);
        if (!plan) continue;
        // The n-th upstream request of a tag got the n-th scripted behaviour: one that was answering it
        // (ok, or slow to its first byte: no error status, no cut) on a paid model means the upstream got
        // the prompt and worked on it. A refusal (400), an error status or a cut before content is the
        // provider's failure, which is not charged (billing.md, "A caller who leaves before the answer").
        const upstream = Object.values(fuzz.fakes).flatMap((fake) => fake.requests).filter((request) => tagOf(request.body) === tag).sort((a, b) => a.receivedAt - b.receivedAt);
        upstream.forEach((request, attempt) => {
          const behaviour = plan.attempts[Math.min(attempt, plan.attempts.length - 1)];
          const model = upstreamModelOf(request);
          const working = behaviour !== undefined && behaviour.status === undefined && behaviour.cutAfterChunks === undefined;
          if (working && model && isPaid(model.model)) reached.add(tag);
        });
      }
      const recorded = ledger.charges.filter((charge) => charge.accountId === account.accountId).length;
      const answered = new Set(seen.outcomes.filter((outcome) => outcome.account === index && !outcome.aborted && outcome.requestId && byRequest.has(outcome.requestId)).map((outcome) => outcome.requestId)).size;
      if (recorded < answered + reached.size) violations.push(`account ${index}: ${reached.size} aborted requests reached a paid upstream, only ${recorded - answered} of them recorded`);
    }
  }

  // Account B's probe reaches the upstream with the same body at the start and the end of the sequence.
  const probeBodies = fuzz.fakes.oa.requests.filter((request) => tagOf(request.body) === seen.probeTag).map((request) => JSON.stringify(request.body));
  if (probeBodies.length !== 2) violations.push(`account B's probe reached the upstream ${probeBodies.length} times, not 2`);
  else if (probeBodies[0] !== probeBodies[1]) violations.push(`account B's probe body changed during A's traffic: ${probeBodies[0]} → ${probeBodies[1]}`);
  // A refusal learned from another account (in this run or an earlier one, the map keeps it 24 h) must
  // not take B's own temperature away: B was never refused.
  for (const body of probeBodies) if (!body.includes('"temperature":0.7')) violations.push(`account B's probe reached the upstream without its temperature: ${body}`);
  // …and its Idempotency-Key record survives A's traffic: the repeat is the stored answer.
  const { probeIdemFirst, probeIdemLast } = seen.probes;
  if (!probeIdemLast.replayed || probeIdemLast.requestId !== probeIdemFirst.requestId) {
    violations.push(`account B's idempotent repeat was not the stored answer (replayed ${probeIdemLast.replayed}, ids ${probeIdemFirst.requestId} / ${probeIdemLast.requestId})`);
  }

  // Batches: each completed line charged once at the batch price, equal to its output line's usage.cost;
  // error lines, lines a cancel stopped and a failed validation charged nothing; strangers saw 404s.
  violations.push(...checkBatches(seen.batchOutcomes, seen.accounts, ledger.charges, ledger.voided, stats));
  violations.push(...checkMessageBatches(seen.messageBatchOutcomes, seen.accounts, ledger.charges, stats));
  // Background responses: a completed one charged exactly its usage.cost, once; a failed one, or one no
  // provider got, nothing; only the owner's cancel or delete took effect.
  violations.push(...(await checkBackground(fuzz, seen.backgroundOutcomes, seen.accounts, ledger.charges, stats)));
  // File ids: the owner's file reaches the upstream in its own requests only; its batch file and a stranger's
  // use of its id are refused before any provider, charging nothing.
  violations.push(...checkFileInputs(seen.fileOutcomes, seen.files, Object.values(fuzz.fakes).flatMap((fake) => fake.requests), new Set(byRequest.keys()), stats));

  const livez = await fetch(`${fuzz.url}/livez`).then((response) => response.status, () => 0);
  if (livez !== 200) violations.push(`/livez answered ${livez}`);
  const rss = process.memoryUsage().rss;
  const maxRss = options.maxRssBytes ?? 1_500 * 1024 * 1024;
  if (rss > maxRss) violations.push(`process RSS ${Math.round(rss / 1048576)} MiB over the bound ${Math.round(maxRss / 1048576)} MiB`);

  if (violations.length > 0) throw new Error(`run ${seen.run}: ${violations.length} invariant(s) broken:\n  ${violations.join('\n  ')}`);
}

const show = (value: unknown) => JSON.stringify(value, (_key, field: unknown) => (typeof field === 'bigint' ? field.toString() : field));

/** True when the request's serving attempt ran to its end with the scripted usage (no cut attempt). */
function isScriptedUsageServed(fuzz: FuzzStack, tag: string): boolean {
  const plan = fuzz.plans.get(tag);
  return plan !== undefined && plan.attempts.every((attempt) => attempt.cutAfterChunks === undefined);
}

/** The property: any generated sequence keeps every invariant. */
export function invariantProperty(fuzz: FuzzStack, stats: RunStats, options: PropertyOptions = {}) {
  return fc.asyncProperty(sequenceArb(options.holes ?? KNOWN_HOLES), async (sequence) => {
    try {
      stats.current = runSequence(fuzz, sequence, stats, options);
      await stats.current;
    } catch (error) {
      stats.failures++;
      if (options.logFailures) console.log(`[fuzz] failing run: ${(error as Error).message.slice(0, 600)}`);
      throw error;
    } finally {
      stats.runs++;
      options.onRun?.(stats);
    }
  });
}
