import fc from 'fast-check';
import { parseCredits } from '@gateway/platform';
import type { FakeBehaviour } from '@gateway/testing';
import { EMBED_MODEL, isPaid, MODEL_IDS, priceOf, type FuzzAccount, type FuzzStack, type ModelId } from './fuzz-stack.js';

// Batches and files in the invariant fuzzer (docs/jobs.md): an account uploads a JSONL file of generated
// lines (chat or embeddings, normal or malformed, blank lines between) through POST /v1/files, creates a
// batch on it, sometimes cancels it mid-run, and another account tries every route on its ids. The fakes
// answer each line by its plan (its tag is in the prompt), as for interactive requests. After the
// sequence, checkBatches holds the batch to the ledger: every completed line charged exactly once, at
// the batch price, equal to its output line's usage.cost; a line in the error file (402 among them) and
// a line a cancel stopped charged nothing; a malformed file fails validation with nothing run.

/** The fakes' behaviour for one attempt of a line run by the jobs service: ok, an error status, slow. */
export type LineAttempt = { kind: 'ok' } | { kind: 'fail'; status: number } | { kind: 'slow'; latencyMs: number };
export interface LineUsage { present: boolean; prompt: number; cached: number; completion: number }

/** 1–2 attempts of a line (the last repeats for every later attempt). */
export const lineAttemptsArb = (maxLatencyMs: number): fc.Arbitrary<LineAttempt[]> => fc.array(fc.oneof(
  { weight: 6, arbitrary: fc.constant({ kind: 'ok' as const }) },
  { weight: 2, arbitrary: fc.constantFrom(500, 429, 503).map((status) => ({ kind: 'fail' as const, status })) },
  { weight: 1, arbitrary: fc.integer({ min: 50, max: maxLatencyMs }).map((latencyMs) => ({ kind: 'slow' as const, latencyMs })) },
), { minLength: 1, maxLength: 2 });

/** Usage the fake reports (cache reads a share of the prompt), its completion within the line's max tokens. */
export const lineUsageArb = (maxTokens: number): fc.Arbitrary<LineUsage> =>
  fc.record({ present: fc.boolean(), prompt: fc.integer({ min: 1, max: 40 }), cachedShare: fc.integer({ min: 0, max: 2 }), completion: fc.integer({ min: 1, max: 32 }) })
    .map(({ present, prompt, cachedShare, completion }) => ({ present, prompt, cached: Math.floor((prompt * cachedShare) / 4), completion: Math.min(completion, maxTokens) }));

export interface BatchLinePlan {
  model: ModelId;
  maxTokens: number;
  /** The fakes' behaviour per attempt (the last repeats): ok, an error status, slow. */
  attempts: LineAttempt[];
  usage: LineUsage;
  /** A blank line before this one (validation skips it; the physical line numbers count it). */
  blankBefore: boolean;
}

export type Malformation = 'json' | 'url' | 'model' | 'duplicate' | 'schema';

export interface BatchPlan {
  kind: 'batch';
  account: number;
  endpoint: 'chat' | 'embeddings';
  lines: BatchLinePlan[];
  /** One line broken this way (at `malformedAt`): the batch fails validation. */
  malformed?: { kind: Malformation; at: number };
  /** Cancelled this long after it was created. */
  cancelAfterMs?: number;
  /** Who tries the batch's and its files' ids: another account of the sequence (index) or account B (-1). */
  stranger: number;
}

const MALFORMED_CODE: Record<Malformation, string> = {
  json: 'invalid_json_line',
  url: 'mismatched_endpoint',
  model: 'model_not_found',
  duplicate: 'duplicate_custom_id',
  schema: 'invalid_request',
};

const ENDPOINT_PATH = { chat: '/v1/chat/completions', embeddings: '/v1/embeddings' } as const;

