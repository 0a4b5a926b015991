import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from './fake-gemini-upstream.js';

const KEY = 'test-gemini-key';
let fake: FakeGeminiUpstream;

beforeAll(async () => {
  fake = await startFakeGeminiUpstream({ apiKey: KEY, models: ['gemini-2.5-flash', 'gemini-3-pro-preview', 'gemini-embedding-001'] });
});
afterAll(() => fake.close());
beforeEach(() => fake.reset());

type JsonResponse = Omit<Response, 'json'> & { json(): Promise<any> };

function post(path: string, body: unknown, key = KEY): Promise<JsonResponse> {
  return fetch(`${fake.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'x-goog-api-key': key } : {}) },
    body: JSON.stringify(body),
  });
}

const hello = { contents: [{ role: 'user', parts: [{ text: 'Hi' }] }] };

describe('fake Gemini API', () => {
  it('answers generateContent with text, a signature on the text part and usage', async () => {
    const response = await post('/models/gemini-2.5-flash:generateContent', hello);
    expect(response.status).toBe(200);
    const body = await response.json();
    const part = body.candidates[0].content.parts[0];
    expect(part.text).toBe('Hello from the fake upstream.');
    expect(typeof part.thoughtSignature).toBe('string');
    expect(body.candidates[0].finishReason).toBe('STOP');
    expect(body.usageMetadata.promptTokenCount).toBeGreaterThan(0);
  });

  it('refuses a wrong key with 400 API_KEY_INVALID and no key with 403', async () => {
    const wrong = await post('/models/gemini-2.5-flash:generateContent', hello, 'nope');
    expect(wrong.status).toBe(400);
    const body = await wrong.json();
    expect(body.error.status).toBe('INVALID_ARGUMENT');
    expect(body.error.details[0].reason).toBe('API_KEY_INVALID');
    expect((await post('/models/gemini-2.5-flash:generateContent', hello, '')).status).toBe(403);
    expect((await post('/models/unknown-model:generateContent', hello)).status).toBe(404);
  });

  it('refuses unknown fields, additionalProperties in parameters and non-object function responses', async () => {
    const unknown = await post('/models/gemini-2.5-flash:generateContent', { ...hello, temperature: 1 });
    expect(unknown.status).toBe(400);
    expect((await unknown.json()).error.message).toContain('Unknown name "temperature"');
    const tool = {
      ...hello,
      tools: [{ functionDeclarations: [{ name: 'f', parameters: { type: 'object', properties: {}, additionalProperties: false } }] }],
    };
    const refusedSchema = await post('/models/gemini-2.5-flash:generateContent', tool);
    expect((await refusedSchema.json()).error.message).toContain('Unknown name "additionalProperties"');
    const jsonSchemaTool = { ...hello, tools: [{ functionDeclarations: [{ name: 'f', parametersJsonSchema: { type: 'object', additionalProperties: false } }] }] };
    expect((await post('/models/gemini-2.5-flash:generateContent', jsonSchemaTool)).status).toBe(200);
    const history = (response: unknown) => ({
      contents: [
        { role: 'user', parts: [{ text: 'weather?' }] },
        { role: 'model', parts: [{ functionCall: { name: 'f', args: {} }, thoughtSignature: fake.signature() }] },
        { role: 'user', parts: [{ functionResponse: { name: 'f', response } }] },
      ],
    });
    const scalar = await post('/models/gemini-2.5-flash:generateContent', history('sunny'));
    expect(scalar.status).toBe(400);
    expect((await scalar.json()).error.message).toContain('google.protobuf.Struct');
    expect((await post('/models/gemini-2.5-flash:generateContent', history({ output: 'sunny' }))).status).toBe(200);
  });

  it('insists on the function call signature for Gemini 3 and refuses signatures it did not issue', async () => {
    const history = (signature?: string) => ({
      contents: [
        { role: 'user', parts: [{ text: 'weather?' }] },
        { role: 'model', parts: [{ functionCall: { name: 'f', args: {} }, ...(signature ? { thoughtSignature: signature } : {}) }] },
        { role: 'user', parts: [{ functionResponse: { name: 'f', response: { output: 1 } } }] },
      ],
    });
    const missing = await post('/models/gemini-3-pro-preview:generateContent', history());
    expect(missing.status).toBe(400);
    expect((await missing.json()).error.message).toContain('missing a thought_signature');
    expect((await post('/models/gemini-2.5-flash:generateContent', history())).status).toBe(200);
    expect((await post('/models/gemini-3-pro-preview:generateContent', history(fake.signature()))).status).toBe(200);
    expect((await post('/models/gemini-3-pro-preview:generateContent', history('skip_thought_signature_validator'))).status).toBe(200);
    const forged = await post('/models/gemini-3-pro-preview:generateContent', history(Buffer.alloc(32, 7).toString('base64')));
    expect((await forged.json()).error.message).toBe('Corrupted thought signature.');
  });

  it('refuses thinking settings the model refuses: level and budget together, a level before Gemini 3, no thinking on Pro', async () => {
    const thinking = (model: string, thinkingConfig: unknown) => post(`/models/${model}:generateContent`, { ...hello, generationConfig: { thinkingConfig } });
    expect((await thinking('gemini-3-pro-preview', { thinkingBudget: 1024, thinkingLevel: 'LOW' })).status).toBe(400);
    expect((await thinking('gemini-2.5-flash', { thinkingLevel: 'LOW' })).status).toBe(400);
    expect((await thinking('gemini-3-pro-preview', { thinkingLevel: 'LOW', includeThoughts: true })).status).toBe(200);
    expect((await thinking('gemini-2.5-flash', { thinkingBudget: 0 })).status).toBe(200);
  });

  it('answers candidateCount candidates (usage counting them all) and logprobsResult; refuses what the API refuses', async () => {
    const one = await (await post('/models/gemini-2.5-flash:generateContent', hello)).json();
    const response = await post('/models/gemini-2.5-flash:generateContent', { ...hello, generationConfig: { candidateCount: 3, responseLogprobs: true, logprobs: 2 } });
    expect(response.status).toBe(200);
    const body = await response.json();
    expect(body.candidates.map((candidate: any) => candidate.index)).toEqual([0, 1, 2]);
    expect(new Set(body.candidates.map((candidate: any) => candidate.content.parts[0].text)).size).toBe(3);
    expect(body.usageMetadata.candidatesTokenCount).toBeGreaterThan(2 * one.usageMetadata.candidatesTokenCount);
    const result = body.candidates[0].logprobsResult;
    expect(result.chosenCandidates.map((chosen: any) => chosen.token).join('')).toBe(body.candidates[0].content.parts[0].text);
    expect(result.topCandidates[0].candidates).toHaveLength(2);
    expect(typeof result.chosenCandidates[0].logProbability).toBe('number');
    const refused: [unknown, string, RegExp][] = [
      [{ candidateCount: 9 }, 'generateContent', /candidate_count: must be in the range \[1, 8\]/],
      [{ candidateCount: 0 }, 'generateContent', /candidate_count/],
      [{ candidateCount: 2 }, 'streamGenerateContent?alt=sse', /not supported for streamGenerateContent/],
      [{ responseLogprobs: true, logprobs: 21 }, 'generateContent', /logprobs must be in the range \[0, 20\]/],
      [{ logprobs: 3 }, 'generateContent', /only valid if response_logprobs is true/],
    ];
    for (const [generationConfig, method, message] of refused) {
      const answer = await post(`/models/gemini-2.5-flash:${method}`, { ...hello, generationConfig });
      expect(answer.status, JSON.stringify(generationConfig)).toBe(400);
      expect((await answer.json()).error.message).toMatch(message);
    }
    // A stream's chunks carry the logprobs of their own text.
    const stream = await (await post('/models/gemini-2.5-flash:streamGenerateContent?alt=sse', { ...hello, generationConfig: { responseLogprobs: true } })).text();
    const chunks = stream.split('\r\n\r\n').filter((event) => event !== '').map((event) => JSON.parse(event.slice('data: '.length)));
    const texts = chunks.map((chunk) => chunk.candidates[0].content.parts.map((part: any) => part.text ?? '').join('')).join('');
    const tokens = chunks.flatMap((chunk) => chunk.candidates[0].logprobsResult.chosenCandidates.map((chosen: any) => chosen.token)).join('');
    expect(tokens).toBe(texts);
  });

  it('refuses a function response count that does not match the calls', async () => {
    const body = {
      contents: [
        { role: 'user', parts: [{ text: 'two?' }] },
        { role: 'model', parts: [{ functionCall: { name: 'a', args: {} } }, { functionCall: { name: 'b', args: {} } }] },
        { role: 'user', parts: [{ functionResponse: { name: 'a', response: {} } }] },
      ],
    };
    const response = await post('/models/gemini-2.5-flash:generateContent', body);
    expect((await response.json()).error.message).toContain('number of function response parts');
  });

  it('streams SSE events that end in CRLF CRLF, thoughts and calls included, the finish reason last', async () => {
    fake.script({ thought: 'thinking…', functionCalls: [{ name: 'a', args: { x: 1 } }, { name: 'b' }], usage: { promptTokenCount: 10, candidatesTokenCount: 5, thoughtsTokenCount: 7, cachedContentTokenCount: 4 } });
    const response = await post('/models/gemini-2.5-flash:streamGenerateContent?alt=sse', hello);
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    const text = await response.text();
    const events = text.split('\r\n\r\n').filter((event) => event !== '');
    expect(events.every((event) => event.startsWith('data: '))).toBe(true);
    const chunks = events.map((event) => JSON.parse(event.slice(6)));
    const parts = chunks.flatMap((chunk) => chunk.candidates[0].content.parts);
    const thoughts = parts.filter((part) => part.thought);
    expect(thoughts.map((part) => part.text).join('')).toBe('thinking…');
    expect(parts.indexOf(thoughts[0])).toBe(0);
    const calls = parts.filter((part) => part.functionCall);
    expect(calls.map((part) => part.functionCall.name)).toEqual(['a', 'b']);
    expect(typeof calls[0].thoughtSignature).toBe('string');
    expect(calls[1].thoughtSignature).toBeUndefined();
    expect(chunks.at(-1).candidates[0].finishReason).toBe('STOP');
    expect(chunks.at(-1).usageMetadata).toMatchObject({ thoughtsTokenCount: 7, cachedContentTokenCount: 4, totalTokenCount: 22 });
  });

  it('blocks prompts, scripts errors and cuts streams', async () => {
    fake.script({ blockPrompt: 'SAFETY' }, { status: 503 }, { cutAfterChunks: 1, text: 'abcdef' });
    const blocked = await (await post('/models/gemini-2.5-flash:generateContent', hello)).json();
    expect(blocked.promptFeedback.blockReason).toBe('SAFETY');
    expect(blocked.candidates).toBeUndefined();
    const error = await post('/models/gemini-2.5-flash:generateContent', hello);
    expect(error.status).toBe(503);
    expect((await error.json()).error.status).toBe('UNAVAILABLE');
    const cut = await post('/models/gemini-2.5-flash:streamGenerateContent?alt=sse', hello);
    await expect(cut.text()).rejects.toThrow();
  });

  it('embeds a batch, checking each request names the model', async () => {
    const body = { requests: [{ model: 'models/gemini-embedding-001', content: { parts: [{ text: 'a' }] }, outputDimensionality: 4 }] };
    const answer = await (await post('/models/gemini-embedding-001:batchEmbedContents', body)).json();
    expect(answer.embeddings[0].values).toHaveLength(4);
    const wrong = { requests: [{ model: 'models/other', content: { parts: [{ text: 'a' }] } }] };
    expect((await post('/models/gemini-embedding-001:batchEmbedContents', wrong)).status).toBe(400);
    const tooMany = { requests: Array.from({ length: 101 }, () => body.requests[0]) };
    expect((await (await post('/models/gemini-embedding-001:batchEmbedContents', tooMany)).json()).error.message).toContain('at most 100 requests');
  });
});
