import type { Migration } from 'kysely';
import { BACKGROUND_REQUEST_MAX_BYTES, errors, GatewayError, GrpcStatus, ErrorReason, parseCredits } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import { ChatRequest, ChatResponse, type BackgroundRun, type CancelBackgroundResponseResponse, type CreateBackgroundResponseRequest, type PendingConversationTurn } from '@gateway/proto';
import type { ResponsesStore, ResponsesTables } from './responses-store.js';

/*
 * Background responses (`background: true` on POST /v1/responses, docs/stored-responses.md): the edge
 * answers at once with the response `queued`; the request is kept here, durably, beside its stored
 * response, and a jobs replica runs it later (background-runner.ts). The row belongs to its stored
 * response (a foreign key with cascade): deleting the response, its retention or the account's bound
 * removes the run too. Every lookup has the account in its key.
 */

export interface BackgroundResponsesTable {
  account_id: string;
  response_id: string;
  key_id: string;
  tier: string;
  /** queued | in_progress | completed | failed | cancelled */
  status: string;
  /** The converted ChatRequest (proto bytes, no context). */
  request: Buffer;
  request_json: string;
  model_id: string;
  hold_pico: string;
  answer: Buffer | null;
  error_json: string;
  attempts: number;
  attempt_request_id: string;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  created_at: Date;
  ended_at: Date | null;
  /** Made in a conversation: it ('' otherwise), the request's own input (JSON), and whether its turn is in it yet. */
  conversation_id: string;
  conversation_input_json: string;
  conversation_appended: boolean;
}

