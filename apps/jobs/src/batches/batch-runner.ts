import { chatInsurance, ErrorReason, formatCredits, GatewayError, GrpcStatus, parseCredits, parsePricing, servedCost, costJson, type Logger, type PromiseClient } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import {
  ChatRequest, ChatResponse, EmbedRequest, ModerateRequest, ModerationInputForm, type ModerateResponse,
  type AuthServiceClient, type CatalogServiceClient, type EmbedResponse, type LedgerServiceClient, type Model, type Pricing,
  type RouterServiceClient, type Usage,
} from '@gateway/proto';
import type { BatchesTable, JobsDatabase } from '../jobs-schema.js';
import { claimLeased, LeasedWorkLoop, leaseUntil } from '../leased-work-loop.js';
import { generatedFileId, type Files } from '../files/files.js';
import type { PriorityGate } from '../priority-gate.js';
import {
  CATALOG_ENDPOINT, chatMessages, parseLine, promptBytes, type BatchEndpoint, type ChatBody, type EmbeddingsBody, type LineProblem, type ModerationsBody,
} from './batch-lines.js';

/**
 * Runs batches (docs/jobs.md "How a batch runs"). Every replica runs one runner; they share the work
 * through Postgres leases taken with SKIP LOCKED, so a line is run by one replica at a time and a
 * crashed replica's lines are taken up by another once their lease lapses (leases are renewed while the
 * line runs). Each line goes through routing's normal path: admission by the ledger (Ledger.Admit, a
 * hold of the line's worst-case cost at the batch prices: a batch never overdraws, a line that cannot be
 * paid ends with 402 in the error file), then Router.Chat / Router.Embed (failover, provider choice,
 * usage events) with RequestContext.batch set, so routing prices it at the model's batch prices. The
 * line's request id — the key of its hold, its usage event and its charge — is derived from the batch id
 * and the line index, so a line run again after a crash is charged once (the ledger's charge is unique
 * per request id). Lower priority than interactive traffic: at most `concurrency` lines run at once on
 * a replica and `perAccountConcurrency` of one account.
 */
export interface BatchRunnerOptions {
  /** This replica's name on its leases. */
  replicaId: string;
  /** Lines running at once on this replica. */
  concurrency: number;
  /** Lines of one account running at once on this replica. */
  perAccountConcurrency: number;
  /** A lease not renewed for this long is taken up by another replica (renewed every third of it). */
  leaseMs: number;
  /** How often the runner looks for work when it found none. */
  pollIntervalMs: number;
  /** Transient failures (no upstream left, a service unreachable) are retried this many times per line. */
  maxAttempts: number;
  /** Bound of one line's Router call. */
  lineTimeoutMs: number;
  /** Most lines of one batch. */
  maxLines: number;
}

export const DEFAULT_BATCH_RUNNER_OPTIONS: Omit<BatchRunnerOptions, 'replicaId'> = {
  concurrency: 8,
  perAccountConcurrency: 4,
  leaseMs: 30_000,
  pollIntervalMs: 500,
  maxAttempts: 3,
  lineTimeoutMs: 10 * 60_000,
  maxLines: 50_000,
};

export interface BatchClients {
  auth: PromiseClient<AuthServiceClient>;
  catalog: PromiseClient<CatalogServiceClient>;
  ledger: PromiseClient<LedgerServiceClient>;
  router: PromiseClient<RouterServiceClient>;
}

/** The least a paid line holds (the edge's flat hold), and the most Ledger.Admit takes. */
const MINIMUM_HOLD_PICO = parseCredits('0.05');
const MAXIMUM_HOLD_PICO = parseCredits('1000');
const INSERT_BATCH = 500;
const MAX_VALIDATION_ERRORS = 20;
const RESULT_PAGE = 500;
const CALL_DEADLINE_MS = 10_000;
/** Pause of a line after a transient failure before another attempt. */
const RETRY_DELAY_MS = 2_000;

/** A message batch's line (Anthropic Message Batches): the edge's converted ChatRequest, as JSON. */
export interface MessageLineBody {
  model: string;
  chat_request: unknown;
}

type LineBody = ChatBody | EmbeddingsBody | ModerationsBody | MessageLineBody;

interface ClaimedLine {
  batch: BatchesTable;
  lineIndex: number;
  customId: string;
  body: LineBody;
  attempts: number;
}

interface LineOutcome {
  /** The output or error file line. */
  result: Record<string, unknown>;
  isError: boolean;
  costPico: bigint;
}

/** Validation found problems: the batch fails with them (its lines' inserts are rolled back). */
class ValidationFailed extends Error {}

/** The request id of a line's attempt: `<batch>-<line>` for the first, `<batch>-<line>.<attempt>` after. */
export function attemptRequestId(batchId: string, lineIndex: number, attempt: number): string {
  return attempt <= 1 ? `${batchId}-${lineIndex}` : `${batchId}-${lineIndex}.${attempt}`;
}

/** A failure worth another attempt (the line goes back to pending with its lease lapsing soon). */
class TransientLineFailure extends Error {}

const priceKeysIn: readonly (keyof Pricing)[] = ['perInputToken', 'perToken', 'perCacheWriteInputToken', 'perInputTextToken'];
const priceKeysOut: readonly (keyof Pricing)[] = ['perOutputToken', 'perToken', 'perOutputTextToken'];

