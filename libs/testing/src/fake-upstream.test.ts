import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from './fake-upstream.js';

function post(upstream: FakeUpstream, path: string, body: unknown) {
  return fetch(`${upstream.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: JSON.stringify(body) });
}

function sseData(text: string) {
  return text.split('\n\n').filter((event) => event.startsWith('data: ')).map((event) => event.slice(6));
}

describe('fake upstream', () => {
  let upstream: FakeUpstream;
  beforeAll(async () => { upstream = await startFakeUpstream(); });
  afterAll(() => upstream.close());
  beforeEach(() => upstream.reset());

  it('answers JSON chat completions and records the request', async () => {
    upstream.script({ text: 'hi there', usage: { prompt_tokens: 3, completion_tokens: 2 } });
    const response = await post(upstream, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hello' }] });
    const json = (await response.json()) as any;
    expect(json.choices[0].message.content).toBe('hi there');
    expect(json.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
    expect(upstream.requests[0]).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body: { model: 'm' } });
    expect(upstream.requests[0]!.headers.authorization).toBe('Bearer k');
  });

  it('answers n choices with logprobs when asked, and refuses what OpenAI refuses of them (n, top_logprobs ranges, top_logprobs without logprobs)', async () => {
    const answer = (await (await post(upstream, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hello' }], n: 2, logprobs: true, top_logprobs: 1 })).json()) as any;
    expect(answer.choices.map((choice: any) => choice.index)).toEqual([0, 1]);
    expect(answer.choices[0].logprobs.content.map((entry: any) => entry.token).join('')).toBe(answer.choices[0].message.content);
    for (const [body, param] of [[{ n: 129 }, 'n'], [{ n: 0 }, 'n'], [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'], [{ top_logprobs: 2 }, 'top_logprobs']] as const) {
      const refused = await post(upstream, '/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hello' }], ...body });
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(((await refused.json()) as any).error.param).toBe(param);
    }
  });

  it('moderates as OpenAI does: N results for N strings, ONE for an array of objects; refuses what OpenAI refuses', async () => {
    const results = async (input: unknown) => ((await (await post(upstream, '/moderations', { model: 'm', input })).json()) as any).results;
    expect((await results('plan the attack')).map((result: any) => result.flagged)).toEqual([true]);
    expect((await results(['tea', 'plan the attack', 'cake'])).map((result: any) => result.flagged)).toEqual([false, true, false]);
    const mixed = await results([{ type: 'text', text: 'tea' }, { type: 'image_url', image_url: { url: 'https://x/attack.png' } }]);
    expect(mixed).toHaveLength(1);
    expect(mixed[0].flagged).toBe(true);
    expect(mixed[0].category_applied_input_types.violence).toEqual(['text', 'image']);
    expect(mixed[0].category_applied_input_types.harassment).toEqual(['text']);
    const image = { type: 'image_url', image_url: { url: 'https://x/a.png' } };
    for (const [input, code] of [[[image, image], 'too_many_images'], [['tea', { type: 'text', text: 'tea' }], null], [[], null], [[{ type: 'audio' }], null]] as const) {
      const response = await post(upstream, '/moderations', { model: 'm', input });
      expect(response.status).toBe(400);
      expect(((await response.json()) as any).error).toMatchObject({ type: 'invalid_request_error', param: 'input', code });
    }
  });

  it('streams SSE chunks, with usage only when include_usage is asked', async () => {
    upstream.script({ text: 'abcdef', chunkCount: 3 }, { text: 'abcdef', chunkCount: 3 });
    const withUsage = sseData(await (await post(upstream, '/chat/completions', { model: 'm', messages: [], stream: true, stream_options: { include_usage: true } })).text());
    const without = sseData(await (await post(upstream, '/chat/completions', { model: 'm', messages: [], stream: true })).text());
    expect(withUsage.at(-1)).toBe('[DONE]');
    expect(withUsage.slice(0, 3).map((data) => JSON.parse(data).choices[0].delta.content)).toEqual(['ab', 'cd', 'ef']);
    expect(JSON.parse(withUsage.at(-2)!).usage).toBeDefined();
    expect(without.some((data) => data !== '[DONE]' && JSON.parse(data).usage)).toBe(false);
  });

  it('scripts statuses, tool calls and embeddings; resets fail the request', async () => {
    upstream.script({ status: 429 }, { toolCalls: [{ id: 'c1', name: 'f', arguments: '{}' }] }, { reset: true });
    expect((await post(upstream, '/chat/completions', { messages: [] })).status).toBe(429);
    const tools = (await (await post(upstream, "/chat/completions", { messages: [] })).json()) as any;
    expect(tools.choices[0]).toMatchObject({ finish_reason: 'tool_calls', message: { tool_calls: [{ id: 'c1', function: { name: 'f' } }] } });
    await expect(post(upstream, '/chat/completions', { messages: [] })).rejects.toThrow();
    const embeddings = (await (await post(upstream, "/embeddings", { model: "e", input: ["a", "b"], dimensions: 3 })).json()) as any;
    expect(embeddings.data.map((item: { embedding: number[] }) => item.embedding.length)).toEqual([3, 3]);
  });
});
