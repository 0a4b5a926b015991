import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { GatewayError, GrpcStatus, type PromiseClient } from '@gateway/platform';
import { ChatResponse, type ResponsesStoreServiceClient } from '@gateway/proto';
import { backgroundRequest as request, failsWith, startBackgroundService, type BackgroundService } from './background-service.js';

// Background responses in the jobs service over its real gRPC server and real Postgres: creation kept
// with its stored response, the per-account cap of queued + running (kept under concurrent creations),
// cancel keyed by account, and a deleted response taking its run with it. The runner polls rarely here
// (nothing is run: the routing services are unreachable addresses); the e2e tests run them.

const MAX_ACTIVE = 2;

describe('background responses (jobs service)', () => {
  let service: BackgroundService;
  let client: PromiseClient<ResponsesStoreServiceClient>;
  let db: pg.Client;

  beforeAll(async () => {
    service = await startBackgroundService({ background: { maxActivePerAccount: MAX_ACTIVE } });
    ({ client, db } = service);
  });

  afterAll(async () => {
    await service?.stop();
  });

  const rows = async (accountId: string) => (await db.query(`select response_id, status from jobs.background_responses where account_id = $1 order by response_id`, [accountId])).rows;

  it('stores the run beside its response; creating it again changes nothing; GetResponse answers its state', async () => {
    await client.createBackgroundResponse(request('acc_a', 'resp_a1'));
    await client.createBackgroundResponse(request('acc_a', 'resp_a1'));
    expect(await rows('acc_a')).toEqual([{ response_id: 'resp_a1', status: 'queued' }]);
    const found = await client.getResponse({ accountId: 'acc_a', responseId: 'resp_a1' });
    expect(JSON.parse(found.responseJson)).toMatchObject({ status: 'queued', background: true });
    expect(found.background).toMatchObject({ status: 'queued', modelId: 'testco/m', errorJson: '' });
    expect(found.background?.answer).toBeUndefined();
    // Another account: not found, for the lookup and for a cancel.
    await failsWith(client.getResponse({ accountId: 'acc_b', responseId: 'resp_a1' }), GrpcStatus.NOT_FOUND);
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_b', responseId: 'resp_a1' }), GrpcStatus.NOT_FOUND);
    expect(await rows('acc_a')).toEqual([{ response_id: 'resp_a1', status: 'queued' }]);
  });

  it('refuses past the per-account cap of queued + running, counted under concurrent creations; other accounts are not affected; a cancel makes room', async () => {
    const results = await Promise.allSettled(Array.from({ length: 6 }, (_, index) => client.createBackgroundResponse(request('acc_cap', `resp_cap${index}`))));
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(MAX_ACTIVE);
    for (const result of results.filter((result) => result.status === 'rejected')) {
      expect(result.reason).toBeInstanceOf(GatewayError);
      expect((result.reason as GatewayError).status).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect((result.reason as GatewayError).code).toBe('background_responses_limit');
    }
    // The refused ones stored nothing (neither the run nor the response).
    const admitted = (await rows('acc_cap')).map((row: { response_id: string }) => row.response_id);
    expect(admitted).toHaveLength(MAX_ACTIVE);
    const refused = Array.from({ length: 6 }, (_, index) => `resp_cap${index}`).filter((id) => !admitted.includes(id));
    await failsWith(client.getResponse({ accountId: 'acc_cap', responseId: refused[0]! }), GrpcStatus.NOT_FOUND);
    await client.createBackgroundResponse(request('acc_other', 'resp_other1'));
    const cancelled = await client.cancelBackgroundResponse({ accountId: 'acc_cap', responseId: admitted[0]! });
    expect(cancelled.background?.status).toBe('cancelled');
    expect(Number(cancelled.background?.endedAt)).toBeGreaterThan(0);
    // A cancel of a finished one answers it as it is.
    expect((await client.cancelBackgroundResponse({ accountId: 'acc_cap', responseId: admitted[0]! })).background?.status).toBe('cancelled');
    await client.createBackgroundResponse(request('acc_cap', 'resp_cap_after'));
  });

  it('a response that is not a background one cannot be cancelled (FAILED_PRECONDITION); deleting a background response removes its run', async () => {
    await client.putResponses({ responses: [request('acc_c', 'resp_plain').response!] });
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_c', responseId: 'resp_plain' }), GrpcStatus.FAILED_PRECONDITION);
    await client.createBackgroundResponse(request('acc_c', 'resp_bg'));
    await client.deleteResponse({ accountId: 'acc_c', responseId: 'resp_bg' });
    expect(await rows('acc_c')).toEqual([]);
    await failsWith(client.cancelBackgroundResponse({ accountId: 'acc_c', responseId: 'resp_bg' }), GrpcStatus.NOT_FOUND);
  });

  it('a background response made in a conversation adds nothing at creation; its completed turn is pending until appended, once, for its account only', async () => {
    const conversationId = `conv_${'ab'.repeat(24)}`;
    await client.createConversation({ accountId: 'acc_d', conversationId, metadataJson: '', itemsJson: [JSON.stringify({ type: 'message', role: 'user', content: 'first' })], createdAt: 0n });
    const created = request('acc_d', 'resp_d1');
    created.response!.conversationId = conversationId;
    created.response!.conversationItemsJson = JSON.stringify([{ type: 'message', role: 'user', content: 'in the background' }]);
    await client.createBackgroundResponse(created);
    const itemsOf = async () => (await client.listConversationItems({ accountId: 'acc_d', conversationId, after: '', limit: 0, ascending: true, allItems: true })).itemsJson.map((item) => {
      const content = (JSON.parse(item) as { content: string | { text: string }[] }).content;
      return typeof content === 'string' ? content : content.map((part) => part.text).join('');
    });
    expect(await itemsOf()).toEqual(['first']);
    // Queued: not pending yet.
    expect((await client.listPendingConversationTurns({ accountId: 'acc_d', conversationId })).turns).toEqual([]);
    // The runner's part, by hand: the run completed.
    const answer = Buffer.from(ChatResponse.encode(ChatResponse.fromPartial({ modelId: 'testco/m' })).finish());
    await db.query(`update jobs.background_responses set status = 'completed', answer = $1, ended_at = now() where account_id = 'acc_d' and response_id = 'resp_d1'`, [answer]);
    const { turns } = await client.listPendingConversationTurns({ accountId: 'acc_d', conversationId });
    expect(turns.map((turn) => [turn.responseId, JSON.parse(turn.inputJson)[0].content, turn.background?.status])).toEqual([['resp_d1', 'in the background', 'completed']]);
    // Another account sees no pending turn and cannot append one.
    expect((await client.listPendingConversationTurns({ accountId: 'acc_e', conversationId })).turns).toEqual([]);
    expect((await client.appendConversationTurn({ accountId: 'acc_e', conversationId, responseId: 'resp_d1', itemsJson: '[{"content":"stolen"}]' })).appended).toBe(false);
    // Two edges append it at once: it goes in once.
    const itemsJson = JSON.stringify([{ type: 'message', role: 'user', content: 'in the background' }, { type: 'message', role: 'assistant', content: 'done' }]);
    const appended = await Promise.all([1, 2, 3].map(() => client.appendConversationTurn({ accountId: 'acc_d', conversationId, responseId: 'resp_d1', itemsJson })));
    expect(appended.filter((answer) => answer.appended)).toHaveLength(1);
    expect(await itemsOf()).toEqual(['first', 'in the background', 'done']);
    expect((await client.listPendingConversationTurns({ accountId: 'acc_d', conversationId })).turns).toEqual([]);
  });
});