/** The model's prices for a batch line: batch_pricing over pricing (as routing applies them). */
export function batchPrices(model: Model): Pricing {
  const pricing: Pricing = { ...model.pricing };
  for (const [key, value] of Object.entries(model.batchPricing ?? {}) as [keyof Pricing, string | undefined][]) {
    if (value !== undefined && value !== '') pricing[key] = value;
  }
  return pricing;
}

function highest(pricing: Pricing, keys: readonly (keyof Pricing)[]): bigint {
  let best = 0n;
  for (const key of keys) {
    const text = pricing[key];
    if (text !== undefined && text !== '') {
      const pico = parseCredits(text);
      if (pico > best) best = pico;
    }
  }
  return best;
}

function isPaid(pricing: Pricing): boolean {
  return Object.values(pricing).some((text) => typeof text === 'string' && text !== '' && parseCredits(text) > 0n);
}

/**
 * What a line holds: its worst case at the batch prices (prompt bytes bound its tokens; the most output
 * it may produce: its max tokens, else the model's, else its context window), at least 0.05.
 */
export function lineHold(model: Model, body: LineBody): bigint {
  const pricing = batchPrices(model);
  if (!isPaid(pricing)) return 0n;
  const window = model.contextWindow;
  // A message line's prompt: its ChatRequest's JSON bounds its text (and its framing) from above.
  let promptTokens = 'chat_request' in body ? Buffer.byteLength(JSON.stringify(body.chat_request)) : promptBytes(body);
  if (window > 0 && promptTokens > window) promptTokens = window;
  let outputTokens = 0;
  if (!('input' in body)) {
    const asked = 'chat_request' in body
      ? (body.chat_request as { maxOutputTokens?: number }).maxOutputTokens
      : body.max_completion_tokens ?? body.max_tokens;
    outputTokens = asked ?? model.maxOutputTokens ?? window;
    if (model.maxOutputTokens !== undefined && outputTokens > model.maxOutputTokens) outputTokens = model.maxOutputTokens;
  }
  const worst = BigInt(promptTokens) * highest(pricing, priceKeysIn) + BigInt(outputTokens) * highest(pricing, priceKeysOut);
  return worst > MINIMUM_HOLD_PICO ? worst : MINIMUM_HOLD_PICO;
}

/** OpenAI's error line: the request's status and error body under `response`. */
function errorLine(line: ClaimedLine, requestId: string, status: number, type: string, code: string, message: string): LineOutcome {
  return {
    result: {
      id: `batch_req_${requestId}`,
      custom_id: line.customId,
      response: { status_code: status, request_id: requestId, body: { error: { message, type, param: null, code } } },
      error: null,
    },
    isError: true,
    costPico: 0n,
  };
}

function usageJson(usage: Usage | undefined, costPico: bigint, breakdown: ReturnType<typeof costJson> | undefined) {
  return {
    prompt_tokens: usage?.inputTokens ?? 0,
    completion_tokens: usage?.outputTokens ?? 0,
    total_tokens: (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0),
    prompt_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
    cost: formatCredits(costPico),
    ...(breakdown ? { cost_details: breakdown.cost_details } : {}),
  };
}

function chatCompletionJson(response: ChatResponse, costPico: bigint, breakdown: ReturnType<typeof costJson>): Record<string, unknown> {
  return {
    id: response.id,
    object: 'chat.completion',
    created: Number(response.created),
    model: response.modelId,
    choices: response.choices.map((choice) => ({
      index: choice.index,
      message: {
        role: 'assistant',
        content: choice.message?.content ?? null,
        refusal: choice.message?.refusal ?? null,
        ...(choice.message && choice.message.toolCalls.length > 0
          ? { tool_calls: choice.message.toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) }
          : {}),
      },
      finish_reason: choice.finishReason || null,
      logprobs: null,
    })),
    usage: usageJson(response.usage, costPico, breakdown),
    provider: response.providerId,
  };
}

function embeddingsJson(response: EmbedResponse, costPico: bigint): Record<string, unknown> {
  return {
    object: 'list',
    data: response.embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding: embedding.values })),
    model: response.modelId,
    usage: { prompt_tokens: response.usage?.inputTokens ?? 0, total_tokens: response.usage?.inputTokens ?? 0, cost: formatCredits(costPico) },
    provider: response.providerId,
  };
}

/** A responses line's answer: OpenAI's `response` object (text and function calls), with usage.cost. */
function responseJson(response: ChatResponse, requestId: string, costPico: bigint): Record<string, unknown> {
  const choice = response.choices[0];
  const message = choice?.message;
  const output: Record<string, unknown>[] = [];
  if (message?.content || message?.refusal) {
    output.push({
      type: 'message',
      id: `msg_${requestId}`,
      status: 'completed',
      role: 'assistant',
      content: [message.content ? { type: 'output_text', text: message.content, annotations: [] } : { type: 'refusal', refusal: message.refusal }],
    });
  }
  for (const call of message?.toolCalls ?? []) {
    output.push({ type: 'function_call', id: `fc_${call.id}`, call_id: call.id, name: call.name, arguments: call.arguments, status: 'completed' });
  }
  const cutShort = choice?.finishReason === 'length';
  const usage = response.usage;
  return {
    id: `resp_${requestId}`,
    object: 'response',
    created_at: Number(response.created),
    status: cutShort ? 'incomplete' : 'completed',
    incomplete_details: cutShort ? { reason: 'max_output_tokens' } : null,
    error: null,
    model: response.modelId,
    output,
    usage: {
      input_tokens: usage?.inputTokens ?? 0,
      input_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
      output_tokens: usage?.outputTokens ?? 0,
      output_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
      total_tokens: (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0),
      cost: formatCredits(costPico),
    },
    provider: response.providerId,
  };
}

