import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { bedrockFirstFrames, bedrockJsonAnswer, bedrockMissingSignature, bedrockRestFrames } from './fast-bedrock-answers.js';
import { geminiFirstEvent, geminiJsonAnswer, geminiKeyInvalid, geminiRestEvents } from './fast-gemini-answers.js';

/**
 * The bench's upstream: a minimal, fast server answering the same exchange on three provider wires —
 * OpenAI chat completions (`…/chat/completions`), Gemini (`…/models/{m}:generateContent` and
 * `:streamGenerateContent?alt=sse`) and Bedrock (`/model/{id}/converse` and `/converse-stream`). Every
 * answer is built once at start-up; unlike the scriptable fakes of @gateway/testing it records nothing
 * and verifies no signature, so it costs the same per request for ever. It only checks, at constant
 * cost, that the credentials are sent (the Gemini key; a SigV4 Authorization header naming the access
 * key), so a gateway that skipped signing would fail the bench's checks instead of looking cheap.
 * The first streamed chunk goes out at once and the rest after `firstChunkGapMs`, so a proxy that
 * buffered the stream would show it in the time to first chunk.
 * A chat completions stream whose prompt holds `[deltas D gap G]` is paced instead (issue 39's stream
 * load): D content deltas, the first at once and each next G ms after the previous, then the finish
 * and usage chunks and `[DONE]` with the last delta.
 */

export interface FastUpstreamOptions {
  firstChunkGapMs: number;
  geminiApiKey: string;
  awsAccessKeyId: string;
}

/** The bench sends small bodies; anything bigger is a mistake, not load. */
const MAX_BODY_BYTES = 1024 * 1024;
const CREATED = 1_767_225_600;

const openaiJsonAnswer = Buffer.from(
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
const openaiFirstChunk = chunk({ role: 'assistant', content: 'Hello' }, null);
const openaiRestChunks =
  chunk({ content: ' from the' }, null) +
  chunk({ content: ' bench upstream.' }, null) +
  chunk({}, 'stop') +
  `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model: 'bench-upstream-model', choices: [], usage: { prompt_tokens: 9, completion_tokens: 7, total_tokens: 16 } })}\n\n` +
  'data: [DONE]\n\n';

const NOT_FOUND = '{"error":{"message":"not found","type":"invalid_request_error"}}';
const GEMINI_STREAM_WITHOUT_SSE = Buffer.from(
  JSON.stringify({ error: { code: 400, message: 'The bench upstream streams Gemini answers as SSE only (alt=sse).', status: 'INVALID_ARGUMENT' } }),
);
const BEDROCK_REQUEST_ID = 'bench-bedrock-request';

/** The paced stream's marker in a prompt; bounded so no request holds the upstream for long. */
const PACED_MARKER = /\[deltas (\d{1,4}) gap (\d{1,4})\]/;
export const MAX_PACED_DELTAS = 4_096;
export const MAX_PACED_GAP_MS = 1_000;

/** A chat completions stream paced as its prompt's marker asks (see the class comment). */
function pacedStream(response: ServerResponse, deltas: number, gapMs: number): void {
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  response.write(chunk({ role: 'assistant', content: 'w0' }, null));
  let sent = 1;
  const tail = () =>
    chunk({}, 'stop') +
    `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model: 'bench-upstream-model', choices: [], usage: { prompt_tokens: 9, completion_tokens: deltas, total_tokens: 9 + deltas } })}\n\n` +
    'data: [DONE]\n\n';
  if (deltas <= 1) {
    response.end(tail());
    return;
  }
  const timer = setInterval(() => {
    const delta = chunk({ content: ` w${sent}` }, null);
    sent += 1;
    if (sent < deltas) {
      response.write(delta);
      return;
    }
    clearInterval(timer);
    response.end(delta + tail());
  }, gapMs);
  response.on('close', () => clearInterval(timer));
}

function stream(response: ServerResponse, contentType: string, first: Buffer | string, rest: Buffer | string, gapMs: number, headers: Record<string, string> = {}): void {
  response.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-cache', ...headers });
  response.write(first);
  setTimeout(() => response.end(rest), gapMs);
}

function whole(response: ServerResponse, status: number, body: Buffer, headers: Record<string, string> = {}): void {
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length, ...headers });
  response.end(body);
}

export function createFastUpstream(options: FastUpstreamOptions): Server {
  const gap = options.firstChunkGapMs;
  const sigV4Prefix = `AWS4-HMAC-SHA256 Credential=${options.awsAccessKeyId}/`;

  const answer = (request: IncomingMessage, response: ServerResponse, body: string): void => {
    const url = request.url ?? '';
    if (request.method !== 'POST') {
      response.writeHead(404, { 'content-type': 'application/json' }).end(NOT_FOUND);
      return;
    }
    if (url.endsWith('/chat/completions')) {
      const paced = PACED_MARKER.exec(body);
      if (paced && /"stream"\s*:\s*true/.test(body)) pacedStream(response, Math.min(MAX_PACED_DELTAS, Math.max(1, Number(paced[1]))), Math.min(MAX_PACED_GAP_MS, Number(paced[2])));
      else if (/"stream"\s*:\s*true/.test(body)) stream(response, 'text/event-stream', openaiFirstChunk, openaiRestChunks, gap);
      else whole(response, 200, openaiJsonAnswer);
      return;
    }
    if (url.startsWith('/model/')) {
      const authorization = request.headers.authorization;
      if (authorization === undefined || !authorization.startsWith(sigV4Prefix) || request.headers['x-amz-date'] === undefined) {
        whole(response, 403, bedrockMissingSignature, { 'x-amzn-errortype': 'MissingAuthenticationTokenException', 'x-amzn-requestid': BEDROCK_REQUEST_ID });
        return;
      }
      if (url.endsWith('/converse-stream')) {
        stream(response, 'application/vnd.amazon.eventstream', bedrockFirstFrames, bedrockRestFrames, gap, { 'x-amzn-requestid': BEDROCK_REQUEST_ID });
        return;
      }
      if (url.endsWith('/converse')) {
        whole(response, 200, bedrockJsonAnswer, { 'x-amzn-requestid': BEDROCK_REQUEST_ID });
        return;
      }
    } else if (url.includes('/models/')) {
      if (request.headers['x-goog-api-key'] !== options.geminiApiKey) {
        whole(response, 400, geminiKeyInvalid);
        return;
      }
      if (url.includes(':streamGenerateContent')) {
        if (url.endsWith('?alt=sse')) stream(response, 'text/event-stream', geminiFirstEvent, geminiRestEvents, gap);
        else whole(response, 400, GEMINI_STREAM_WITHOUT_SSE);
        return;
      }
      if (url.endsWith(':generateContent')) {
        whole(response, 200, geminiJsonAnswer);
        return;
      }
    }
    response.writeHead(404, { 'content-type': 'application/json' }).end(NOT_FOUND);
  };

  return createServer({ keepAliveTimeout: 60_000 }, (request, response) => {
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
}
