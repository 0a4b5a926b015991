import { Cancellation, ErrorReason, GatewayError, GrpcStatus, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import { ChatRequest, ChatResponse, type UsageEvent } from '@gateway/proto';
import { claimLeased, LeasedRunner, leaseUntil } from '../leased-work-loop.js';
import type { BackgroundResponsesTable } from './background-responses.js';
import type { PriorityGate } from '../priority-gate.js';
import { RecordsBoundExceeded, type BackgroundEvents, type RecordWriter } from './background-events.js';
import { StreamAnswer } from './stream-answer.js';
import { runFailure, type RunFailure } from '../run-failure.js';
import { admit, CALL_DEADLINE_MS, currentKey, TransientRunFailure, voidEarlierAttempts, type RunClients } from '../run-steps.js';

/**
 * Runs background responses (docs/stored-responses.md "Background responses"), as the batch runner runs
 * batch lines: every replica runs one; they share the work through Postgres leases taken with SKIP
 * LOCKED (renewed while a run lasts), so a response is run by one replica at a time and a crashed
 * replica's runs are taken up again once their lease lapses. A run goes through routing's normal path —
 * Ledger.Admit of the hold the edge bounded (a 0-credit account's run fails with 402, nothing charged),
 * then Router.ChatStream (failover, provider choice, usage events) at the model's ordinary prices, every
 * stream message stored as a record of the run (background-events.ts) for the clients that stream it,
 * and the answer gathered from them. The attempt's
 * request id — the key of its hold, usage event and charge — is `<response id>` for the first attempt and
 * `<response id>.<n>` after; before an attempt runs, every earlier attempt's charge is voided (their
 * answers reached nobody), and only the attempt whose answer is recorded stays charged. A cancel aborts
 * the running Router call (the provider call behind it stops; what routing metered is charged).
 */
export interface BackgroundRunnerOptions {
  replicaId: string;
  /** Runs at once on this replica, counted together with `otherRunning` (batch lines): one lower-priority budget. */
  concurrency: number;
  leaseMs: number;
  pollIntervalMs: number;
  /** Transient failures (no upstream left, a service unreachable) are retried this many times. */
  maxAttempts: number;
  /** Bound of one Router call. */
  runTimeoutMs: number;
}

const RETRY_DELAY_MS = 2_000;

/** The request id of an attempt: the response id for the first, `<id>.<attempt>` after. */
export function backgroundAttemptId(responseId: string, attempt: number): string {
  return attempt <= 1 ? responseId : `${responseId}.${attempt}`;
}

/** A run's stored failure (error_json): what the edge renders as the Response's `error` and its stream's `error` event. */
export type StoredFailure = Omit<RunFailure, 'transient'>;

/**
 * The stored failure of a run that ended with `error` (the decision shared with batch lines,
 * run-failure.ts); a run whose records outgrew their bound is the caller's 400.
 */
export function storedFailure(error: unknown): StoredFailure {
  const cause = error instanceof TransientRunFailure ? error.cause : error;
  if (cause instanceof RecordsBoundExceeded) return { status: 400, type: 'invalid_request_error', code: 'response_too_large', message: cause.message };
  const { transient: _transient, ...failure } = runFailure(cause);
  return failure;
}

/** Runs background responses on a LeasedWorkLoop whose work is keyed by response, each with its cancellation. */
export class BackgroundRunner extends LeasedRunner<Cancellation> {
  constructor(
    private readonly db: Kysely<{ background_responses: BackgroundResponsesTable }>,
    private readonly clients: RunClients,
    private readonly options: BackgroundRunnerOptions,
    private readonly logger: Logger,
    /** Batch lines running on this replica: they share `concurrency`. */
    otherRunning: () => number,
    /** Where the run's stream is recorded. */
    private readonly events: BackgroundEvents,
    /** How much of `concurrency` interactive traffic leaves to lower-priority work now (priority-gate.ts). */
    gate?: PriorityGate,
  ) {
    super({ ...options, name: 'background runner' }, logger, otherRunning, gate);
  }

  /** A cancel this replica answered: its own run stops at once. */
  cancelled(accountId: string, responseId: string): void {
    this.loop.get(`${accountId}\n${responseId}`)?.abort();
  }

  /** One round: claims queued (or lapsed) responses for the free slots and runs them. */
  protected async round(): Promise<void> {
    const free = this.loop.free();
    if (free <= 0) return;
    const claimed = await claimLeased<BackgroundResponsesTable>(this.db, {
      table: 'background_responses',
      keys: ['account_id', 'response_id'],
      where: sql`status in ('queued', 'in_progress')`,
      orderBy: 'created_at',
      limit: free,
      owner: this.options.replicaId,
      leaseMs: this.options.leaseMs,
      set: sql`status = 'in_progress'`,
    });
    for (const row of claimed) this.launch(row);
  }

  /** Keeps this replica's leases, and stops runs cancelled through another replica. */
  protected async renew(): Promise<void> {
    if (this.loop.runningCount === 0) return;
    try {
      const mine = await sql<{ account_id: string; response_id: string; status: string }>`
        update background_responses set lease_expires_at = case when status = 'in_progress' then ${leaseUntil(this.options.leaseMs)} else lease_expires_at end
        where lease_owner = ${this.options.replicaId} and status in ('in_progress', 'cancelled') and response_id = any(${this.loop.keys().map((key) => key.split('\n')[1]!)})
        returning account_id, response_id, status`.execute(this.db);
      for (const row of mine.rows) if (row.status === 'cancelled') this.cancelled(row.account_id, row.response_id);
    } catch (error) {
      this.logger.warn({ err: error }, 'renewing background response leases failed');
    }
  }

  private launch(row: BackgroundResponsesTable): void {
    const cancel = new Cancellation();
    this.loop.launch(`${row.account_id}\n${row.response_id}`, cancel, () => this.run(row, cancel), (error: unknown) =>
      this.logger.warn({ err: error, response: row.response_id }, 'background response failed to record; its lease lapses and it runs again'));
  }

  private async run(row: BackgroundResponsesTable, cancel: Cancellation): Promise<void> {
    const requestId = backgroundAttemptId(row.response_id, row.attempts);
    let outcome: { answer: ChatResponse } | { failure: StoredFailure };
    let records: RecordWriter | undefined;
    try {
      if (row.attempts > this.options.maxAttempts * 3) {
        throw new GatewayError(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL, `This response was started ${row.attempts} times without finishing.`);
      }
      await voidEarlierAttempts(this.clients.ledger, { accountId: row.account_id, keyId: row.key_id }, row.attempts, (attempt) => backgroundAttemptId(row.response_id, attempt));
      records = await this.events.writer(row.account_id, row.response_id, row.attempts).catch((error: unknown) => {
        throw new TransientRunFailure('reading the run\'s records failed', { cause: error });
      });
      await records.begin().catch((error: unknown) => {
        throw new TransientRunFailure('recording the attempt failed', { cause: error });
      });
      const answer = await this.execute(row, requestId, cancel, records);
      // Every record is written before the run is recorded: a follower that sees it ended has them all.
      await records.flush().catch((error: unknown) => {
        throw new TransientRunFailure('recording the run\'s stream failed', { cause: error });
      });
      outcome = { answer };
    } catch (error) {
      if (cancel.aborted) {
        // cancelled: the row already says so (what was recorded before it stays for the readers).
        records?.discard();
        return;
      }
      if (error instanceof TransientRunFailure && row.attempts < this.options.maxAttempts) {
        records?.discard();
        // The next attempt's records follow this one's. Its lease lapses shortly and a replica (this one or another) runs it again.
        await sql`
          update background_responses set lease_expires_at = now() + make_interval(secs => ${RETRY_DELAY_MS / 1000})
          where account_id = ${row.account_id} and response_id = ${row.response_id} and lease_owner = ${this.options.replicaId} and attempts = ${row.attempts}`.execute(this.db);
        return;
      }
      const failure = storedFailure(error);
      await records?.flush().catch(() => undefined);
      outcome = { failure };
    }
    // Recorded by the latest attempt only, and not over a cancel: an earlier attempt (its lease lapsed and
    // the response taken up again, its charge voided) finds the attempt count moved and records nothing.
    const answer = 'answer' in outcome ? Buffer.from(ChatResponse.encode(outcome.answer).finish()) : null;
    await sql`
      update background_responses set status = ${'answer' in outcome ? 'completed' : 'failed'}, answer = ${answer},
        error_json = ${'failure' in outcome ? JSON.stringify(outcome.failure) : ''}, attempt_request_id = ${requestId}, ended_at = now(),
        lease_owner = null, lease_expires_at = null
      where account_id = ${row.account_id} and response_id = ${row.response_id} and status = 'in_progress' and attempts = ${row.attempts}`.execute(this.db);
  }

  private async execute(row: BackgroundResponsesTable, requestId: string, cancel: Cancellation, records: RecordWriter): Promise<ChatResponse> {
    const model = await this.clients.catalog.getModel({ model: row.model_id }, { requestId, deadlineMs: CALL_DEADLINE_MS }).then(
      (answer) => answer.model,
      (error: unknown) => {
        if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
        throw new TransientRunFailure('catalog unreachable', { cause: error });
      },
    );
    if (!model) throw new GatewayError(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, `The model ${row.model_id} does not exist.`, { code: 'model_not_found' });
    // The key that created it, as it is now: a key disabled, deleted or expired since stops the run.
    const key = await currentKey(this.clients.auth, { accountId: row.account_id, keyId: row.key_id }, requestId);
    if (!key) throw new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'The API key that created this response is disabled, expired or deleted.');
    const context = { requestId, accountId: row.account_id, keyId: row.key_id };
    // Paced by the runner's concurrency (one budget with batch lines), not by the interactive rate windows.
    await admit(this.clients.ledger, { context, model, tier: row.tier, key, holdPico: BigInt(row.hold_pico) });
    const request = ChatRequest.decode(row.request);
    request.context = { ...context, lowPriority: true };
    const gathered = new StreamAnswer();
    let settlement: UsageEvent | undefined;
    // The stream stops when the run is cancelled, or when its records go over their bound.
    const stop = new Cancellation();
    const onCancel = () => stop.abort();
    cancel.addEventListener('abort', onCancel);
    try {
      for await (const message of this.clients.router.chatStream({ chat: request, combinedStart: false }, { requestId, deadlineMs: this.options.runTimeoutMs, signal: stop })) {
        if (message.event?.$case === 'settlement') {
          settlement = message.event.value;
          continue;
        }
        gathered.add(message);
        try {
          records.add(message);
          // A batch that could not be written (this attempt voided, or Postgres failing): stop the provider call.
          if (records.failed) throw new TransientRunFailure('recording the run\'s stream failed');
        } catch (error) {
          stop.abort();
          throw error;
        }
      }
    } catch (error) {
      if (error instanceof RecordsBoundExceeded || error instanceof TransientRunFailure) throw error;
      if (gathered.complete) {
        // The answer is whole; its usage event may have died with the routing replica: settled here
        // (once per request id, whatever routing managed to store), as the edge does for its streams.
        this.logger.warn({ err: error, request_id: requestId, handed_over: settlement !== undefined }, 'router stream broke after its usage; settling the handed-over event');
        if (settlement) await this.settle(settlement);
        return gathered.answer();
      }
      if (runFailure(error).transient && !cancel.aborted) throw new TransientRunFailure('routing failed', { cause: error });
      throw error;
    } finally {
      cancel.removeEventListener('abort', onCancel);
    }
    if (!gathered.complete) throw new TransientRunFailure('routing failed', { cause: new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'The router stream ended without its usage.') });
    return gathered.answer();
  }

  private async settle(event: UsageEvent): Promise<void> {
    await this.clients.ledger.settleUsage({ events: [event] }, { requestId: event.requestId, deadlineMs: CALL_DEADLINE_MS }).catch((error: unknown) => {
      throw new TransientRunFailure('settling the handed-over usage failed', { cause: error });
    });
  }
}
