import { randomBytes } from 'node:crypto';
import type { BackgroundRun, Conversation, ResponsesStoreServiceClient } from '@gateway/proto';
import { GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { EdgeError } from '../../errors.js';
import { echoed } from '../../echoed-value.js';

/*
 * The edge's calls for OpenAI's Conversations API (docs/stored-responses.md "Conversations") to the jobs
 * service's store, and the shapes the `openai` client reads (node_modules/openai resources/conversations):
 * the conversation object `{id, object: "conversation", created_at, metadata}`, its deletion
 * `{id, object: "conversation.deleted", deleted: true}`, items as the store listed them. Every call names
 * the caller's account; another account's conversation is the same 404 as an unknown one.
 */

/** OpenAI's 404 for a conversation the account does not have. */
export function conversationNotFound(id: string, param?: string): EdgeError {
  return new EdgeError({ status: 404, type: 'invalid_request_error', message: `Conversation with id '${echoed(id)}' not found.`, code: 'not_found', ...(param ? { param } : {}) });
}

/** The conversation object as OpenAI answers it. */
export function renderConversation(conversation: Conversation): Record<string, unknown> {
  return {
    id: conversation.conversationId,
    object: 'conversation',
    created_at: Number(conversation.createdAt),
    metadata: JSON.parse(conversation.metadataJson || '{}') as unknown,
  };
}

/** OpenAI's item list (`ConversationItemList`). */
export function renderItemList(items: readonly Record<string, unknown>[], hasMore: boolean): Record<string, unknown> {
  const first = items[0];
  const last = items[items.length - 1];
  return {
    object: 'list',
    data: items,
    first_id: typeof first?.id === 'string' ? first.id : null,
    last_id: typeof last?.id === 'string' ? last.id : null,
    has_more: hasMore,
  };
}

const isNotFound = (error: unknown) => error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND;

/** The jobs service's most pending turns per answer (background-responses.ts MAX_PENDING_TURNS): fewer means none are left. */
const PENDING_TURNS_PAGE = 100;

/** A background response's object with its run rendered (stored-responses.ts `renderRun`, render-background.ts). */
export type TurnRenderer = (queued: Record<string, unknown>, run: BackgroundRun) => Record<string, unknown>;

export class ConversationsClient {
  constructor(
    private readonly client: PromiseClient<ResponsesStoreServiceClient>,
    private readonly deadlineMs: number,
    private readonly render: TurnRenderer = (queued) => queued,
  ) {}

  /**
   * Background turns (background responses made in this conversation) whose run completed go into it
   * before it is read: their output rendered here (the dialect is the edge's), appended by the store once
   * (a turn another edge appended first is skipped there). A turn that cannot be rendered yet (its model
   * gone from the catalog) waits for a later read.
   */
  private async settleTurns(accountId: string, conversationId: string, requestId: string): Promise<void> {
    for (;;) {
      const { turns } = await this.client.listPendingConversationTurns({ accountId, conversationId }, this.options(requestId));
      let appended = 0;
      for (const turn of turns) {
        if (turn.background === undefined) continue;
        const rendered = this.render(JSON.parse(turn.responseJson) as Record<string, unknown>, turn.background);
        if (rendered.status !== 'completed' && rendered.status !== 'incomplete') continue;
        const output = Array.isArray(rendered.output) ? (rendered.output as unknown[]) : [];
        const input = JSON.parse(turn.inputJson || '[]') as unknown[];
        const itemsJson = JSON.stringify([...input, ...output]);
        await this.client.appendConversationTurn({ accountId, conversationId, responseId: turn.responseId, itemsJson }, this.options(requestId));
        appended++;
      }
      if (turns.length < PENDING_TURNS_PAGE || appended === 0) return;
    }
  }

  private options(requestId: string) {
    return { requestId, deadlineMs: this.deadlineMs };
  }

  /** Looks up the conversation; a NOT_FOUND becomes OpenAI's 404 for it. */
  private async found<T>(id: string, call: () => Promise<T>, param?: string): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (!isNotFound(error)) throw error;
      const { message } = error as GatewayError;
      // The store names what it did not find: the conversation, or an item of it.
      if (message.startsWith('Item with id')) throw new EdgeError({ status: 404, type: 'invalid_request_error', message, code: 'not_found' });
      throw conversationNotFound(id, param);
    }
  }

  async create(accountId: string, metadata: unknown, items: readonly unknown[], createdAt: number, requestId: string): Promise<Conversation> {
    return conversationOf(await this.client.createConversation(
      {
        accountId,
        conversationId: `conv_${randomBytes(24).toString('hex')}`,
        metadataJson: metadata == null ? '' : JSON.stringify(metadata),
        itemsJson: items.map((item) => JSON.stringify(item)),
        createdAt: BigInt(createdAt),
      },
      this.options(requestId),
    ));
  }

  async get(accountId: string, conversationId: string, requestId: string): Promise<Conversation> {
    return conversationOf(await this.found(conversationId, () => this.client.getConversation({ accountId, conversationId }, this.options(requestId))));
  }

  async update(accountId: string, conversationId: string, metadata: unknown, requestId: string): Promise<Conversation> {
    const metadataJson = metadata == null ? '' : JSON.stringify(metadata);
    return conversationOf(await this.found(conversationId, () => this.client.updateConversation({ accountId, conversationId, metadataJson }, this.options(requestId))));
  }

  async delete(accountId: string, conversationId: string, requestId: string): Promise<void> {
    await this.found(conversationId, () => this.client.deleteConversation({ accountId, conversationId }, this.options(requestId)));
  }

  async list(accountId: string, conversationId: string, page: { after: string; limit: number; ascending: boolean }, requestId: string) {
    await this.settleTurns(accountId, conversationId, requestId);
    const found = await this.found(conversationId, () => this.client.listConversationItems({ accountId, conversationId, ...page, allItems: false }, this.options(requestId)));
    return { items: found.itemsJson.map((item) => JSON.parse(item) as Record<string, unknown>), hasMore: found.hasMore };
  }

  /** Every item, oldest first: what a response made in the conversation is given before its own input. */
  async allItems(accountId: string, conversationId: string, requestId: string): Promise<unknown[]> {
    await this.settleTurns(accountId, conversationId, requestId);
    const found = await this.found(
      conversationId,
      () => this.client.listConversationItems({ accountId, conversationId, after: '', limit: 0, ascending: true, allItems: true }, this.options(requestId)),
      'body.conversation',
    );
    return found.itemsJson.map((item) => JSON.parse(item) as unknown);
  }

  async add(accountId: string, conversationId: string, items: readonly unknown[], requestId: string): Promise<Record<string, unknown>[]> {
    const added = await this.found(conversationId, () =>
      this.client.addConversationItems({ accountId, conversationId, itemsJson: items.map((item) => JSON.stringify(item)) }, this.options(requestId)),
    );
    return added.itemsJson.map((item) => JSON.parse(item) as Record<string, unknown>);
  }

  async item(accountId: string, conversationId: string, itemId: string, requestId: string): Promise<Record<string, unknown>> {
    await this.settleTurns(accountId, conversationId, requestId);
    const found = await this.found(conversationId, () => this.client.getConversationItem({ accountId, conversationId, itemId }, this.options(requestId)));
    return JSON.parse(found.itemJson) as Record<string, unknown>;
  }

  async deleteItem(accountId: string, conversationId: string, itemId: string, requestId: string): Promise<Conversation> {
    return conversationOf(await this.found(conversationId, () => this.client.deleteConversationItem({ accountId, conversationId, itemId }, this.options(requestId))));
  }
}

/** The conversation a store's answer carries (the store always sets it). */
function conversationOf(answer: { conversation?: Conversation | undefined }): Conversation {
  if (answer.conversation === undefined) throw new Error('the responses store answered without the conversation');
  return answer.conversation;
}