function moderationJson(response: ModerateResponse, costPico: bigint): Record<string, unknown> {
  return {
    id: response.id,
    model: response.modelId,
    results: response.results.map((result) => ({
      flagged: result.flagged,
      categories: result.categories,
      category_scores: result.categoryScores,
      category_applied_input_types: Object.fromEntries(Object.entries(result.categoryAppliedInputTypes).map(([name, applied]) => [name, applied.types])),
    })),
    usage: { prompt_tokens: response.usage?.inputTokens ?? 0, total_tokens: response.usage?.inputTokens ?? 0, cost: formatCredits(costPico) },
    provider: response.providerId,
  };
}

/** (status, type, code) of a routing failure in a line, and whether another attempt may succeed. */
function classify(error: unknown): { transient: boolean; status: number; type: string; code: string; message: string } {
  if (!(error instanceof GatewayError)) return { transient: true, status: 500, type: 'api_error', code: 'internal_error', message: 'The gateway failed to process the request.' };
  switch (error.reason) {
    case ErrorReason.ERROR_REASON_INSUFFICIENT_QUOTA:
      return { transient: false, status: 402, type: 'insufficient_quota', code: 'insufficient_quota', message: error.message };
    case ErrorReason.ERROR_REASON_KEY_LIMIT_EXCEEDED:
      return { transient: false, status: 402, type: 'insufficient_quota', code: 'key_limit_exceeded', message: error.message };
    // A budget's hard stop (docs/governance.md): 402 as on the interactive routes, not retried.
    case ErrorReason.ERROR_REASON_BUDGET_EXCEEDED:
      return { transient: false, status: 402, type: 'insufficient_quota', code: 'budget_exceeded', message: error.message };
    case ErrorReason.ERROR_REASON_INVALID_REQUEST:
    case ErrorReason.ERROR_REASON_MODEL_NOT_FOUND:
    case ErrorReason.ERROR_REASON_UPSTREAM_REJECTED:
    case ErrorReason.ERROR_REASON_CONTENT_MODERATION:
    case ErrorReason.ERROR_REASON_TOOL_OUTPUT_UNMATCHED:
    case ErrorReason.ERROR_REASON_UNSUPPORTED_MODALITY:
    case ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE:
      return { transient: false, status: 400, type: 'invalid_request_error', code: error.code || 'invalid_request', message: error.message };
    case ErrorReason.ERROR_REASON_INVALID_API_KEY:
      return { transient: false, status: 401, type: 'invalid_api_key', code: 'invalid_api_key', message: error.message };
    case ErrorReason.ERROR_REASON_NOT_FOUND:
      return { transient: false, status: 404, type: 'not_found_error', code: 'not_found', message: error.message };
    case ErrorReason.ERROR_REASON_MODEL_GONE:
      return { transient: false, status: 410, type: 'invalid_request_error', code: 'model_gone', message: error.message };
    case ErrorReason.ERROR_REASON_FORBIDDEN:
      return { transient: false, status: 403, type: 'permission_error', code: error.code || 'forbidden', message: error.message };
    case ErrorReason.ERROR_REASON_NO_UPSTREAM:
      return { transient: true, status: 503, type: 'api_error', code: 'no_upstream', message: error.message };
    default:
      return { transient: true, status: 500, type: 'api_error', code: 'internal_error', message: error.message };
  }
}

export class BatchRunner {
  /** The lines running on this replica, each with its batch's account. */
  private readonly loop: LeasedWorkLoop<string>;
  /** Batches this replica is validating or finalizing (their leases are renewed with the lines'). */
  private readonly heldBatches = new Set<string>();
  private readonly models = new Map<string, { model: Model | undefined; at: number }>();

  constructor(
    private readonly db: Kysely<JobsDatabase>,
    private readonly files: Files,
    private readonly clients: BatchClients,
    private readonly options: BatchRunnerOptions,
    private readonly logger: Logger,
    /** Other lower-priority work running on this replica (background responses): it shares `concurrency`. */
    otherRunning: () => number = () => 0,
    /** How much of `concurrency` interactive traffic leaves to lower-priority work now (priority-gate.ts). */
    gate?: PriorityGate,
  ) {
    const work = { round: () => this.round(), renew: () => this.renewLeases() };
    this.loop = new LeasedWorkLoop({ ...options, name: 'batch runner' }, work, logger, otherRunning, gate);
  }

  /** Lines running on this replica now (background responses count them against the shared budget). */
  get runningCount(): number {
    return this.loop.runningCount;
  }

  start(): void {
    this.loop.start();
  }

  /** Stops taking work; lines running finish (their leases lapse otherwise, and another replica takes them). */
  stop(graceMs?: number): Promise<void> {
    return this.loop.stop(graceMs);
  }

