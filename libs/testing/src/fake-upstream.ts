import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { approximateTokens, listenOnLoopback, receiveScripted, sendChunksWithFaults, sleep, splitText, toolCallPieces } from './fake-upstream-support.js';
import { fakeAudioSpeech, fakeImages, fakeModeration, fakeTranscription } from './fake-upstream-media.js';
import type { FakeBehaviour, FakeScript, FakeUpstream, RecordedPart, RecordedRequest } from './fake-upstream-types.js';

export type { FakeBehaviour, FakeScript, FakeUpstream, RecordedRequest } from './fake-upstream-types.js';

const DEFAULT_TEXT = 'Hello from the fake upstream.';

function promptText(body: any): string {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  return messages
    .map((message: any) =>
      typeof message?.content === 'string'
        ? message.content
        : Array.isArray(message?.content)
          ? message.content.map((part: any) => part?.text ?? '').join('')
          : '',
    )
    .join('\n');
}

/**
 * An OpenAI-compatible provider on a real loopback HTTP server (POST /v1/chat/completions, JSON and
 * SSE; POST /v1/embeddings), scriptable per request: latency, error statuses, resets, stalls, cut
 * streams, usage present or absent. It records every request for assertions.
 */
export async function startFakeUpstream(options: {
  /**
   * How long the server keeps an idle kept-alive connection (node's default, 5 s, unless given). A provider
   * that closes one as the gateway reuses it fails that attempt ("other side closed"); a longer time than
   * routing's own idle reuse (up to 30 s) keeps that race out of a test about something else.
   */
  keepAliveTimeoutMs?: number;
} = {}): Promise<FakeUpstream> {
  const requests: RecordedRequest[] = [];
  const queue: FakeScript[] = [];
  let fallback: FakeScript = {};
  let created = 0;

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const { behaviour, body, recorded } = await receiveScripted(request, requests, queue, fallback);

    if (behaviour.latencyMs) await sleep(behaviour.latencyMs);
    if (behaviour.stall) return; // never answers; close() destroys the socket
    if (behaviour.reset) { request.socket.destroy(); return; }
    if (behaviour.status && behaviour.status >= 400) {
      const errorBody = behaviour.errorBody ?? {
        error: { message: `fake upstream error ${behaviour.status}`, type: 'server_error', code: null, param: null },
      };
      response.writeHead(behaviour.status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(errorBody));
      return;
    }

    if (behaviour.replay) {
      response.writeHead(200, { 'content-type': behaviour.replay.contentType });
      response.end(behaviour.replay.body);
      return;
    }
    const path = (request.url ?? '').split('?')[0];
    if (request.method === 'POST' && path === '/v1/chat/completions') return chat(body, behaviour, response, request.socket);
    if (request.method === 'POST' && path === '/v1/embeddings') return embeddings(body, behaviour, response);
    if (request.method === 'POST' && path === '/v1/moderations') return fakeModeration(body, response);
    if (request.method === 'POST' && (path === '/v1/images/generations' || path === '/v1/images/edits')) {
      return fakeImages(path.endsWith('edits') ? fieldsOf(recorded.parts) : body, behaviour, response);
    }
    if (request.method === 'POST' && path === '/v1/audio/speech') return fakeAudioSpeech(body, behaviour, response);
    if (request.method === 'POST' && (path === '/v1/audio/transcriptions' || path === '/v1/audio/translations')) {
      return fakeTranscription(fieldsOf(recorded.parts), path.endsWith('translations'), response);
    }
    response.writeHead(404, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ error: { message: `no route ${request.method} ${path}`, type: 'invalid_request_error' } }));
  }

  function fieldsOf(parts: RecordedPart[] | undefined): Record<string, string> {
    const fields: Record<string, string> = {};
    for (const part of parts ?? []) if (part.filename === undefined) fields[part.name] = part.data.toString('utf8');
    return fields;
  }

  function usageFor(body: any, behaviour: FakeBehaviour, text: string) {
    if (behaviour.usage === 'absent') return undefined;
    const promptTokens = behaviour.usage?.prompt_tokens ?? approximateTokens(promptText(body));
    const completionTokens = behaviour.usage?.completion_tokens ?? approximateTokens(text);
    return {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
      prompt_tokens_details: { cached_tokens: behaviour.usage?.cached_tokens ?? 0 },
      // OpenAI's place for reasoning: part of completion_tokens (a provider may report it beside a 0 there).
      ...(behaviour.usage?.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: behaviour.usage.reasoning_tokens } } : {}),
    };
  }

  async function chat(body: any, behaviour: FakeBehaviour, response: ServerResponse, socket: Socket) {
    const id = `chatcmpl-fake${++created}`;
    const model = body?.model ?? 'fake-model';
    const createdAt = Math.floor(Date.now() / 1000);
    const text = behaviour.text ?? DEFAULT_TEXT;
    const toolCalls = behaviour.toolCalls ?? [];
    const finishReason = behaviour.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop');
    const usage = usageFor(body, behaviour, text);

    if (!body?.stream) {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({
        id,
        object: 'chat.completion',
        created: createdAt,
        model,
        choices: [{
          index: 0,
          message: {
            role: 'assistant',
            content: toolCalls.length > 0 && !behaviour.text ? null : text,
            ...(toolCalls.length > 0
              ? { tool_calls: toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) }
              : {}),
          },
          finish_reason: finishReason,
        }],
        ...(usage ? { usage } : {}),
      }));
      return;
    }

    response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    response.flushHeaders();
    // Each chunk is flushed to the socket before the next step, so a cut after N chunks really delivers N.
    const send = (chunk: unknown) =>
      new Promise<void>((resolve) => { response.write(`data: ${JSON.stringify(chunk)}\n\n`, () => resolve()); });
    const frame = (delta: unknown, finish: string | null = null) => ({
      id, object: 'chat.completion.chunk', created: createdAt, model,
      choices: [{ index: 0, delta, finish_reason: finish }],
    });
    const contentChunks = splitText(toolCalls.length > 0 && !behaviour.text ? '' : text, behaviour.chunkCount ?? 3);
    const pieces: unknown[] = contentChunks.map((content, index) =>
      frame(index === 0 ? { role: 'assistant', content } : { content }),
    );
    pieces.push(...toolCallPieces(toolCalls, frame));
    if (!await sendChunksWithFaults(pieces, behaviour, send, socket, response, 'fake upstream failed mid-stream')) return;
    await send(frame({}, finishReason));
    if (usage && body?.stream_options?.include_usage) {
      await send({ id, object: 'chat.completion.chunk', created: createdAt, model, choices: [], usage });
    }
    response.write('data: [DONE]\n\n');
    response.end();
  }

  function embeddings(body: any, behaviour: FakeBehaviour, response: ServerResponse) {
    const inputs: unknown[] = Array.isArray(body?.input) ? body.input : [body?.input ?? ''];
    const dimensions = typeof body?.dimensions === 'number' ? body.dimensions : 8;
    const data = inputs.map((input, index) => {
      const seed = JSON.stringify(input);
      const values = Array.from({ length: dimensions }, (_, position) => ((seed.charCodeAt(position % Math.max(1, seed.length)) || 0) % 97) / 97);
      return { object: 'embedding', index, embedding: values };
    });
    const promptTokens = inputs.reduce<number>((sum, input) => sum + approximateTokens(JSON.stringify(input)), 0);
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({
      object: 'list',
      data,
      model: body?.model ?? 'fake-embedding',
      ...(behaviour.usage === 'absent' ? {} : { usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }),
    }));
  }

  const server = await listenOnLoopback(handle, options);

  return {
    url: `http://127.0.0.1:${server.port}/v1`,
    requests,
    script: (...behaviours) => { queue.push(...behaviours); },
    setFallback: (behaviour) => { fallback = behaviour; },
    reset: () => { queue.length = 0; requests.length = 0; fallback = {}; },
    close: () => server.close(),
  };
}
