import { chatInsurance, ErrorReason, formatCredits, GatewayError, GrpcStatus, parsePricing, servedCost, costJson, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import { ChatRequest, ChatResponse, EmbedRequest, ModerateRequest, ModerationInputForm, type Model } from '@gateway/proto';
import type { BatchesTable, JobsDatabase } from '../jobs-schema.js';
import { claimLeased, LeasedRunner, leaseUntil } from '../leased-work-loop.js';
import type { Files } from '../files/files.js';
import type { PriorityGate } from '../priority-gate.js';
import { isMoneyRefusal, runFailure } from '../run-failure.js';
import { admit, CALL_DEADLINE_MS, currentKey, TransientRunFailure, voidEarlierAttempts, type RunClients } from '../run-steps.js';
import { BatchFinalizer, whileHeld } from './batch-finalize.js';
import {
  CATALOG_ENDPOINT, chatMessages, parseLine, type BatchEndpoint, type ChatBody, type EmbeddingsBody, type LineProblem, type ModerationsBody,
} from './batch-lines.js';
import { chatCompletionJson, embeddingsJson, errorLine, moderationJson, responseJson, type ClaimedLine, type LineOutcome } from './line-answers.js';
import { batchPrices, lineHold, MAXIMUM_HOLD_PICO, type LineBody, type MessageLineBody } from './line-hold.js';

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

/** The services a batch line calls (those of every lower-priority run, run-steps.ts). */
export type BatchClients = RunClients;

const INSERT_BATCH = 500;
const MAX_VALIDATION_ERRORS = 20;
/** Pause of a line after a transient failure before another attempt. */
const RETRY_DELAY_MS = 2_000;

/** Validation found problems: the batch fails with them (its lines' inserts are rolled back). */
class ValidationFailed extends Error {}

/** The request id of a line's attempt: `<batch>-<line>` for the first, `<batch>-<line>.<attempt>` after. */
export function attemptRequestId(batchId: string, lineIndex: number, attempt: number): string {
  return attempt <= 1 ? `${batchId}-${lineIndex}` : `${batchId}-${lineIndex}.${attempt}`;
}

/**
 * The error line of a line that failed with `error` (a TransientRunFailure's cause once its attempts are
 * spent): the failure decided by run-failure.ts, the decision background responses share.
 */
export function failedLine(line: Pick<ClaimedLine, 'customId'>, requestId: string, error: unknown): LineOutcome {
  const { transient: _transient, ...failure } = runFailure(error instanceof TransientRunFailure ? error.cause : error);
  return errorLine(line, requestId, failure);
}

/** Runs batch lines on a LeasedWorkLoop whose work is keyed by line, each with its batch's account. */
export class BatchRunner extends LeasedRunner<string> {
  /** Batches this replica is validating or finalizing (their leases are renewed with the lines'). */
  private readonly heldBatches = new Set<string>();
  private readonly models = new Map<string, { model: Model | undefined; at: number }>();
  private readonly finalizer: BatchFinalizer;

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
    super({ ...options, name: 'batch runner' }, logger, otherRunning, gate);
    this.finalizer = new BatchFinalizer(db, files, options, logger, this.heldBatches);
  }

  /** One round: validate, finalize, expire, then fill free slots with lines. */
  protected async round(): Promise<void> {
    await this.validateOne();
    await this.finalizer.finalizeReady();
    await this.claimLines();
  }

  protected async renew(): Promise<void> {
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
    await whileHeld(this.heldBatches, batch.id, () => this.validate(batch));
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
      const owner = { accountId: line.batch.account_id, keyId: line.batch.key_id };
      await voidEarlierAttempts(this.clients.ledger, owner, line.attempts, (attempt) => attemptRequestId(line.batch.id, line.lineIndex, attempt));
      outcome = await this.execute(line, requestId);
    } catch (error) {
      if (!(error instanceof TransientRunFailure) || line.attempts >= this.options.maxAttempts) {
        outcome = failedLine(line, requestId, error);
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
      throw new TransientRunFailure('catalog unreachable', { cause: error });
    });
    if (!model) return failedLine(line, requestId, new GatewayError(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, `The model ${line.body.model} does not exist.`));
    if (model.expiresAt !== undefined && Number(model.expiresAt) * 1000 <= Date.now()) {
      return failedLine(line, requestId, new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_MODEL_GONE, `The model ${model.id} is no longer served.`));
    }
    // The key that created the batch, as it is now: a key disabled, deleted or expired since stops its lines.
    const key = await currentKey(this.clients.auth, { accountId: batch.account_id, keyId: batch.key_id }, requestId);
    if (!key) {
      return failedLine(line, requestId, new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'The API key that created this batch is disabled, expired or deleted.'));
    }
    const hold = lineHold(model, line.body);
    if (hold > MAXIMUM_HOLD_PICO) {
      return failedLine(line, requestId, new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST, 'This line may cost more than 1000 credits: lower its max_completion_tokens.'));
    }
    const context = { requestId, accountId: batch.account_id, keyId: batch.key_id, batch: true, lowPriority: true };
    // Batch lines are paced by the runner's concurrency, not by the interactive rate windows.
    try {
      await admit(this.clients.ledger, { context, model, tier: batch.tier, key, holdPico: hold });
    } catch (error) {
      if (error instanceof TransientRunFailure) throw error;
      const failure = runFailure(error);
      return errorLine(line, requestId, isMoneyRefusal(failure) ? { ...failure, message: `${failure.message} The line was not run.` } : failure);
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
      if (runFailure(error).transient) throw new TransientRunFailure('routing failed', { cause: error });
      return failedLine(line, requestId, error);
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

}