  /** One round: validate, finalize, expire, then fill free slots with lines. */
  tick(): Promise<void> {
    return this.loop.tick();
  }

  private async round(): Promise<void> {
    await this.validateOne();
    await this.finalizeReady();
    await this.claimLines();
  }

  private async renewLeases(): Promise<void> {
    const lease = leaseUntil(this.options.leaseMs);
    if (this.loop.runningCount > 0) {
      await sql`
        update batch_lines set lease_expires_at = ${lease}
        where lease_owner = ${this.options.replicaId} and status = 'pending'`.execute(this.db)
        .catch((error: unknown) => this.logger.warn({ err: error }, 'renewing line leases failed'));
    }
    // A long validation (a large input file) or finalization keeps its batch: no second replica starts it again.
    if (this.heldBatches.size > 0) {
      await sql`
        update batches set lease_expires_at = ${lease}
        where id = any(${[...this.heldBatches]}) and lease_owner = ${this.options.replicaId}`.execute(this.db)
        .catch((error: unknown) => this.logger.warn({ err: error }, 'renewing batch leases failed'));
    }
  }

  private async model(name: string): Promise<Model | undefined> {
    const cached = this.models.get(name);
    if (cached && Date.now() - cached.at < 10_000) return cached.model;
    const model = await this.clients.catalog.getModel({ model: name }, { deadlineMs: CALL_DEADLINE_MS }).then(
      (answer) => answer.model,
      (error: unknown) => {
        if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
        throw error;
      },
    );
    if (this.models.size > 1_000) this.models.clear();
    this.models.set(name, { model, at: Date.now() });
    return model;
  }

  // ---------------------------------------------------------------- validation

  /** Takes one batch in `validating` (lease), checks every line, stores them, and starts it — or fails it. */
  private async validateOne(): Promise<void> {
    const claimed = await sql<BatchesTable>`
      update batches set lease_owner = ${this.options.replicaId}, lease_expires_at = ${leaseUntil(this.options.leaseMs)}
      where id = (select id from batches where status = 'validating' and (lease_expires_at is null or lease_expires_at < now())
                  order by created_at limit 1 for update skip locked)
      returning *`.execute(this.db);
    const batch = claimed.rows[0];
    if (!batch) return;
    this.heldBatches.add(batch.id);
    try {
      await this.validate(batch);
    } finally {
      this.heldBatches.delete(batch.id);
    }
  }

