import { randomBytes } from 'node:crypto';
import type { Migration } from 'kysely';
import { errors, type Logger } from '@gateway/platform';
import { sql, type Kysely } from '@gateway/platform/db';
import type { Conversation } from '@gateway/proto';
import { listedItem, type InputItem } from './input-items.js';
import { sweepExpired } from './sweep-expired.js';

/*
 * Conversations (OpenAI's Conversations API, issue 41 item 6) over the stored responses' schema: per
 * account, a conversation and its items in order. Items come from POST …/items, from the conversation's
 * creation, and from every response made in it (its input, then its output), appended when that response
 * is first stored (responses-store.ts; a retried put appends nothing). Every query has the account in its
 * key: another account's conversation is not found, as an unknown one is. Kept for the stored responses'
 * retention counted from its last change; bounded per conversation (items) and per account (conversations).
 */

interface ConversationsTable {
  account_id: string;
  conversation_id: string;
  metadata_json: string;
  created_at: Date;
  expires_at: Date;
  /** The next item's position (positions are never reused, so a cursor stays meaningful after a delete). */
  next_seq: number;
  item_count: number;
}

interface ConversationItemsTable {
  account_id: string;
  conversation_id: string;
  seq: number;
  item_id: string;
  item_json: string;
}

export interface ConversationsTables {
  conversations: ConversationsTable;
  conversation_items: ConversationItemsTable;
}

export const conversationsMigrations: Record<string, Migration> = {
  'responses-0054_conversations': {
    up: async (db: Kysely<any>) => {
      await sql`
        create table conversations (
          account_id text not null,
          conversation_id text not null,
          metadata_json text not null,
          created_at timestamptz not null,
          expires_at timestamptz not null,
          next_seq integer not null default 0,
          item_count integer not null default 0,
          primary key (account_id, conversation_id)
        )`.execute(db);
      await sql`create index conversations_expires_at on conversations (expires_at)`.execute(db);
      await sql`
        create table conversation_items (
          account_id text not null,
          conversation_id text not null,
          seq integer not null,
          item_id text not null,
          item_json text not null,
          primary key (account_id, conversation_id, seq),
          foreign key (account_id, conversation_id) references conversations (account_id, conversation_id) on delete cascade
        )`.execute(db);
      await sql`create index conversation_items_item_id on conversation_items (account_id, conversation_id, item_id)`.execute(db);
    },
  },
};

export interface ConversationsStoreOptions {
  /** How long a conversation is kept after its last change (the stored responses' retention, 30 days). */
  retentionSeconds: number;
  /** Most items one conversation holds (default 10,000): POST …/items past it is a 400; a response's items past it push the oldest out. */
  maxItemsPerConversation: number;
  /** Most conversations an account keeps (default 10,000): creating one more is a 400 `conversations_limit`. */
  maxConversationsPerAccount: number;
  /** Largest item, in characters of JSON (default 1 Mi). */
  maxItemChars: number;
}

export const DEFAULT_CONVERSATIONS_STORE: ConversationsStoreOptions = {
  retentionSeconds: 30 * 24 * 3600,
  maxItemsPerConversation: 10_000,
  maxConversationsPerAccount: 10_000,
  maxItemChars: 1024 * 1024,
};

/** OpenAI's bound on the items one create or add call carries. */
export const MAX_ITEMS_PER_CALL = 20;
const ID_PATTERN = /^conv_[A-Za-z0-9_-]{1,120}$/;

function notFound(conversationId: string) {
  return errors.notFound(`Conversation with id '${conversationId.slice(0, 200)}' not found.`);
}

