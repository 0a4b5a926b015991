import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { serveUntilSignalled } from './serve-process.js';

/**
 * The bench's upstream, its own process: a minimal, fast OpenAI-compatible chat-completions server
 * (keep-alive, a fixed small JSON answer with usage, or an SSE stream when the body asks for one).
 * Unlike the scriptable fake of @gateway/testing it records nothing, so it costs the same per request
 * for ever. The first streamed chunk goes out at once and the rest after FIRST_CHUNK_GAP_MS, so a
 * proxy that buffered the stream would show it in the time to first chunk.
 * Prints `{"ready":true,"port":N}` on stdout when listening on 127.0.0.1.
 */

const FIRST_CHUNK_GAP_MS = Number(process.env.BENCH_FIRST_CHUNK_GAP_MS ?? 10);
/** The bench sends small bodies; anything bigger is a mistake, not load. */
const MAX_BODY_BYTES = 1024 * 1024;
const CREATED = 1_767_225_600;

const jsonAnswer = Buffer.from(
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: CREATED,
    model: 'bench-upstream-model',
    choices: [{ index: 0, message: { role: 'assistant', content: 'Hello from the bench upstream.' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 },
  }),
);

const chunk = (delta: object, finishReason: string | null, extra: object = {}) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model: 'bench-upstream-model', choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra })}\n\n`;
const firstChunk = chunk({ role: 'assistant', content: 'Hello' }, null);
const restChunks =
  chunk({ content: ' from the' }, null) +
  chunk({ content: ' bench upstream.' }, null) +
  chunk({}, 'stop') +
  `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model: 'bench-upstream-model', choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } })}\n\n` +
  'data: [DONE]\n\n';

function answer(request: IncomingMessage, response: ServerResponse, body: string): void {
  if (request.method !== 'POST' || !request.url?.endsWith('/chat/completions')) {
    response.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found","type":"invalid_request_error"}}');
    return;
  }
  if (/"stream"\s*:\s*true/.test(body)) {
    response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    response.write(firstChunk);
    setTimeout(() => response.end(restChunks), FIRST_CHUNK_GAP_MS);
    return;
  }
  response.writeHead(200, { 'content-type': 'application/json', 'content-length': jsonAnswer.length });
  response.end(jsonAnswer);
}

const server = createServer({ keepAliveTimeout: 60_000 }, (request, response) => {
  const parts: Buffer[] = [];
  let size = 0;
  request.on('data', (part: Buffer) => {
    size += part.length;
    if (size > MAX_BODY_BYTES) {
      response.writeHead(413).end();
      request.destroy();
      return;
    }
    parts.push(part);
  });
  request.on('end', () => answer(request, response, Buffer.concat(parts).toString('utf8')));
});
serveUntilSignalled(server);