  private async validate(batch: BatchesTable): Promise<void> {
    const problems: { code: string; message: string; param: string; line: number }[] = [];
    const problem = (line: number, found: LineProblem) => {
      if (problems.length < MAX_VALIDATION_ERRORS) problems.push({ ...found, line });
    };
    const endpoint = batch.endpoint as BatchEndpoint;
    try {
      await this.db.transaction().execute(async (trx) => {
        const customIds = new Set<string>();
        const models = new Set<string>();
        let pending: { batch_id: string; line_index: number; custom_id: string; body: string; status: string }[] = [];
        let lineIndex = 0;
        let physical = 0;
        const flush = async () => {
          if (pending.length === 0) return;
          await trx.insertInto('batch_lines').values(pending as never).execute();
          pending = [];
        };
        const input = this.lines(batch);
        const next = () => input.next().catch((error: unknown) => {
          // The input file was deleted (or expired) before validation: the batch fails naming it.
          if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) {
            problems.push({ code: 'invalid_request', message: 'The input file no longer exists.', param: 'input_file_id', line: 0 });
            throw new ValidationFailed();
          }
          throw error;
        });
        for (let item = await next(); !item.done; item = await next()) {
          const text = item.value;
          const number = ++physical;
          if (lineIndex >= this.options.maxLines) {
            problem(number, { code: 'too_many_lines', message: `A batch holds at most ${this.options.maxLines} lines.`, param: '' });
            break;
          }
          if (text.trim() === '') {
            // A blank line (usually the last newline's) carries no request.
            continue;
          }
          const parsed = parseLine(text, endpoint);
          if ('code' in parsed) {
            problem(number, parsed);
          } else if (customIds.has(parsed.customId)) {
            problem(number, { code: 'duplicate_custom_id', message: `The custom_id ${JSON.stringify(parsed.customId.slice(0, 64))} is used by another line.`, param: 'custom_id' });
          } else {
            customIds.add(parsed.customId);
            const model = await this.model(parsed.body.model);
            if (!model) {
              problem(number, { code: 'model_not_found', message: `The model ${JSON.stringify(parsed.body.model.slice(0, 64))} does not exist.`, param: 'body.model' });
            } else if (!model.offers.some((offer) => offer.endpoints.includes(CATALOG_ENDPOINT[endpoint]))) {
              problem(number, { code: 'invalid_request', message: `The model ${model.id} is not served on ${endpoint}.`, param: 'body.model' });
            } else {
              models.add(model.id);
              if (problems.length === 0) pending.push({ batch_id: batch.id, line_index: lineIndex, custom_id: parsed.customId, body: JSON.stringify(parsed.body), status: 'pending' });
              if (pending.length >= INSERT_BATCH) await flush();
            }
          }
          lineIndex++;
        }
        if (problems.length === 0 && customIds.size === 0) problems.push({ code: 'empty_file', message: 'The input file has no request lines.', param: 'input_file_id', line: 0 });
        if (problems.length > 0) throw new ValidationFailed();
        await flush();
        // Still ours and still validating (a cancel meanwhile wins: the lines stay, the batch ends cancelled).
        const started = await sql`
          update batches set status = 'in_progress', in_progress_at = now(), total = ${customIds.size}, model = ${models.size === 1 ? [...models][0]! : ''},
            lease_owner = null, lease_expires_at = null
          where id = ${batch.id} and status = 'validating' and lease_owner = ${this.options.replicaId}`.execute(trx);
        if (Number(started.numAffectedRows ?? 0n) === 0) {
          await sql`update batches set total = ${customIds.size}, lease_owner = null, lease_expires_at = null where id = ${batch.id} and lease_owner = ${this.options.replicaId}`.execute(trx);
        }
      });
      this.logger.info({ batch: batch.id }, 'batch validated');
    } catch (error) {
      if (!(error instanceof ValidationFailed)) throw error;
      await sql`
        update batches set status = 'failed', failed_at = now(), errors = ${JSON.stringify(problems)}::jsonb, lease_owner = null, lease_expires_at = null
        where id = ${batch.id} and status in ('validating', 'cancelling')`.execute(this.db);
      this.logger.info({ batch: batch.id, problems: problems.length }, 'batch failed validation');
    }
  }

  /** The input file's lines, split across its pages (a line may straddle two). */
  private async *lines(batch: BatchesTable): AsyncGenerator<string> {
    let carry = '';
    const decoder = new TextDecoder('utf-8');
    for await (const page of this.files.pages(batch.account_id, batch.input_file_id)) {
      const text = carry + decoder.decode(page, { stream: true });
      const parts = text.split('\n');
      carry = parts.pop() ?? '';
      for (const part of parts) yield part.endsWith('\r') ? part.slice(0, -1) : part;
    }
    carry += decoder.decode();
    if (carry !== '') yield carry;
  }

  // ---------------------------------------------------------------- lines

  private async claimLines(): Promise<void> {
    let free = this.loop.free();
    if (free <= 0) return;
    const batches = await sql<BatchesTable>`
      select * from batches where status = 'in_progress' order by created_at limit 100`.execute(this.db);
    for (const batch of batches.rows) {
      if (free <= 0) break;
      if (batch.expires_at.getTime() <= Date.now()) continue;
      const accountRunning = this.loop.values().filter((account) => account === batch.account_id).length;
      const wanted = Math.min(free, this.options.perAccountConcurrency - accountRunning);
      if (wanted <= 0) continue;
      const claimed = await claimLeased<{ line_index: number; custom_id: string; body: LineBody; attempts: number }>(this.db, {
        table: 'batch_lines',
        keys: ['batch_id', 'line_index'],
        where: sql`batch_id = ${batch.id} and status = 'pending'`,
        orderBy: 'line_index',
        limit: wanted,
        owner: this.options.replicaId,
        leaseMs: this.options.leaseMs,
        returning: ['line_index', 'custom_id', 'body', 'attempts'],
      });
      for (const row of claimed) {
        free--;
        this.launch({ batch, lineIndex: row.line_index, customId: row.custom_id, body: row.body, attempts: row.attempts });
      }
    }
  }

  private launch(line: ClaimedLine): void {
    this.loop.launch(`${line.batch.id}:${line.lineIndex}`, line.batch.account_id, () => this.runLine(line), (error: unknown) =>
      this.logger.warn({ err: error, batch: line.batch.id, line: line.lineIndex }, 'batch line failed to record; its lease lapses and it runs again'));
  }

  private async runLine(line: ClaimedLine): Promise<void> {
    // The attempt's request id (the key of its hold, its usage event and its charge): derived from the
    // batch, the line and the attempt. Only the attempt whose answer is recorded may stay charged: before
    // a line runs again, every earlier attempt's charge is voided (refunded when it had settled, never
    // applied when it had not), because their answers reached nobody (the process that held them died).
    const requestId = attemptRequestId(line.batch.id, line.lineIndex, line.attempts);
    let outcome: LineOutcome;
    try {
      if (line.attempts > this.options.maxAttempts * 3) {
        throw new GatewayError(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL, `This line was started ${line.attempts} times without finishing.`);
      }
      await this.voidEarlierAttempts(line);
      outcome = await this.execute(line, requestId);
    } catch (error) {
      if (!(error instanceof TransientLineFailure) || line.attempts >= this.options.maxAttempts) {
        const failure = classify(error instanceof TransientLineFailure ? error.cause : error);
        outcome = errorLine(line, requestId, failure.status, failure.type, failure.code, failure.message);
      } else {
        // Back to pending: its lease lapses shortly and a replica (this one or another) runs it again.
        await sql`
          update batch_lines set lease_expires_at = now() + make_interval(secs => ${RETRY_DELAY_MS / 1000})
          where batch_id = ${line.batch.id} and line_index = ${line.lineIndex} and lease_owner = ${this.options.replicaId}`.execute(this.db);
        return;
      }
    }
    await this.db.transaction().execute(async (trx) => {
      const recorded = await sql`
        update batch_lines set status = 'done', result = ${JSON.stringify(outcome.result)}::jsonb, is_error = ${outcome.isError},
          cost_pico = ${outcome.costPico}, lease_owner = null, lease_expires_at = null
        where batch_id = ${line.batch.id} and line_index = ${line.lineIndex} and status = 'pending' and attempts = ${line.attempts}`.execute(trx);
      // Recorded once, by the latest attempt only: an earlier attempt (its lease lapsed, the line taken up
      // again and its charge voided) finds the attempt count moved and records nothing.
      if (Number(recorded.numAffectedRows ?? 0n) !== 1) return;
      await sql`
        update batches set completed = completed + ${outcome.isError ? 0 : 1}, failed = failed + ${outcome.isError ? 1 : 0},
          cost_pico = cost_pico + ${outcome.costPico}
        where id = ${line.batch.id}`.execute(trx);
    });
  }

  private async execute(line: ClaimedLine, requestId: string): Promise<LineOutcome> {
    const { batch } = line;
    const model = await this.model(line.body.model).catch((error: unknown) => {
      throw new TransientLineFailure('catalog unreachable', { cause: error });
    });
    if (!model) return errorLine(line, requestId, 400, 'invalid_request_error', 'model_not_found', `The model ${line.body.model} does not exist.`);
    if (model.expiresAt !== undefined && Number(model.expiresAt) * 1000 <= Date.now()) {
      return errorLine(line, requestId, 410, 'invalid_request_error', 'model_gone', `The model ${model.id} is no longer served.`);
    }
    // The key that created the batch, as it is now: a key disabled, deleted or expired since stops its lines.
    const key = await this.clients.auth.getApiKey({ accountId: batch.account_id, keyId: batch.key_id }, { requestId, deadlineMs: CALL_DEADLINE_MS }).then(
      (answer) => answer.key,
      (error: unknown) => {
        if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
        throw new TransientLineFailure('auth unreachable', { cause: error });
      },
    );
    if (!key || key.disabled || (key.expiresAtMs !== undefined && Number(key.expiresAtMs) <= Date.now())) {
      return errorLine(line, requestId, 401, 'invalid_api_key', 'invalid_api_key', 'The API key that created this batch is disabled, expired or deleted.');
    }
    const hold = lineHold(model, line.body);
    if (hold > MAXIMUM_HOLD_PICO) {
      return errorLine(line, requestId, 400, 'invalid_request_error', 'invalid_request', 'This line may cost more than 1000 credits: lower its max_completion_tokens.');
    }
    const context = { requestId, accountId: batch.account_id, keyId: batch.key_id, batch: true, lowPriority: true };
    const paid = hold > 0n;
    try {
      await this.clients.ledger.admit({
        context,
        modelId: model.id,
        paid,
        tier: batch.tier,
        limitGroup: model.limitGroup,
        // Batch lines are paced by the runner's concurrency, not by the interactive rate windows.
        requestsPerMinute: undefined,
        requestsPerDay: undefined,
        keyCreditLimit: key.creditLimit,
        keyLimitReset: key.limitReset,
        reserveCredits: paid ? formatCredits(hold) : undefined,
      }, { requestId, deadlineMs: CALL_DEADLINE_MS });
    } catch (error) {
      const failure = classify(error);
      if (failure.transient) throw new TransientLineFailure('admission failed', { cause: error });
      return errorLine(line, requestId, failure.status, failure.type, failure.code, failure.status === 402 ? `${failure.message} The line was not run.` : failure.message);
    }
    let outcome: LineOutcome;
    try {
      outcome = 'chat_request' in line.body
        ? await this.message(line, requestId, context, model, line.body)
        : line.batch.endpoint === '/v1/moderations'
          ? await this.moderate(line, requestId, context, model, line.body as ModerationsBody)
          : 'input' in line.body
          ? await this.embed(line, requestId, context, model, line.body as EmbeddingsBody)
          : await this.chat(line, requestId, context, model, line.body);
    } catch (error) {
      const failure = classify(error);
      if (failure.transient) throw new TransientLineFailure('routing failed', { cause: error });
      return errorLine(line, requestId, failure.status, failure.type, failure.code, failure.message);
    }
    return outcome;
  }

  private async chat(line: ClaimedLine, requestId: string, context: ChatRequest['context'], model: Model, body: ChatBody): Promise<LineOutcome> {
    const supported = new Set(model.supportedParameters);
    const when = <T>(parameter: string, value: T | null | undefined): T | undefined => (value === null || value === undefined || !supported.has(parameter) ? undefined : value);
    const { messages, tools, toolChoice } = chatMessages(body);
    const format = body.response_format;
    const request = ChatRequest.fromPartial({
      context,
      modelId: model.id,
      routingStrategy: '',
      endpoint: line.batch.endpoint === '/v1/responses' ? 'responses' : 'chat.completions',
      messages,
      tools: supported.has('tools') ? tools : [],
      toolChoice: supported.has('tool_choice') ? toolChoice : undefined,
      responseFormat: format && supported.has('response_format')
        ? { type: format.type, schemaName: format.type === 'json_schema' ? format.json_schema.name : '', schema: format.type === 'json_schema' ? JSON.stringify(format.json_schema.schema ?? {}) : '', strict: format.type === 'json_schema' ? (format.json_schema.strict ?? undefined) : undefined }
        : undefined,
      temperature: when('temperature', body.temperature),
      topP: when('top_p', body.top_p),
      stop: when('stop', body.stop === undefined || body.stop === null ? undefined : typeof body.stop === 'string' ? [body.stop] : body.stop) ?? [],
      maxOutputTokens: when('max_completion_tokens', body.max_completion_tokens ?? body.max_tokens),
      reasoningEffort: when('reasoning_effort', body.reasoning_effort),
      presencePenalty: when('presence_penalty', body.presence_penalty),
      frequencyPenalty: when('frequency_penalty', body.frequency_penalty),
      parallelToolCalls: when('parallel_tool_calls', body.parallel_tool_calls),
      seed: when('seed', body.seed === null || body.seed === undefined ? undefined : BigInt(body.seed)),
      user: body.user,
    });
    const response = await this.clients.router.chat(request, { requestId, deadlineMs: this.options.lineTimeoutMs });
    const usage = response.usage;
    const finish = response.choices.find((choice) => choice.finishReason !== '')?.finishReason ?? '';
    const cost = usage ? servedCost(usage, parsePricing(response.prices ?? {}), chatInsurance(usage, finish)) : undefined;
    const costPico = cost?.total ?? 0n;
    return {
      result: {
        id: `batch_req_${requestId}`,
        custom_id: line.customId,
        response: {
          status_code: 200,
          request_id: requestId,
          body: line.batch.endpoint === '/v1/responses'
            ? responseJson(response, requestId, costPico)
            : chatCompletionJson(response, costPico, cost ? costJson(cost) : costJson({ total: 0n, input: 0n, output: 0n, cacheRead: 0n, cacheWrite: 0n, reasoning: 0n })),
        },
        error: null,
      },
      isError: false,
      costPico,
    };
  }

  /** A moderations line: text inputs, each its own result (OpenAI's moderation object, with usage.cost). */
  private async moderate(line: ClaimedLine, requestId: string, context: ModerateRequest['context'], model: Model, body: ModerationsBody): Promise<LineOutcome> {
    const texts = typeof body.input === 'string' ? [body.input] : body.input;
    const request = ModerateRequest.fromPartial({
      context,
      modelId: model.id,
      routingStrategy: '',
      inputs: texts.map((text) => ({ input: { $case: 'text', value: text } })),
      inputForm: typeof body.input === 'string' ? ModerationInputForm.MODERATION_INPUT_FORM_STRING : ModerationInputForm.MODERATION_INPUT_FORM_STRINGS,
    });
    const response = await this.clients.router.moderate(request, { requestId, deadlineMs: this.options.lineTimeoutMs });
    // Routing prices a batch request at the model's batch prices (its answer names no prices): the same here.
    const costPico = response.usage ? servedCost(response.usage, parsePricing(batchPrices(model)), '').total : 0n;
    return {
      result: { id: `batch_req_${requestId}`, custom_id: line.customId, response: { status_code: 200, request_id: requestId, body: moderationJson(response, costPico) }, error: null },
      isError: false,
      costPico,
    };
  }

  /**
   * A message batch's line: the edge's converted request as it is (the edge checked and converted it at
   * create). Its result keeps the Router's answer; the edge renders it as a Messages `message`.
   */
  private async message(line: ClaimedLine, requestId: string, context: ChatRequest['context'], model: Model, body: MessageLineBody): Promise<LineOutcome> {
    const request = ChatRequest.fromJSON(body.chat_request);
    request.context = context;
    request.modelId = model.id;
    const response = await this.clients.router.chat(request, { requestId, deadlineMs: this.options.lineTimeoutMs });
    const usage = response.usage;
    const finish = response.choices.find((choice) => choice.finishReason !== '')?.finishReason ?? '';
    const costPico = usage ? servedCost(usage, parsePricing(response.prices ?? {}), chatInsurance(usage, finish)).total : 0n;
    return {
      result: { type: 'succeeded', custom_id: line.customId, request_id: requestId, response: ChatResponse.toJSON(response), cost: formatCredits(costPico) },
      isError: false,
      costPico,
    };
  }

  private async embed(line: ClaimedLine, requestId: string, context: EmbedRequest['context'], model: Model, body: EmbeddingsBody): Promise<LineOutcome> {
    const request = EmbedRequest.fromPartial({
      context,
      modelId: model.id,
      routingStrategy: '',
      texts: typeof body.input === 'string' ? [body.input] : body.input,
      dimensions: model.supportedParameters.includes('dimensions') ? body.dimensions : undefined,
    });
    const response = await this.clients.router.embed(request, { requestId, deadlineMs: this.options.lineTimeoutMs });
    const costPico = response.usage ? servedCost(response.usage, parsePricing(response.prices ?? {}), '').total : 0n;
    return {
      result: { id: `batch_req_${requestId}`, custom_id: line.customId, response: { status_code: 200, request_id: requestId, body: embeddingsJson(response, costPico) }, error: null },
      isError: false,
      costPico,
    };
  }

  /** Voids the charges of the line's earlier attempts (idempotent; an attempt that never charged is marked void). */
  private async voidEarlierAttempts(line: ClaimedLine): Promise<void> {
    if (line.attempts <= 1) return;
    const { batch } = line;
    await Promise.all(Array.from({ length: line.attempts - 1 }, (_, index) => {
      const requestId = attemptRequestId(batch.id, line.lineIndex, index + 1);
      return this.clients.ledger.voidCharge({ context: { requestId, accountId: batch.account_id, keyId: batch.key_id } }, { requestId, deadlineMs: CALL_DEADLINE_MS });
    })).catch((error: unknown) => {
      // Not run until the earlier attempts are void: two charges must never stand for one line.
      throw new TransientLineFailure('voiding earlier attempts failed', { cause: error });
    });
  }

  // ---------------------------------------------------------------- finalization

  /**
   * Batches with no line left to run (in_progress), or none running any more (cancelling), or past their
   * window (expired): their output and error files are written and the batch ends.
   */
  private async finalizeReady(): Promise<void> {
    const candidates = await sql<BatchesTable>`
      select b.* from batches b
      where (b.lease_expires_at is null or b.lease_expires_at < now()) and (
        (b.status = 'in_progress' and (b.expires_at <= now() or not exists (select 1 from batch_lines l where l.batch_id = b.id and l.status = 'pending')))
        or (b.status = 'cancelling' and not exists (
          select 1 from batch_lines l where l.batch_id = b.id and l.status = 'pending' and l.lease_owner is not null and l.lease_expires_at > now()))
        or b.status = 'finalizing')
      order by b.created_at limit 10`.execute(this.db);
    for (const candidate of candidates.rows) {
      const claimed = await sql<BatchesTable>`
        update batches set lease_owner = ${this.options.replicaId}, lease_expires_at = ${leaseUntil(this.options.leaseMs)},
          finalizing_at = case when status = 'in_progress' and expires_at > now() then now() else finalizing_at end,
          status = case when status = 'in_progress' and expires_at > now() then 'finalizing' else status end
        where id = ${candidate.id} and (lease_expires_at is null or lease_expires_at < now()) and status = ${candidate.status}
        returning *`.execute(this.db);
      const batch = claimed.rows[0];
      if (!batch) continue;
      this.heldBatches.add(batch.id);
      try {
        await this.finalize(batch);
      } finally {
        this.heldBatches.delete(batch.id);
      }
    }
  }

  private async finalize(batch: BatchesTable): Promise<void> {
    const ending = batch.status === 'cancelling' ? 'cancelled' : batch.status === 'in_progress' ? 'expired' : 'completed';
    if (ending === 'expired') {
      // OpenAI: the lines a batch did not reach in its window end in the error file as batch_expired.
      // One transaction: a finalization that dies here and runs again counts each line once.
      await this.db.transaction().execute(async (trx) => {
        const left = await sql<{ line_index: number; custom_id: string }>`
          update batch_lines set status = 'done', is_error = true, lease_owner = null, lease_expires_at = null,
            result = jsonb_build_object('id', 'batch_req_' || batch_id || '-' || line_index, 'custom_id', custom_id, 'response', null,
              'error', jsonb_build_object('code', 'batch_expired', 'message', 'This request could not be executed before the completion window expired.'))
          where batch_id = ${batch.id} and status = 'pending' returning line_index, custom_id`.execute(trx);
        await sql`update batches set failed = failed + ${left.rows.length} where id = ${batch.id}`.execute(trx);
      });
    }
    // The files' ids derive from the batch's: a finalization run again (its replica died between writing
    // them and ending the batch) finds them written and names them, never writing a second set.
    const write = async (errorsOnly: boolean) => {
      // A message batch's results are read from its lines (ListMessageBatchResults): no files.
      if (batch.kind === 'messages') return null;
      const count = await sql<{ n: number }>`select count(*)::int as n from batch_lines where batch_id = ${batch.id} and status = 'done' and is_error = ${errorsOnly}`.execute(this.db);
      if (count.rows[0]!.n === 0) return null;
      const kind = errorsOnly ? 'error' : 'output';
      const file = await this.files.storeGenerated(batch.account_id, `${batch.id}_${kind}.jsonl`, 'batch_output', this.results(batch.id, errorsOnly), generatedFileId(batch.id, kind));
      return file.id;
    };
    const outputFileId = await write(false);
    const errorFileId = await write(true);
    await sql`
      update batches set status = ${ending}, output_file_id = ${outputFileId}, error_file_id = ${errorFileId}, lease_owner = null, lease_expires_at = null,
        completed_at = ${ending === 'completed' ? sql`now()` : sql`completed_at`},
        cancelled_at = ${ending === 'cancelled' ? sql`now()` : sql`cancelled_at`},
        expired_at = ${ending === 'expired' ? sql`now()` : sql`expired_at`}
      where id = ${batch.id} and lease_owner = ${this.options.replicaId}`.execute(this.db);
    this.logger.info({ batch: batch.id, status: ending }, 'batch finished');
  }

  /** The done lines' results in input order, as JSONL, a page of rows at a time. */
  private async *results(batchId: string, errorsOnly: boolean): AsyncGenerator<Buffer> {
    let after = -1;
    for (;;) {
      const rows = await sql<{ line_index: number; result: unknown }>`
        select line_index, result from batch_lines where batch_id = ${batchId} and status = 'done' and is_error = ${errorsOnly} and line_index > ${after}
        order by line_index limit ${RESULT_PAGE}`.execute(this.db);
      if (rows.rows.length === 0) return;
      yield Buffer.from(rows.rows.map((row) => `${JSON.stringify(row.result)}\n`).join(''));
      after = rows.rows.at(-1)!.line_index;
    }
  }
}