export const backgroundMigrations: Record<string, Migration> = {
  'responses-0052_background_responses': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table background_responses (
          account_id text not null,
          response_id text not null,
          key_id text not null,
          tier text not null,
          status text not null,
          request bytea not null,
          request_json text not null,
          model_id text not null,
          hold_pico numeric(40, 0) not null,
          answer bytea,
          error_json text not null default '',
          attempts integer not null default 0,
          attempt_request_id text not null default '',
          lease_owner text,
          lease_expires_at timestamptz,
          created_at timestamptz not null default now(),
          ended_at timestamptz,
          primary key (account_id, response_id),
          foreign key (account_id, response_id) references stored_responses (account_id, response_id) on delete cascade
        )`.execute(db);
      // What the runners look for (and the per-account cap counts): the unfinished ones, oldest first.
      await sql`create index background_responses_unfinished on background_responses (created_at) where status in ('queued', 'in_progress')`.execute(db);
      await sql`create index background_responses_account_unfinished on background_responses (account_id) where status in ('queued', 'in_progress')`.execute(db);
    },
  },
  // A background response made in a conversation: its turn goes into the conversation once its run completed.
  'responses-0055_background_conversation_turns': {
    up: async (db: Kysely<any>) => {
      await sql`
        alter table background_responses
          add column conversation_id text not null default '',
          add column conversation_input_json text not null default '',
          add column conversation_appended boolean not null default false`.execute(db);
      await sql`
        create index background_responses_pending_turns on background_responses (account_id, conversation_id, created_at)
          where conversation_id <> '' and not conversation_appended`.execute(db);
    },
  },
};

/** Most pending turns ListPendingConversationTurns answers at once (the edge asks again while it gets this many). */
export const MAX_PENDING_TURNS = 100;

export interface BackgroundLimits {
  /** Background responses of one account queued or running at once (past it: 429 at creation). */
  maxActivePerAccount: number;
}

export const DEFAULT_BACKGROUND_LIMITS: BackgroundLimits = { maxActivePerAccount: 100 };

/** Most a request's converted form may take (the stored entry's bound covers the rest). */
const MAX_REQUEST_BYTES = BACKGROUND_REQUEST_MAX_BYTES;
const MAX_HOLD_PICO = parseCredits('1000');

export const UNFINISHED = ['queued', 'in_progress'] as const;

/** A row's state as GetResponse answers it. */
export function runOf(row: Pick<BackgroundResponsesTable, 'status' | 'request_json' | 'model_id' | 'answer' | 'error_json' | 'ended_at' | 'attempt_request_id'>): BackgroundRun {
  return {
    status: row.status,
    requestJson: row.request_json,
    modelId: row.model_id,
    answer: row.status === 'completed' && row.answer ? ChatResponse.decode(row.answer) : undefined,
    errorJson: row.error_json,
    endedAt: BigInt(row.ended_at ? Math.floor(row.ended_at.getTime() / 1000) : 0),
    attemptRequestId: row.attempt_request_id,
  };
}

/** Creation, lookup and cancel of background responses; the runner (background-runner.ts) runs them. */
export class BackgroundResponses {
  /** Cancels of runs on this replica, heard at once (another replica's runner hears it at its next heartbeat). */
  onCancelled: (accountId: string, responseId: string) => void = () => undefined;

  constructor(
    private readonly db: Kysely<ResponsesTables & { background_responses: BackgroundResponsesTable }>,
    private readonly store: ResponsesStore,
    private readonly limits: BackgroundLimits,
  ) {}

  async create(request: CreateBackgroundResponseRequest): Promise<void> {
    const entry = request.response;
    if (!entry || !entry.accountId || !request.request) throw errors.invalidRequest('A background response needs its account, response and request.', 'response');
    const requestBytes = Buffer.from(ChatRequest.encode({ ...request.request, context: undefined }).finish());
    if (requestBytes.length > MAX_REQUEST_BYTES) throw errors.invalidRequest(`The request is over ${MAX_REQUEST_BYTES} bytes.`, 'request');
    const holdPico = request.holdCredits === '' ? 0n : parseCredits(request.holdCredits);
    if (holdPico < 0n || holdPico > MAX_HOLD_PICO) throw errors.invalidRequest('hold_credits: 0..1000.', 'hold_credits');
    await this.db.transaction().execute(async (trx) => {
      // One account's creations one at a time: the cap is counted and kept under concurrency.
      await sql`select pg_advisory_xact_lock(hashtext('background_responses'), hashtext(${entry.accountId}))`.execute(trx);
      const existing = await sql<{ n: number }>`
        select count(*)::int as n from background_responses where account_id = ${entry.accountId} and response_id = ${entry.responseId}`.execute(trx);
      if (existing.rows[0]!.n > 0) return;
      const active = await sql<{ n: number }>`
        select count(*)::int as n from background_responses where account_id = ${entry.accountId} and status in ('queued', 'in_progress')`.execute(trx);
      if (active.rows[0]!.n >= this.limits.maxActivePerAccount) {
        throw new GatewayError(
          GrpcStatus.RESOURCE_EXHAUSTED,
          ErrorReason.ERROR_REASON_RATE_LIMITED,
          `This account has ${this.limits.maxActivePerAccount} background responses queued or running, its most; wait for one to finish (or cancel one).`,
          { code: 'background_responses_limit', retryAfterSeconds: 5 },
        );
      }
      // Made in a conversation: nothing goes into it now (its turn is appended once the run completed), so
      // the entry is stored without it; the conversation and the request's own input wait on the run's row.
      const { stored } = await this.store.putWith(trx as unknown as Kysely<ResponsesTables>, [{ ...entry, conversationId: '', conversationItemsJson: '' }]);
      if (stored !== 1) throw errors.invalidRequest('The response is over the size a stored response may have.', 'response');
      const conversationInput = entry.conversationId === '' ? '' : entry.conversationItemsJson;
      await sql`
        insert into background_responses (account_id, response_id, key_id, tier, status, request, request_json, model_id, hold_pico, conversation_id, conversation_input_json)
        values (${entry.accountId}, ${entry.responseId}, ${entry.keyId}, ${request.tier}, 'queued', ${requestBytes}, ${request.requestJson}, ${request.modelId}, ${holdPico.toString()},
          ${entry.conversationId}, ${conversationInput})
        on conflict do nothing`.execute(trx);
    });
  }

  /**
   * A conversation's completed background turns not yet in it, oldest first (at most MAX_PENDING_TURNS):
   * the edge renders each one's output (the dialect is the edge's) and appends it with appendTurn.
   */
  async pendingTurns(accountId: string, conversationId: string): Promise<PendingConversationTurn[]> {
    if (conversationId === '') return [];
    const rows = await sql<BackgroundResponsesTable & { response_json: string }>`
      select b.*, s.response_json from background_responses b
        join stored_responses s on s.account_id = b.account_id and s.response_id = b.response_id
       where b.account_id = ${accountId} and b.conversation_id = ${conversationId} and not b.conversation_appended and b.status = 'completed'
       order by b.created_at, b.response_id limit ${MAX_PENDING_TURNS}`.execute(this.db);
    return rows.rows.map((row) => ({ responseId: row.response_id, responseJson: row.response_json, background: runOf(row), inputJson: row.conversation_input_json }));
  }

  /**
   * A completed background turn's items into its conversation, once: marked appended in the same
   * transaction (a second call, from another edge or a retry, finds it marked and appends nothing).
   */
  async appendTurn(accountId: string, conversationId: string, responseId: string, itemsJson: string): Promise<boolean> {
    const conversations = this.store.conversations;
    if (conversations === undefined || conversationId === '') return false;
    return this.db.transaction().execute(async (trx) => {
      const marked = await sql`
        update background_responses set conversation_appended = true
         where account_id = ${accountId} and response_id = ${responseId} and conversation_id = ${conversationId}
           and status = 'completed' and not conversation_appended
        returning response_id`.execute(trx);
      if (marked.rows.length === 0) return false;
      await conversations.appendFromResponse(trx, accountId, conversationId, itemsJson, responseId);
      return true;
    });
  }

  /** The run of a stored response, when it is a background one. */
  async runOf(accountId: string, responseId: string): Promise<BackgroundRun | undefined> {
    const row = await sql<BackgroundResponsesTable>`
      select * from background_responses where account_id = ${accountId} and response_id = ${responseId}`.execute(this.db);
    return row.rows[0] ? runOf(row.rows[0]) : undefined;
  }

  /** A background response's status alone (a follower's cheap check); undefined: none (deleted, or not a background one). */
  async statusOf(accountId: string, responseId: string): Promise<string | undefined> {
    const row = await sql<{ status: string }>`
      select status from background_responses where account_id = ${accountId} and response_id = ${responseId}`.execute(this.db);
    return row.rows[0]?.status;
  }

  /** Cancels a queued or running one; a finished one is answered as it is. 400 for a response that is not a background one. */
  async cancel(accountId: string, responseId: string): Promise<CancelBackgroundResponseResponse> {
    // NOT_FOUND for an unknown or another account's response (the account is in the key).
    await this.store.get(accountId, responseId);
    const cancelled = await sql<{ lease_owner: string | null }>`
      update background_responses set status = 'cancelled', ended_at = now()
      where account_id = ${accountId} and response_id = ${responseId} and status in ('queued', 'in_progress')
      returning lease_owner`.execute(this.db);
    if (cancelled.rows.length > 0) this.onCancelled(accountId, responseId);
    const found = await this.store.get(accountId, responseId);
    const run = await this.runOf(accountId, responseId);
    if (run === undefined) {
      throw new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_INVALID_REQUEST, 'Cannot cancel a synchronous response.', { code: 'invalid_request' });
    }
    return { ...found, background: run };
  }
}
