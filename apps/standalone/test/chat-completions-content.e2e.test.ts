import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { minimalPdf, mixedProviderCatalog, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';

// Content of chat completions through the whole stack with the real `openai` client: tools, JSON
// modes, images, and files (PDF) to models with and without native file input. The provider is an
// OpenAI-compatible fake upstream that records what reached it; one model is served by the
// built-in simulated provider (no native JSON modes).

function configFor(upstream: FakeUpstream): string {
  return mixedProviderCatalog(upstream, {
    apiKeyEnv: 'CONTENT_UPSTREAM_KEY',
    perMinute: 600,
    models: [
      { id: 'testco/vision', modalities: '[text, image]', provider: 'fake-openai' },
      { id: 'testco/text-only', modalities: '[text]', provider: 'fake-openai' },
      { id: 'testco/file-reader', modalities: '[text, file]', provider: 'fake-openai' },
      { id: 'testco/simulated-json', modalities: '[text]', provider: 'simulated' },
    ],
  });
}

/** Text of every content part the upstream received in its user messages. */
function userContent(body: any): any[] {
  return (body.messages as any[]).filter((message) => message.role === 'user').flatMap((message) =>
    typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content,
  );
}

async function badRequest(promise: Promise<unknown>): Promise<{ status: number; error: { code?: string; message: string; param?: string } }> {
  const caught = await promise.then(() => undefined, (error: unknown) => error);
  expect(caught).toBeInstanceOf(OpenAI.APIError);
  return caught as { status: number; error: { code?: string; message: string } };
}

describe('chat completions content, end to end', () => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;
  let files: Server;
  let filesUrl = '';
  const pdfText = 'Quarterly revenue grew by forty percent';
  const pdf = minimalPdf([pdfText, 'Second page: costs fell']);

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    // The files a file_url points at: a loopback server, reachable only because this stack's media
    // service was started with the test-only loopback switch.
    files = createServer((request, response) => {
      if (request.url === '/report.pdf') {
        response.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(pdf.length) });
        response.end(pdf);
      } else if (request.url === '/moved') {
        response.writeHead(302, { location: '/report.pdf' });
        response.end();
      } else if (request.url === '/to-metadata') {
        response.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/iam' });
        response.end();
      } else {
        response.writeHead(404);
        response.end();
      }
    });
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    harness = await startChatHarness({
      configYaml: configFor(upstream),
      providerSecrets: { CONTENT_UPSTREAM_KEY: 'sk-fake-content' },
      media: { allowLoopbackUrlsForTests: true },
    });
  }, 120_000);

  afterAll(async () => {
    await stopHarnessAndFakes(harness, [upstream]);
    files?.closeAllConnections();
    await new Promise((resolve) => files?.close(resolve));
  });

  beforeEach(() => upstream.reset());

  it('tools round trip: tool call, then the tool result reaches the provider, then the answer', async () => {
    const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [{
      type: 'function',
      function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
    }];
    upstream.script({ toolCalls: [{ id: 'call_abc', name: 'get_weather', arguments: '{"city":"Paris"}' }] });
    const first = await harness.client.chat.completions.create({
      model: 'testco/vision',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools,
      tool_choice: 'auto',
    });
    const call = first.choices[0]!.message.tool_calls?.[0];
    expect(first.choices[0]!.finish_reason).toBe('tool_calls');
    expect(call).toMatchObject({ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } });
    expect(upstream.requests[0]!.body.tools[0].function.name).toBe('get_weather');
    expect(upstream.requests[0]!.headers.authorization).toBe('Bearer sk-fake-content');

    upstream.script({ text: 'It is sunny in Paris.' });
    const second = await harness.client.chat.completions.create({
      model: 'testco/vision',
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [call as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall] },
        { role: 'tool', tool_call_id: 'call_abc', content: '{"sky":"sunny"}' },
      ],
      tools,
    });
    expect(second.choices[0]!.message.content).toBe('It is sunny in Paris.');
    const sent = upstream.requests[1]!.body.messages as any[];
    expect(sent[1]).toMatchObject({ role: 'assistant', tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] });
    expect(sent[2]).toEqual({ role: 'tool', tool_call_id: 'call_abc', content: '{"sky":"sunny"}' });

    // The same round trip streamed: tool call deltas reassemble in the SDK.
    upstream.script({ toolCalls: [{ id: 'call_s', name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
    const stream = await harness.client.chat.completions.create({ model: 'testco/vision', messages: [{ role: 'user', content: 'Oslo?' }], tools, stream: true });
    let name = '';
    let args = '';
    let finish = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta;
      name += delta?.tool_calls?.[0]?.function?.name ?? '';
      args += delta?.tool_calls?.[0]?.function?.arguments ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect([name, args, finish]).toEqual(['get_weather', '{"city":"Oslo"}', 'tool_calls']);

    // A tool call without its result never reaches a provider.
    const unmatched = await badRequest(harness.client.chat.completions.create({
      model: 'testco/vision',
      messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [call as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall] }],
    }));
    expect([unmatched.status, unmatched.error.code]).toEqual([400, 'tool_output_unmatched']);
    expect(upstream.requests).toHaveLength(3);
  });

  it('json_schema passes through to a native provider; json_object works without the word json', async () => {
    const schema = { type: 'object', properties: { colours: { type: 'array', items: { type: 'string' } } }, required: ['colours'], additionalProperties: false };
    upstream.script({ text: '{"colours":["red","green","blue"]}' });
    const answer = await harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: 'Name three colours.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'colours', schema, strict: true } },
    });
    expect(JSON.parse(answer.choices[0]!.message.content!)).toEqual({ colours: ['red', 'green', 'blue'] });
    expect(upstream.requests[0]!.body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'colours', schema, strict: true } });

    upstream.script({ text: '{"ok":true}' });
    await harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: 'Name three colours.' }],
      response_format: { type: 'json_object' },
    });
    const sent = upstream.requests[1]!.body;
    expect(sent.response_format).toEqual({ type: 'json_object' });
    // OpenAI refuses json_object unless "json" appears in the messages: the gateway added it.
    expect(sent.messages[0].role).toBe('system');
    expect(sent.messages[0].content).toMatch(/JSON/);
  });

  it('json_schema on a provider without native support: instructed, answered with conforming JSON', async () => {
    const schema = {
      type: 'object',
      properties: {
        city: { type: 'string', minLength: 3 },
        population: { type: 'integer', minimum: 1000 },
        districts: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }, minItems: 2 },
      },
      required: ['city', 'population', 'districts'],
      additionalProperties: false,
    };
    const response_format = { type: 'json_schema' as const, json_schema: { name: 'city', schema, strict: true } };
    const answer = await harness.client.chat.completions.create({ model: 'testco/simulated-json', messages: [{ role: 'user', content: 'Describe a city.' }], response_format });
    const value = JSON.parse(answer.choices[0]!.message.content!) as { city: string; population: number; districts: { name: string }[] };
    expect(Object.keys(value).sort()).toEqual(['city', 'districts', 'population']);
    expect(value.city.length).toBeGreaterThanOrEqual(3);
    expect(Number.isInteger(value.population) && value.population >= 1000).toBe(true);
    expect(value.districts.length).toBeGreaterThanOrEqual(2);
    expect(typeof value.districts[0]!.name).toBe('string');

    const stream = await harness.client.chat.completions.create({ model: 'testco/simulated-json', messages: [{ role: 'user', content: 'Describe a city.' }], response_format, stream: true });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
    expect(JSON.parse(streamed)).toEqual(value);

    const objectAnswer = await harness.client.chat.completions.create({ model: 'testco/simulated-json', messages: [{ role: 'user', content: 'Hi' }], response_format: { type: 'json_object' } });
    expect(typeof JSON.parse(objectAnswer.choices[0]!.message.content!)).toBe('object');
  });

  it('an image reaches a vision model as image_url with its detail; a text-only model refuses it before any provider call', async () => {
    const image = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
    const answer = await harness.client.chat.completions.create({
      model: 'testco/vision',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: image, detail: 'low' } }] }],
    });
    expect(answer.choices[0]!.message.content).toBe('Hello from the fake upstream.');
    expect(userContent(upstream.requests[0]!.body)).toEqual([
      { type: 'text', text: 'What is this?' },
      { type: 'image_url', image_url: { url: image, detail: 'low' } },
    ]);

    const refused = await badRequest(harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
    }));
    expect([refused.status, refused.error.code]).toEqual([400, 'unsupported_modality']);
    expect(upstream.requests).toHaveLength(1);
  });

  it('a PDF (file_data) to a text-only model reaches the provider as its extracted text', async () => {
    const answer = await harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{
        role: 'user',
        content: [
          { type: 'text', text: 'Summarise the report.' },
          { type: 'file', file: { filename: 'report.pdf', file_data: `data:application/pdf;base64,${pdf.toString('base64')}` } },
        ],
      }],
    });
    expect(answer.choices[0]!.message.content).toBe('Hello from the fake upstream.');
    const parts = userContent(upstream.requests[0]!.body);
    expect(parts.map((part) => part.type)).toEqual(['text', 'text']);
    expect(parts[1].text).toContain(pdfText);
    expect(parts[1].text).toContain('Second page: costs fell');
    expect(parts[1].text).toContain('report.pdf');
    expect(JSON.stringify(upstream.requests[0]!.body)).not.toContain(pdf.toString('base64').slice(0, 40));
  });

  it('a PDF by file_url (fetched through a redirect) to a text-only model reaches the provider as text', async () => {
    await harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise.' }, { type: 'file', file: { file_url: `${filesUrl}/moved` } as never }] }],
    });
    const parts = userContent(upstream.requests[0]!.body);
    expect(parts.map((part) => part.type)).toEqual(['text', 'text']);
    expect(parts[1].text).toContain(pdfText);
    expect(JSON.stringify(upstream.requests[0]!.body)).not.toContain(filesUrl);
  });

  it('a file_url to a model with native file input arrives as file_data (the gateway fetched it)', async () => {
    await harness.client.chat.completions.create({
      model: 'testco/file-reader',
      messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'report.pdf', file_url: `${filesUrl}/report.pdf` } as never }] }],
    });
    const parts = userContent(upstream.requests[0]!.body);
    expect(parts).toEqual([{ type: 'file', file: { filename: 'report.pdf', file_data: `data:application/pdf;base64,${pdf.toString('base64')}` } }]);
  });

  it('refuses an unknown file_id with 404, and internal URLs, redirects to metadata and broken PDFs with 400, before any provider call', async () => {
    const fileId = await badRequest(harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-123' } }] }],
    }));
    expect([fileId.status, fileId.error.code]).toEqual([404, 'file_not_found']);
    for (const url of ['http://10.0.0.1/report.pdf', 'http://169.254.169.254/latest/meta-data/', `${filesUrl}/to-metadata`, 'file:///etc/passwd']) {
      const refused = await badRequest(harness.client.chat.completions.create({
        model: 'testco/text-only',
        messages: [{ role: 'user', content: [{ type: 'file', file: { file_url: url } as never }] }],
      }));
      expect(refused.status, url).toBe(400);
      expect(refused.error.message, url).toMatch(/^body\.messages\.0\.content\.0\.file\.file_url: /);
    }
    const broken = await badRequest(harness.client.chat.completions.create({
      model: 'testco/text-only',
      messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: `data:application/pdf;base64,${Buffer.from('%PDF-1.4 no objects').toString('base64')}` } }] }],
    }));
    expect(broken.status).toBe(400);
    expect(upstream.requests).toHaveLength(0);
  });

  it('an inline file over 20 MiB is a 413', async () => {
    const oversized = Buffer.alloc(20 * 1024 * 1024 + 1024, 0x41).toString('base64');
    const response = await fetch(`${harness.stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'testco/text-only', messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: oversized } }] }] }),
    });
    expect(response.status).toBe(413);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe('body.messages.0.content.0.file.file_data');
    expect(upstream.requests).toHaveLength(0);
  });
});
