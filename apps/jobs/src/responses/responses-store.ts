import type { Migration } from 'kysely';
import { errors, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { StoredResponse } from '@gateway/proto';
import { pageOfItems, UnknownCursorError, type ItemsPage } from './input-items.js';
import type { ConversationsStore } from './conversations-store.js';
import { sweepExpired } from './sweep-expired.js';

/*
 * Stored responses (issue 41 item 6): the response object as answered and the input the model was
 * given, per account, for a retention. Written behind the answer by the edge (PutResponses batches);
 * read by GET /v1/responses/{id}, its input_items and a continuation's previous_response_id. Every
 * lookup has the account in its key: another account's id is not found, as an unknown one is.
 */

interface StoredResponsesTable {
  account_id: string;
  response_id: string;
  key_id: string;
  response_json: string;
  input_items_json: string;
  created_at: Date;
  expires_at: Date;
}

export interface ResponsesTables {
  stored_responses: StoredResponsesTable;
}

/** The jobs service's migrations for stored responses (named `responses-*`, 0050+; the jobs app applies them beside its own, unordered). */
export const responsesMigrations: Record<string, Migration> = {
  'responses-0050_stored_responses': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table stored_responses (
          account_id text not null,
          response_id text not null,
          key_id text not null,
          response_json text not null,
          input_items_json text not null,
          created_at timestamptz not null,
          expires_at timestamptz not null,
          primary key (account_id, response_id)
        )`.execute(db);
      await sql`create index stored_responses_expires_at on stored_responses (expires_at)`.execute(db);
    },
  },
  'responses-0051_account_order': {
    // An account's responses oldest first: what the per-account bound evicts.
    up: async (db: Kysely<any>) => {
      await sql`create index stored_responses_account_created on stored_responses (account_id, created_at, response_id)`.execute(db);
    },
  },
};

export interface ResponsesStoreOptions {
  /** How long a response is kept after it was answered (default 30 days, OpenAI's). */
  retentionSeconds: number;
  /** Largest entry stored, response and input JSON together, in characters (default 8 Mi). */
  maxEntryChars: number;
  /** How often responses past their retention are deleted (default 60 s). */
  sweepIntervalMs: number;
  /** Most responses kept per account: past it the account's oldest go first (default 100,000). */
  maxResponsesPerAccount: number;
}

export const DEFAULT_RESPONSES_STORE: ResponsesStoreOptions = {
  retentionSeconds: 30 * 24 * 3600,
  maxEntryChars: 8 * 1024 * 1024,
  sweepIntervalMs: 60_000,
  maxResponsesPerAccount: 100_000,
};
/** Most entries in one PutResponses (the edge's batches are smaller). */
export const MAX_PUT_ENTRIES = 256;
/** Largest PutResponses message the jobs server reads: a batch of the edge's (8 MiB) or one whole entry at the bound, with room. */
export const RESPONSES_STORE_MAX_RECEIVE_BYTES = 24 * 1024 * 1024;
const ID_PATTERN = /^resp_[A-Za-z0-9_-]{1,120}$/;

function notFound(responseId: string) {
  return errors.notFound(`Response with id '${responseId.slice(0, 200)}' not found.`);
}

/** The store over the jobs service's Postgres schema, with its bounds and sweeper. */
export class ResponsesStore {
  private readonly timer: NodeJS.Timeout;
  /** Where a response made in a conversation appends its items (set by the jobs service; swept with the responses). */
  conversations: ConversationsStore | undefined;

  constructor(
    private readonly db: Kysely<ResponsesTables>,
    private readonly options: ResponsesStoreOptions,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => void this.sweep(), options.sweepIntervalMs);
    this.timer.unref();
  }

  /** Stores a batch; an entry already stored is kept as it was (a retried batch changes nothing). */
  put(entries: readonly StoredResponse[]): Promise<{ stored: number; refused: number }> {
    return this.putWith(this.db, entries);
  }

  /** `put` inside the caller's transaction (a background response is stored with its run). */
  async putWith(db: Kysely<ResponsesTables>, entries: readonly StoredResponse[]): Promise<{ stored: number; refused: number }> {
    if (entries.length > MAX_PUT_ENTRIES) throw errors.invalidRequest(`responses: at most ${MAX_PUT_ENTRIES} entries per call.`, 'responses');
    const rows: StoredResponsesTable[] = [];
    let refused = 0;
    for (const entry of entries) {
      if (!entry.accountId || !ID_PATTERN.test(entry.responseId) || entry.responseJson.length + entry.inputItemsJson.length > this.options.maxEntryChars) {
        refused++;
        continue;
      }
      const createdMs = Number(entry.createdAt) * 1000 || this.now();
      rows.push({
        account_id: entry.accountId,
        response_id: entry.responseId,
        key_id: entry.keyId,
        response_json: entry.responseJson,
        input_items_json: entry.inputItemsJson,
        created_at: new Date(createdMs),
        expires_at: new Date(createdMs + this.options.retentionSeconds * 1000),
      });
    }
    if (refused > 0) this.logger.warn({ refused }, 'stored responses refused (over the size bound or without an account or id)');
    if (rows.length > 0) {
      // With conversation items to append, in one transaction: the items go in only with the response's first put.
      const inConversation = entries.some((entry) => entry.conversationId !== '');
      if (inConversation && !db.isTransaction) {
        await db.transaction().execute((trx) => this.insertRows(trx, rows, entries));
      } else {
        await this.insertRows(db, rows, entries);
      }
    }
    return { stored: rows.length, refused };
  }

  private async insertRows(db: Kysely<ResponsesTables>, rows: StoredResponsesTable[], entries: readonly StoredResponse[]): Promise<void> {
    const inserted = await db
      .insertInto('stored_responses')
      .values(rows)
      .onConflict((conflict) => conflict.columns(['account_id', 'response_id']).doNothing())
      .returning(['account_id', 'response_id'])
      .execute();
    if (this.conversations !== undefined) {
      const fresh = new Set(inserted.map((row) => `${row.account_id}\n${row.response_id}`));
      // Conversations locked in one order by every put (no deadlock between two batches); a stable sort keeps each one's turns in order.
      const inConversations = entries.filter((entry) => entry.conversationId !== '').sort((a, b) => (a.conversationId < b.conversationId ? -1 : a.conversationId > b.conversationId ? 1 : 0));
      for (const entry of inConversations) {
        if (!fresh.has(`${entry.accountId}\n${entry.responseId}`)) continue;
        await this.conversations.appendFromResponse(db, entry.accountId, entry.conversationId, entry.conversationItemsJson, entry.responseId);
      }
    }
    // Each account within its bound, its oldest out first (off the answers' path: puts are written behind them).
    for (const accountId of new Set(rows.map((row) => row.account_id))) {
      await sql`
        delete from stored_responses where account_id = ${accountId} and (created_at, response_id) in (
          select created_at, response_id from stored_responses where account_id = ${accountId}
           order by created_at desc, response_id desc offset ${this.options.maxResponsesPerAccount})`.execute(db);
    }
  }

  async get(accountId: string, responseId: string): Promise<{ responseJson: string; inputItemsJson: string; expiresAt: bigint }> {
    if (!ID_PATTERN.test(responseId)) throw notFound(responseId);
    const row = await this.db
      .selectFrom('stored_responses')
      .select(['response_json', 'input_items_json', 'expires_at'])
      .where('account_id', '=', accountId)
      .where('response_id', '=', responseId)
      .where('expires_at', '>', new Date(this.now()))
      .executeTakeFirst();
    if (!row) throw notFound(responseId);
    return { responseJson: row.response_json, inputItemsJson: row.input_items_json, expiresAt: BigInt(Math.floor(row.expires_at.getTime() / 1000)) };
  }

  async delete(accountId: string, responseId: string): Promise<void> {
    if (!ID_PATTERN.test(responseId)) throw notFound(responseId);
    const result = await this.db
      .deleteFrom('stored_responses')
      .where('account_id', '=', accountId)
      .where('response_id', '=', responseId)
      .where('expires_at', '>', new Date(this.now()))
      .executeTakeFirst();
    if (Number(result.numDeletedRows) === 0) throw notFound(responseId);
  }

  async listInputItems(accountId: string, responseId: string, options: { after: string; limit: number; ascending: boolean }): Promise<ItemsPage> {
    const limit = options.limit === 0 ? 20 : options.limit;
    if (limit > 100) throw errors.invalidRequest('limit: at most 100.', 'limit');
    const { inputItemsJson } = await this.get(accountId, responseId);
    const items = JSON.parse(inputItemsJson) as unknown[];
    try {
      return pageOfItems(Array.isArray(items) ? items : [], responseId, { ...options, limit });
    } catch (error) {
      if (error instanceof UnknownCursorError) throw errors.invalidRequest(error.message, 'after');
      throw error;
    }
  }

  /** Deletes responses past their retention in bounded batches until none is left. */
  async sweep(): Promise<number> {
    let total = await sweepExpired(this.db, this.logger, { table: 'stored_responses', idColumn: 'response_id', what: 'stored responses' }, this.now);
    if (this.conversations !== undefined) total += await this.conversations.sweep();
    return total;
  }

  /** Stops the sweeper (the database handle is the jobs service's to close). */
  stop(): void {
    clearInterval(this.timer);
  }
}