export const batchArb = (accounts: number): fc.Arbitrary<BatchPlan> =>
  fc.record({
    account: fc.integer({ min: 0, max: accounts - 1 }),
    endpoint: fc.constantFrom<'chat' | 'embeddings'>('chat', 'chat', 'embeddings'),
    lines: fc.array(fc.integer({ min: 8, max: 32 }).chain((maxTokens) => fc.record({
      model: fc.constantFrom(...MODEL_IDS),
      maxTokens: fc.constant(maxTokens),
      attempts: lineAttemptsArb(600),
      usage: lineUsageArb(maxTokens),
      blankBefore: fc.boolean(),
    })), { minLength: 1, maxLength: 10 }),
    // A fifth of the files have a malformed line; a third of the batches are cancelled.
    malformed: fc.oneof(
      { weight: 4, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom<Malformation>('json', 'url', 'model', 'duplicate', 'schema'), at: fc.nat() }) },
    ),
    cancelAfterMs: fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 1_500 }) }),
    stranger: fc.integer({ min: -1, max: accounts - 1 }),
  }).map((plan): BatchPlan => {
    const lines = plan.lines;
    const batch: BatchPlan = { kind: 'batch', account: plan.account, endpoint: plan.endpoint, lines, stranger: plan.stranger === plan.account ? -1 : plan.stranger };
    if (plan.malformed) {
      const at = plan.malformed.at % lines.length;
      // A duplicate needs an earlier line to repeat.
      batch.malformed = { kind: plan.malformed.kind === 'duplicate' && at === 0 ? 'json' : plan.malformed.kind, at };
    }
    if (plan.cancelAfterMs !== undefined) batch.cancelAfterMs = plan.cancelAfterMs;
    return batch;
  });

/** One line of an output or error file, as the owner read it back. */
interface ResultLine {
  custom_id: string;
  response: { status_code: number; request_id: string; body: { model?: string; usage?: { cost?: string; prompt_tokens?: number }; error?: { code?: string; message?: string } } } | null;
  error: { code: string } | null;
}

export interface BatchOutcome {
  tag: string;
  account: number;
  plan: BatchPlan;
  batchId?: string;
  status: string;
  errors: { code: string; line: number | null }[];
  requestCounts?: { total: number; completed: number; failed: number };
  costPico?: bigint;
  output: ResultLine[];
  errorLines: ResultLine[];
  /** What the run itself saw broken (foreign access, an answer out of shape). */
  violations: string[];
}

/** A line attempt as the fakes' behaviour. */
export function lineBehaviour(attempt: LineAttempt, usage: LineUsage): FakeBehaviour {
  const scripted: FakeBehaviour = { usage: usage.present ? { prompt_tokens: usage.prompt, completion_tokens: usage.completion, cached_tokens: usage.cached } : 'absent' };
  if (attempt.kind === 'fail') return { ...scripted, status: attempt.status };
  if (attempt.kind === 'slow') return { ...scripted, latencyMs: attempt.latencyMs };
  return scripted;
}

const lineTag = (tag: string, line: number) => `${tag}l${line}`;

/** The input file's text: every line's request (one broken when the plan says), blank lines between. */
function inputFile(plan: BatchPlan, tag: string): { text: string; malformedLine?: number } {
  const rows: string[] = [];
  let malformedLine: number | undefined;
  plan.lines.forEach((line, index) => {
    if (line.blankBefore) rows.push('');
    const customId = lineTag(tag, index);
    const url = ENDPOINT_PATH[plan.endpoint];
    const body = plan.endpoint === 'chat'
      ? { model: line.model, messages: [{ role: 'user', content: `${customId} asks a question` }], max_completion_tokens: line.maxTokens }
      : { model: EMBED_MODEL, input: `${customId} wants a vector` };
    let request: unknown = { custom_id: customId, method: 'POST', url, body };
    let raw: string | undefined;
    if (plan.malformed?.at === index) {
      malformedLine = rows.length + 1;
      switch (plan.malformed.kind) {
        case 'json': raw = JSON.stringify(request).slice(0, 40); break;
        case 'url': request = { custom_id: customId, method: 'POST', url: plan.endpoint === 'chat' ? '/v1/embeddings' : '/v1/chat/completions', body }; break;
        case 'model': request = { custom_id: customId, method: 'POST', url, body: { ...body, model: 'fz/nope' } }; break;
        case 'duplicate': request = { custom_id: lineTag(tag, 0), method: 'POST', url, body }; break;
        case 'schema': request = { custom_id: customId, method: 'POST', url, body: plan.endpoint === 'chat' ? { ...body, messages: 'hello' } : { ...body, input: 42 } }; break;
      }
    }
    rows.push(raw ?? JSON.stringify(request));
  });
  return { text: `${rows.join('\n')}\n`, ...(malformedLine !== undefined ? { malformedLine } : {}) };
}

