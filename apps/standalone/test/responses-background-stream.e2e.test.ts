import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { parseCredits } from '@gateway/platform';
import { eventually, type FakeUpstream } from '@gateway/testing';
import { oneTextModelCatalog, startBackgroundStack, type BackgroundStack } from './background-harness.js';

// Background responses streamed (docs/stored-responses.md "Streaming a background response") with the
// real `openai` client: `responses.create({background: true, stream: true})` read to the end, a reader
// that leaves after a few events and resumes with `responses.retrieve(id, {stream: true,
// starting_after})` (no event missing or repeated), the run going on without any reader, and the account
// in every lookup. The run is the jobs service's: a client leaving stops nothing.

const MODEL = 'testco/bg-stream';
const PROMPT_TOKENS = 11;
const COMPLETION_TOKENS = 8;
const PRICE_IN = '0.000001';
const PRICE_OUT = '0.000002';
const COST = BigInt(PROMPT_TOKENS) * parseCredits(PRICE_IN) + BigInt(COMPLETION_TOKENS) * parseCredits(PRICE_OUT);
const TEXT = 'one two three four five six seven eight';

const catalog = (upstream: FakeUpstream) => oneTextModelCatalog({ model: MODEL, upstreamModel: 'bg-stream-upstream', upstreamUrl: upstream.url, keyEnv: 'BG_STREAM_KEY', priceIn: PRICE_IN, priceOut: PRICE_OUT });

type Event = OpenAI.Responses.ResponseStreamEvent;

const textOf = (events: Event[]) => events.filter((event) => event.type === 'response.output_text.delta').map((event) => event.delta).join('');

describe('background responses streamed, end to end', () => {
  let running: BackgroundStack;
  let upstream: FakeUpstream;
  let accountId: string;
  let client: OpenAI;
  let stranger: OpenAI;

  const balance = (id: string) => running.balance(id);
  const charges = (id: string) => running.charges(id, MODEL);
  const slowAnswer = () => upstream.setFallback({ text: TEXT, chunkCount: 8, chunkDelayMs: 150, usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: COMPLETION_TOKENS } });

  beforeAll(async () => {
    running = await startBackgroundStack('background-stream', 'bg-stream', catalog, {
      keyHashSecret: 'bg-stream-e2e-secret-0123456789abcdef',
      providerSecrets: { BG_STREAM_KEY: 'sk-bg-stream' },
      jobs: { batches: { runner: { pollIntervalMs: 100, leaseMs: 3_000 } } },
    });
    ({ upstream, accountId, client, stranger } = running);
  }, 120_000);

  afterAll(async () => {
    await running?.stop();
  });

  beforeEach(() => upstream.reset());

  it('streams the run from queued to completed, each event numbered; the text is a synchronous answer\'s; usage and cost present; charged once', async () => {
    slowAnswer();
    const synchronous = await client.responses.create({ model: MODEL, input: 'Count to eight.' });
    await eventually(async () => expect(await charges(accountId)).toBe(1), 15_000);
    const before = await balance(accountId);

    const stream = await client.responses.create({ model: MODEL, input: 'Count to eight.', background: true, stream: true });
    const events: Event[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
    expect(events[0]).toMatchObject({ type: 'response.created', response: { status: 'queued', background: true } });
    expect(events[1]).toMatchObject({ type: 'response.in_progress', response: { status: 'in_progress', background: true } });
    expect(events.filter((event) => event.type === 'response.output_text.delta').length).toBeGreaterThan(3);
    const completed = events.at(-1)!;
    expect(completed.type).toBe('response.completed');
    const response = (completed as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(response).toMatchObject({ id: events[0]!.type === 'response.created' ? events[0].response.id : '', status: 'completed', background: true });
    expect(textOf(events)).toBe(synchronous.output_text);
    expect(response.output).toEqual(synchronous.output.map((item) => ({ ...item, id: expect.any(String) })));
    expect(response.usage).toMatchObject({ input_tokens: PROMPT_TOKENS, output_tokens: COMPLETION_TOKENS });
    expect(parseCredits((response.usage as unknown as { cost: string }).cost)).toBe(COST);
    // The stored response says the same; one charge, of its cost.
    const retrieved = await client.responses.retrieve(response.id);
    expect(retrieved).toMatchObject({ status: 'completed', output_text: synchronous.output_text });
    expect(retrieved.output).toEqual(response.output);
    await eventually(async () => expect(await charges(accountId)).toBe(2), 15_000);
    await eventually(async () => expect(before - (await balance(accountId))).toBe(COST), 15_000);
    expect(upstream.requests).toHaveLength(2);
    // Replayed whole after the end: the same events.
    const replay: Event[] = [];
    for await (const event of await client.responses.retrieve(response.id, { stream: true })) replay.push(event);
    expect(replay).toEqual(events);
  }, 60_000);

  it('a reader that leaves after a few events resumes with starting_after: every event once, in order; the run went on without it', async () => {
    slowAnswer();
    const stream = await client.responses.create({ model: MODEL, input: 'Count slowly.', background: true, stream: true });
    const first: Event[] = [];
    for await (const event of stream) {
      first.push(event);
      if (event.type === 'response.output_text.delta' && first.filter((seen) => seen.type === 'response.output_text.delta').length === 2) break;
    }
    const id = first[0]!.type === 'response.created' ? first[0].response.id : '';
    const last = first.at(-1)!.sequence_number;
    // Nobody reads for a while: the run goes on in the jobs service.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const rest: Event[] = [];
    for await (const event of await client.responses.retrieve(id, { stream: true, starting_after: last })) rest.push(event);
    const all = [...first, ...rest];
    expect(all.map((event) => event.sequence_number)).toEqual(all.map((_, index) => index));
    expect(rest[0]!.sequence_number).toBe(last + 1);
    expect(rest.at(-1)!.type).toBe('response.completed');
    expect(textOf(all)).toBe(TEXT);
    // A resume after the end from the middle: exactly the later events.
    const tail: Event[] = [];
    for await (const event of await client.responses.retrieve(id, { stream: true, starting_after: last + 2 })) tail.push(event);
    expect(tail).toEqual(all.slice(last + 3));
    // Past the last event: nothing.
    const none: Event[] = [];
    for await (const event of await client.responses.retrieve(id, { stream: true, starting_after: 10_000 })) none.push(event);
    expect(none).toEqual([]);
    expect(upstream.requests).toHaveLength(1);
  }, 60_000);

  it("another account's response is 404; a response that is not a background one is 400 on stream", async () => {
    upstream.setFallback({ latencyMs: 20 });
    const created = await client.responses.create({ model: MODEL, input: 'mine', background: true });
    const refused = await stranger.responses.retrieve(created.id, { stream: true }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.NotFoundError);
    expect((refused as InstanceType<typeof OpenAI.NotFoundError>).message).toContain(`Response with id '${created.id}' not found.`);
    await expect(client.responses.retrieve('resp_doesnotexist', { stream: true })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    // A background response created without `stream` streams too (its run is recorded the same way).
    const events: Event[] = [];
    for await (const event of await client.responses.retrieve(created.id, { stream: true })) events.push(event);
    expect(events.at(-1)!.type).toBe('response.completed');

    const synchronous = await client.responses.create({ model: MODEL, input: 'now' });
    // Asked at once after its answer (it may still wait in the edge's write-behind queue): a 400, not a 404.
    const plain = await client.responses.retrieve(synchronous.id, { stream: true }).catch((error: unknown) => error);
    expect(plain).toBeInstanceOf(OpenAI.BadRequestError);
    expect((plain as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('Only a background response');
  }, 60_000);
});