/** OpenAI's metadata: at most 16 pairs, keys up to 64 characters, values strings up to 512. */
export function checkedMetadata(metadataJson: string): string {
  if (metadataJson === '') return '{}';
  let parsed: unknown;
  try {
    parsed = JSON.parse(metadataJson);
  } catch {
    throw errors.invalidRequest('metadata: not JSON.', 'metadata');
  }
  if (parsed === null) return '{}';
  if (typeof parsed !== 'object' || Array.isArray(parsed)) throw errors.invalidRequest('metadata: must be an object of strings.', 'metadata');
  const entries = Object.entries(parsed as Record<string, unknown>);
  if (entries.length > 16) throw errors.invalidRequest('metadata: at most 16 keys.', 'metadata');
  for (const [key, value] of entries) {
    if (key.length > 64) throw errors.invalidRequest('metadata: keys are at most 64 characters.', 'metadata');
    if (typeof value !== 'string' || value.length > 512) throw errors.invalidRequest(`metadata.${key.slice(0, 64)}: must be a string of at most 512 characters.`, 'metadata');
  }
  return JSON.stringify(Object.fromEntries(entries));
}

type Db = Kysely<ConversationsTables>;

export class ConversationsStore {
  constructor(
    private readonly db: Db,
    private readonly options: ConversationsStoreOptions,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  private expiry(): Date {
    return new Date(this.now() + this.options.retentionSeconds * 1000);
  }

  private parsedItems(itemsJson: readonly string[]): unknown[] {
    if (itemsJson.length > MAX_ITEMS_PER_CALL) throw errors.invalidRequest(`items: at most ${MAX_ITEMS_PER_CALL} items at a time.`, 'items');
    return itemsJson.map((json, index) => {
      if (json.length > this.options.maxItemChars) throw errors.invalidRequest(`items[${index}]: over ${this.options.maxItemChars} characters.`, `items[${index}]`);
      let item: unknown;
      try {
        item = JSON.parse(json);
      } catch {
        throw errors.invalidRequest(`items[${index}]: not JSON.`, `items[${index}]`);
      }
      if (typeof item !== 'object' || item === null || Array.isArray(item)) throw errors.invalidRequest(`items[${index}]: must be an item object.`, `items[${index}]`);
      return item;
    });
  }

  async create(request: { accountId: string; conversationId: string; metadataJson: string; itemsJson: readonly string[]; createdAt: bigint }): Promise<Conversation> {
    if (!request.accountId || !ID_PATTERN.test(request.conversationId)) throw errors.invalidRequest('conversation: no account or a bad id.', 'conversation');
    const metadataJson = checkedMetadata(request.metadataJson);
    const items = this.parsedItems(request.itemsJson);
    const createdAt = new Date(Number(request.createdAt) * 1000 || this.now());
    await this.db.transaction().execute(async (trx) => {
      // One create at a time per account, so the count below is the count the insert sees.
      await sql`select pg_advisory_xact_lock(hashtext(${`conversations:${request.accountId}`}))`.execute(trx);
      const existing = await trx.selectFrom('conversations').select('conversation_id').where('account_id', '=', request.accountId).where('conversation_id', '=', request.conversationId).executeTakeFirst();
      if (existing) return; // a retried call: created once
      const { count } = await trx.selectFrom('conversations').select((eb) => eb.fn.countAll<string>().as('count')).where('account_id', '=', request.accountId).executeTakeFirstOrThrow();
      if (Number(count) >= this.options.maxConversationsPerAccount) {
        throw errors.invalidRequest(`This account keeps at most ${this.options.maxConversationsPerAccount} conversations; delete some first.`, 'conversation', 'conversations_limit');
      }
      await trx.insertInto('conversations').values({
        account_id: request.accountId, conversation_id: request.conversationId, metadata_json: metadataJson, created_at: createdAt, expires_at: this.expiry(), next_seq: 0, item_count: 0,
      }).execute();
      await this.appendIn(trx, request.accountId, request.conversationId, items, request.conversationId, 'refuse');
    });
    return this.get(request.accountId, request.conversationId);
  }

  async get(accountId: string, conversationId: string): Promise<Conversation> {
    return this.getIn(this.db, accountId, conversationId);
  }

  private async getIn(db: Db, accountId: string, conversationId: string, forUpdate = false): Promise<Conversation> {
    if (!ID_PATTERN.test(conversationId)) throw notFound(conversationId);
    let query = db
      .selectFrom('conversations')
      .select(['conversation_id', 'created_at', 'metadata_json', 'item_count'])
      .where('account_id', '=', accountId)
      .where('conversation_id', '=', conversationId)
      .where('expires_at', '>', new Date(this.now()));
    if (forUpdate) query = query.forUpdate();
    const row = await query.executeTakeFirst();
    if (!row) throw notFound(conversationId);
    return { conversationId: row.conversation_id, createdAt: BigInt(Math.floor(row.created_at.getTime() / 1000)), metadataJson: row.metadata_json, itemCount: row.item_count };
  }

  async update(accountId: string, conversationId: string, metadataJson: string): Promise<Conversation> {
    const checked = checkedMetadata(metadataJson);
    await this.getIn(this.db, accountId, conversationId);
    await this.db.updateTable('conversations').set({ metadata_json: checked, expires_at: this.expiry() })
      .where('account_id', '=', accountId).where('conversation_id', '=', conversationId).execute();
    return this.get(accountId, conversationId);
  }

  async delete(accountId: string, conversationId: string): Promise<void> {
    if (!ID_PATTERN.test(conversationId)) throw notFound(conversationId);
    const result = await this.db.deleteFrom('conversations')
      .where('account_id', '=', accountId).where('conversation_id', '=', conversationId).where('expires_at', '>', new Date(this.now()))
      .executeTakeFirst();
    if (Number(result.numDeletedRows) === 0) throw notFound(conversationId);
  }

  /** POST …/items: appended after the last, answered with their ids. Past the conversation's bound: 400. */
  async add(accountId: string, conversationId: string, itemsJson: readonly string[]): Promise<InputItem[]> {
    const items = this.parsedItems(itemsJson);
    if (items.length === 0) throw errors.invalidRequest('items: at least one item.', 'items');
    const base = `conv_${randomBytes(12).toString('hex')}`;
    return this.db.transaction().execute((trx) => this.appendIn(trx, accountId, conversationId, items, base, 'refuse'));
  }

  /**
   * A stored response's items (its input, then its output), in the caller's transaction. A conversation
   * gone since (deleted, expired) takes nothing; past its bound its oldest items go first.
   */
  async appendFromResponse(db: Kysely<any>, accountId: string, conversationId: string, itemsJson: string, responseId: string): Promise<void> {
    let items: unknown;
    try {
      items = JSON.parse(itemsJson);
    } catch {
      items = [];
    }
    if (!Array.isArray(items) || items.length === 0) return;
    try {
      await this.appendIn(db as Db, accountId, conversationId, items, responseId, 'evict');
    } catch (error) {
      if (error instanceof Error && error.message.startsWith('Conversation with id')) {
        this.logger.info({ conversation_id: conversationId, response_id: responseId }, 'a response\'s conversation is gone; its items are not added');
        return;
      }
      throw error;
    }
  }

  private async appendIn(db: Db, accountId: string, conversationId: string, items: readonly unknown[], idBase: string, whenFull: 'refuse' | 'evict'): Promise<InputItem[]> {
    const conversation = await this.getIn(db, accountId, conversationId, true);
    const row = await db.selectFrom('conversations').select('next_seq').where('account_id', '=', accountId).where('conversation_id', '=', conversationId).executeTakeFirstOrThrow();
    const total = conversation.itemCount + items.length;
    if (total > this.options.maxItemsPerConversation && whenFull === 'refuse') {
      throw errors.invalidRequest(`A conversation holds at most ${this.options.maxItemsPerConversation} items; it has ${conversation.itemCount}.`, 'items', 'conversation_too_large');
    }
    // Ids for items sent without one: derived from the call (or the response) and the item's place.
    const listed = items.map((item, index) => listedItem(item, index, idBase.startsWith('conv_') ? `resp_${idBase.slice(5)}` : idBase));
    if (listed.length === 0) return [];
    await db.insertInto('conversation_items').values(listed.map((item, index) => ({
      account_id: accountId, conversation_id: conversationId, seq: row.next_seq + index, item_id: String(item.id), item_json: JSON.stringify(item),
    }))).execute();
    let count = total;
    if (total > this.options.maxItemsPerConversation) {
      const evicted = await sql`
        delete from conversation_items where account_id = ${accountId} and conversation_id = ${conversationId} and seq in (
          select seq from conversation_items where account_id = ${accountId} and conversation_id = ${conversationId} order by seq limit ${total - this.options.maxItemsPerConversation})`.execute(db);
      count = total - Number(evicted.numAffectedRows ?? 0n);
    }
    await db.updateTable('conversations').set({ next_seq: row.next_seq + listed.length, item_count: count, expires_at: this.expiry() })
      .where('account_id', '=', accountId).where('conversation_id', '=', conversationId).execute();
    return listed;
  }

  /** A page of items (`ascending` false: newest first, OpenAI's default), or all of them oldest first. */
  async list(accountId: string, conversationId: string, options: { after: string; limit: number; ascending: boolean; allItems: boolean }): Promise<{ items: string[]; hasMore: boolean }> {
    await this.get(accountId, conversationId);
    const base = this.db.selectFrom('conversation_items').select(['seq', 'item_json']).where('account_id', '=', accountId).where('conversation_id', '=', conversationId);
    if (options.allItems) {
      const rows = await base.orderBy('seq', 'asc').execute();
      return { items: rows.map((row) => row.item_json), hasMore: false };
    }
    const limit = options.limit === 0 ? 20 : options.limit;
    if (limit > 100) throw errors.invalidRequest('limit: at most 100.', 'limit');
    let query = base.orderBy('seq', options.ascending ? 'asc' : 'desc').limit(limit + 1);
    if (options.after !== '') {
      const cursor = await this.db.selectFrom('conversation_items').select('seq').where('account_id', '=', accountId).where('conversation_id', '=', conversationId).where('item_id', '=', options.after).orderBy('seq').executeTakeFirst();
      if (!cursor) throw errors.invalidRequest(`after: '${options.after.slice(0, 200)}' is not an item of this conversation.`, 'after');
      query = query.where('seq', options.ascending ? '>' : '<', cursor.seq);
    }
    const rows = await query.execute();
    return { items: rows.slice(0, limit).map((row) => row.item_json), hasMore: rows.length > limit };
  }

  async getItem(accountId: string, conversationId: string, itemId: string): Promise<string> {
    await this.get(accountId, conversationId);
    const row = await this.db.selectFrom('conversation_items').select('item_json').where('account_id', '=', accountId).where('conversation_id', '=', conversationId).where('item_id', '=', itemId).orderBy('seq').executeTakeFirst();
    if (!row) throw errors.notFound(`Item with id '${itemId.slice(0, 200)}' not found.`);
    return row.item_json;
  }

  async deleteItem(accountId: string, conversationId: string, itemId: string): Promise<Conversation> {
    await this.db.transaction().execute(async (trx) => {
      await this.getIn(trx, accountId, conversationId, true);
      const result = await trx.deleteFrom('conversation_items').where('account_id', '=', accountId).where('conversation_id', '=', conversationId).where('item_id', '=', itemId).executeTakeFirst();
      const deleted = Number(result.numDeletedRows);
      if (deleted === 0) throw errors.notFound(`Item with id '${itemId.slice(0, 200)}' not found.`);
      await trx.updateTable('conversations').set((eb) => ({ item_count: eb('item_count', '-', deleted), expires_at: this.expiry() }))
        .where('account_id', '=', accountId).where('conversation_id', '=', conversationId).execute();
    });
    return this.get(accountId, conversationId);
  }

  /** Deletes conversations past their retention (their items with them) in bounded batches. */
  sweep(): Promise<number> {
    return sweepExpired(this.db, this.logger, { table: 'conversations', idColumn: 'conversation_id', what: 'conversations' }, this.now);
  }
}