/** One call of the edge as `apiKey`, its answer's status, JSON (if any) and text. */
export async function call(fuzz: FuzzStack, apiKey: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any; text: string }> {
  const response = await fetch(`${fuzz.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  let json: unknown;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, json, text };
}

async function upload(fuzz: FuzzStack, apiKey: string, text: string, purpose: string): Promise<{ status: number; json: any }> {
  const form = new FormData();
  form.append('purpose', purpose);
  form.append('file', new Blob([text]), 'batch.jsonl');
  const response = await fetch(`${fuzz.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: form });
  return { status: response.status, json: await response.json().catch(() => undefined) };
}

async function jsonl(fuzz: FuzzStack, apiKey: string, fileId: string | null | undefined, violations: string[], what: string): Promise<ResultLine[]> {
  if (!fileId) return [];
  const answer = await call(fuzz, apiKey, 'GET', `/v1/files/${fileId}/content`);
  if (answer.status !== 200) { violations.push(`${what} file ${fileId} answered ${answer.status} to its owner`); return []; }
  return answer.text.split('\n').filter((line) => line !== '').map((line) => JSON.parse(line) as ResultLine);
}

const FINISHED = ['completed', 'failed', 'cancelled', 'expired'];
const BATCH_DEADLINE_MS = 90_000;

/** Runs one batch plan through the edge as its owner (and a stranger) would. */
export async function runBatch(fuzz: FuzzStack, owner: FuzzAccount, stranger: FuzzAccount, plan: BatchPlan, tag: string): Promise<BatchOutcome> {
  const outcome: BatchOutcome = { tag, account: plan.account, plan, status: 'not created', errors: [], output: [], errorLines: [], violations: [] };
  plan.lines.forEach((line, index) => fuzz.plans.set(lineTag(tag, index), { attempts: line.attempts.map((attempt) => lineBehaviour(attempt, line.usage)), used: 0, usage: line.usage }));
  const { text } = inputFile(plan, tag);

  // A hostile upload first: an unknown purpose is a 400 and keeps nothing.
  const refused = await upload(fuzz, owner.apiKey, text, 'fine-tune-please');
  if (refused.status !== 400) outcome.violations.push(`${tag}: an upload with purpose fine-tune-please answered ${refused.status}`);
  const uploaded = await upload(fuzz, owner.apiKey, text, 'batch');
  if (uploaded.status !== 200 || typeof uploaded.json?.id !== 'string') {
    outcome.violations.push(`${tag}: the upload answered ${uploaded.status} ${JSON.stringify(uploaded.json).slice(0, 200)}`);
    return outcome;
  }
  const inputId = uploaded.json.id as string;
  if (uploaded.json.bytes !== Buffer.byteLength(text)) outcome.violations.push(`${tag}: ${Buffer.byteLength(text)} bytes uploaded, the file says ${uploaded.json.bytes}`);

  // The stranger can neither see the file nor batch it.
  for (const [method, path, body] of [
    ['GET', `/v1/files/${inputId}`, undefined],
    ['GET', `/v1/files/${inputId}/content`, undefined],
    ['DELETE', `/v1/files/${inputId}`, undefined],
    ['POST', '/v1/batches', { input_file_id: inputId, endpoint: ENDPOINT_PATH[plan.endpoint], completion_window: '24h' }],
  ] as const) {
    const answer = await call(fuzz, stranger.apiKey, method, path, body);
    if (answer.status !== 404) outcome.violations.push(`${tag}: a stranger's ${method} ${path} on the owner's file answered ${answer.status}`);
  }

  const created = await call(fuzz, owner.apiKey, 'POST', '/v1/batches', { input_file_id: inputId, endpoint: ENDPOINT_PATH[plan.endpoint], completion_window: '24h', metadata: { tag } });
  if (created.status !== 200 || typeof created.json?.id !== 'string') {
    outcome.violations.push(`${tag}: creating the batch answered ${created.status} ${created.text.slice(0, 200)}`);
    return outcome;
  }
  const batchId = created.json.id as string;
  outcome.batchId = batchId;

  const stranger404 = async (when: string) => {
    for (const [method, path] of [['GET', `/v1/batches/${batchId}`], ['POST', `/v1/batches/${batchId}/cancel`]] as const) {
      const answer = await call(fuzz, stranger.apiKey, method, path);
      if (answer.status !== 404) outcome.violations.push(`${tag}: a stranger's ${method} ${path} ${when} answered ${answer.status}`);
    }
    const listed = await call(fuzz, stranger.apiKey, 'GET', '/v1/batches?limit=100');
    if (listed.status !== 200 || (listed.json?.data as { id: string }[] | undefined)?.some((batch) => batch.id === batchId)) {
      outcome.violations.push(`${tag}: a stranger's batch list ${when} answered ${listed.status} or named the owner's batch`);
    }
  };
  await stranger404('while it ran');

  if (plan.cancelAfterMs !== undefined) {
    await new Promise((resolve) => setTimeout(resolve, plan.cancelAfterMs));
    const cancelled = await call(fuzz, owner.apiKey, 'POST', `/v1/batches/${batchId}/cancel`);
    if (cancelled.status !== 200) outcome.violations.push(`${tag}: the owner's cancel answered ${cancelled.status} ${cancelled.text.slice(0, 200)}`);
  }

  const deadline = Date.now() + BATCH_DEADLINE_MS;
  let batch: any;
  for (;;) {
    const answer = await call(fuzz, owner.apiKey, 'GET', `/v1/batches/${batchId}`);
    if (answer.status !== 200) { outcome.violations.push(`${tag}: the owner's GET of the batch answered ${answer.status}`); return outcome; }
    batch = answer.json;
    if (FINISHED.includes(batch.status) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  outcome.status = batch.status;
  if (!FINISHED.includes(batch.status)) outcome.violations.push(`${tag}: batch ${batchId} still ${batch.status} ${BATCH_DEADLINE_MS / 1000} s after it was created`);
  outcome.errors = (batch.errors?.data ?? []) as BatchOutcome['errors'];
  outcome.requestCounts = batch.request_counts;
  outcome.costPico = parseCredits(String(batch.usage?.cost ?? '0'));
  outcome.output = await jsonl(fuzz, owner.apiKey, batch.output_file_id, outcome.violations, 'output');
  outcome.errorLines = await jsonl(fuzz, owner.apiKey, batch.error_file_id, outcome.violations, 'error');

  await stranger404('once it ended');
  for (const fileId of [batch.output_file_id, batch.error_file_id].filter(Boolean) as string[]) {
    const answer = await call(fuzz, stranger.apiKey, 'GET', `/v1/files/${fileId}/content`);
    if (answer.status !== 404) outcome.violations.push(`${tag}: a stranger read the owner's result file ${fileId}: ${answer.status}`);
  }
  return outcome;
}

/** The ledger's charges as checkBatches needs them. */
export interface BatchCharge {
  requestId: string;
  accountId: string;
  modelId: string;
  costPico: bigint;
  input: bigint;
  cached: bigint;
  output: bigint;
  estimated: boolean;
}

/** The price of usage at a model's batch prices. */
export function batchPrice(model: string, input: bigint, cached: bigint, output: bigint): bigint {
  return priceOf(model, input, cached, output, true);
}

/** The batch invariants after the sequence settled; `charges` are the accounts' standing (not voided) charges. */
export function checkBatches(outcomes: BatchOutcome[], accounts: FuzzAccount[], charges: BatchCharge[], voided: Set<string>, stats: { exactCharges: number }): string[] {
  const violations: string[] = [];
  for (const outcome of outcomes) {
    violations.push(...outcome.violations);
    const { plan, tag, batchId } = outcome;
    if (!batchId) continue;
    const owner = accounts[plan.account]!;
    const name = `${tag} (batch ${batchId}, account ${plan.account}, ${outcome.status})`;
    // Charges of this batch's lines: request ids `<batch>-<line>` (first attempt) or `<batch>-<line>.<n>`.
    const mine = charges.filter((charge) => charge.requestId.startsWith(`${batchId}-`));
    for (const charge of mine) if (charge.accountId !== owner.accountId) violations.push(`${name}: line ${charge.requestId} charged to another account ${charge.accountId}`);
    const byRequest = new Map(mine.map((charge) => [charge.requestId, charge]));
    const planOf = new Map(plan.lines.map((line, index) => [lineTag(tag, index), line]));

    if (plan.malformed) {
      const code = MALFORMED_CODE[plan.malformed.kind];
      // The owner's cancel may come before validation (docs/jobs.md: `validating` → `cancelling` → `cancelled`).
      const cancelledFirst = outcome.status === 'cancelled' && plan.cancelAfterMs !== undefined;
      if (outcome.status !== 'failed' && !cancelledFirst) violations.push(`${name}: a file with a ${plan.malformed.kind} line ended ${outcome.status}, not failed`);
      else if (cancelledFirst) { if (outcome.output.length > 0) violations.push(`${name}: a malformed file's batch cancelled before validation has output lines`); }
      else if (!outcome.errors.some((error) => error.code === code)) violations.push(`${name}: validation errors ${JSON.stringify(outcome.errors)} lack ${code}`);
      if (mine.length > 0) violations.push(`${name}: a batch that failed validation has ${mine.length} charges`);
      continue;
    }
    if (outcome.status === 'failed') { violations.push(`${name}: a well-formed file failed: ${JSON.stringify(outcome.errors)}`); continue; }
    if (outcome.status === 'cancelled' && plan.cancelAfterMs === undefined) violations.push(`${name}: cancelled, though only a stranger asked`);

    // Each line ended once (output or error file), only the plan's lines; all of them unless cancelled.
    const ended = [...outcome.output, ...outcome.errorLines].map((line) => line.custom_id);
    if (new Set(ended).size !== ended.length) violations.push(`${name}: a custom_id is in the result files twice`);
    for (const id of ended) if (!planOf.has(id)) violations.push(`${name}: a result line for ${id}, no such line`);
    if (outcome.status === 'completed' && ended.length !== plan.lines.length) violations.push(`${name}: completed with ${ended.length} result lines of ${plan.lines.length}`);
    if (outcome.requestCounts && (outcome.requestCounts.completed !== outcome.output.length || outcome.requestCounts.failed !== outcome.errorLines.length)) {
      violations.push(`${name}: request_counts ${JSON.stringify(outcome.requestCounts)}, files hold ${outcome.output.length} output and ${outcome.errorLines.length} error lines`);
    }

    // Every output line is charged exactly its usage.cost, at the batch price; their sum is the batch's cost.
    let outputSum = 0n;
    const charged = new Set<string>();
    for (const line of outcome.output) {
      const requestId = line.response?.request_id ?? '';
      const cost = line.response?.body.usage?.cost;
      if (line.response?.status_code !== 200 || cost === undefined) { violations.push(`${name}: output line ${line.custom_id} is not a 200 with usage.cost`); continue; }
      const costPico = parseCredits(cost);
      outputSum += costPico;
      charged.add(requestId);
      const charge = byRequest.get(requestId);
      if (voided.has(requestId)) violations.push(`${name}: output line ${line.custom_id}'s attempt ${requestId} was voided`);
      if (!charge) { if (costPico > 0n || isPaid(planOf.get(line.custom_id)?.model ?? EMBED_MODEL)) violations.push(`${name}: output line ${line.custom_id} (${requestId}, cost ${cost}) has no charge`); continue; }
      if (charge.costPico !== costPico) violations.push(`${name}: output line ${line.custom_id} says cost ${costPico} pico, the ledger charged ${charge.costPico}`);
      const model = plan.endpoint === 'chat' ? planOf.get(line.custom_id)?.model : EMBED_MODEL;
      if (model !== undefined && charge.modelId !== model) violations.push(`${name}: line ${line.custom_id} for ${model} was charged as ${charge.modelId}`);
      const expected = batchPrice(charge.modelId, charge.input, charge.cached, charge.output);
      if (charge.costPico !== expected) violations.push(`${name}: line ${requestId} charged ${charge.costPico} pico, its usage at the batch prices is ${expected}`);
      // The usage the fake reported for a chat line, priced at the batch prices, exactly.
      const usage = planOf.get(line.custom_id)?.usage;
      if (plan.endpoint === 'chat' && usage?.present && !charge.estimated) {
        stats.exactCharges++;
        const scripted = batchPrice(charge.modelId, BigInt(usage.prompt), BigInt(usage.cached), BigInt(usage.completion));
        if (charge.costPico !== scripted) violations.push(`${name}: line ${line.custom_id}'s upstream reported ${JSON.stringify(usage)}, charged ${charge.costPico} pico, expected ${scripted}`);
      }
    }
    for (const charge of mine) if (!charged.has(charge.requestId)) violations.push(`${name}: ${charge.requestId} charged ${charge.costPico} pico with no output line (an error line, or a line the cancel stopped)`);
    if (outcome.costPico !== undefined && outcome.costPico !== outputSum) violations.push(`${name}: the batch's usage.cost is ${outcome.costPico} pico, its output lines sum to ${outputSum}`);
    const ledgerSum = mine.reduce((sum, charge) => sum + charge.costPico, 0n);
    if (ledgerSum !== outputSum) violations.push(`${name}: the ledger charged its lines ${ledgerSum} pico, the output file says ${outputSum}`);

    // Error lines: an error status, nothing charged; a line that could not be paid is a 402.
    for (const line of outcome.errorLines) {
      if (line.response !== null && line.response.status_code < 400) violations.push(`${name}: error line ${line.custom_id} has status ${line.response.status_code}`);
      if (line.response && byRequest.has(line.response.request_id)) violations.push(`${name}: error line ${line.custom_id} (${line.response.status_code}) was charged`);
      // As for interactive answers: no 5xx but the upstream-caused 503 no_upstream.
      if (line.response && line.response.status_code >= 500 && !(line.response.status_code === 503 && line.response.body.error?.code === 'no_upstream')) {
        violations.push(`${name}: error line ${line.custom_id} answered ${line.response.status_code} ${JSON.stringify(line.response.body.error).slice(0, 300)}`);
      }
    }
    // An account without the least hold (0.05) never has a paid line served.
    if (owner.initialPico < parseCredits('0.05')) {
      for (const line of outcome.output) {
        const model = plan.endpoint === 'chat' ? planOf.get(line.custom_id)?.model : EMBED_MODEL;
        if (model !== undefined && isPaid(model)) violations.push(`${name}: account with ${owner.initialPico} pico had paid line ${line.custom_id} (${model}) served`);
      }
    }
  }
  return violations;
}
