import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

import type { RecordedPart, RecordedRequest } from './fake-upstream-types.js';

// Shared by the fake providers (OpenAI-compatible and Anthropic); not part of the package's exports.

/** Bound on a request body the fakes accept; tests never need more. */
const MAX_BODY_BYTES = 64 * 1024 * 1024;

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function approximateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

/** Splits text into at most `parts` pieces of near-equal length (none for empty text). */
export function splitText(text: string, parts: number): string[] {
  if (text.length === 0) return [];
  const count = Math.max(1, Math.min(parts, text.length));
  const size = Math.ceil(text.length / count);
  const chunks: string[] = [];
  for (let start = 0; start < text.length; start += size) chunks.push(text.slice(start, start + size));
  return chunks;
}

export async function readBody(request: IncomingMessage): Promise<string> {
  return (await readBodyBytes(request)).toString('utf8');
}

export async function readBodyBytes(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new Error('body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** Splits a multipart/form-data body (the fake's own small parser; tests only send well-formed ones). */
export function parseMultipart(body: Buffer, contentType: string): RecordedPart[] {
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!boundary) return [];
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const parts: RecordedPart[] = [];
  let start = body.indexOf(delimiter);
  while (start >= 0) {
    const next = body.indexOf(delimiter, start + delimiter.length);
    if (next < 0) break;
    const part = body.subarray(start + delimiter.length + 2, next - 2);
    const headerEnd = part.indexOf('\r\n\r\n');
    if (headerEnd >= 0) {
      const headers = part.subarray(0, headerEnd).toString('utf8');
      const name = /name="([^"]*)"/i.exec(headers)?.[1] ?? '';
      const filename = /filename="([^"]*)"/i.exec(headers)?.[1];
      const type = /content-type:\s*([^\r\n]+)/i.exec(headers)?.[1];
      parts.push({ name, ...(filename !== undefined ? { filename } : {}), ...(type ? { contentType: type.trim() } : {}), data: part.subarray(headerEnd + 4) });
    }
    start = next;
  }
  return parts;
}

export interface LoopbackServer {
  port: number;
  /** Destroys every open socket (stalled answers included), then stops listening. */
  close(): Promise<void>;
}

/**
 * A node:http server on 127.0.0.1, port 0; a handler that throws gets its socket destroyed.
 * `keepAliveTimeoutMs`: how long an idle kept-alive connection stays open (node's default, 5 s, unless given).
 */
export async function listenOnLoopback(
  handle: (request: IncomingMessage, response: ServerResponse) => Promise<void>,
  options: { keepAliveTimeoutMs?: number } = {},
): Promise<LoopbackServer> {
  const sockets = new Set<Socket>();
  const server = createServer((request, response) => {
    void handle(request, response).catch(() => response.destroy());
  });
  if (options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = options.keepAliveTimeoutMs;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** What a fake's script or fallback is: a behaviour, or a function of the recorded request giving one. */
export type ScriptOf<Behaviour> = Behaviour | ((recorded: RecordedRequest) => Behaviour);

/**
 * What every scripted fake upstream keeps: the requests it received, and the behaviours queued for the next
 * ones (one each, in order; `fallback` answers when the queue is empty, a normal answer unless set). Its
 * `controls` are the part of a fake's handle that is alike in every fake: requests, script, setFallback, reset.
 */
export class ScriptedBehaviours<Behaviour extends object> {
  readonly requests: RecordedRequest[] = [];
  private readonly queue: ScriptOf<Behaviour>[] = [];
  // Every behaviour's fields are optional: the empty one is the normal answer.
  private fallback: ScriptOf<Behaviour> = {} as Behaviour;

  /** Records a request and takes the behaviour that answers it; a script function is called with the recorded request. */
  take(recorded: RecordedRequest): Behaviour {
    this.requests.push(recorded);
    const next = this.queue.shift() ?? this.fallback;
    return typeof next === 'function' ? (next as (recorded: RecordedRequest) => Behaviour)(recorded) : next;
  }

  controls() {
    return {
      requests: this.requests,
      script: (...behaviours: ScriptOf<Behaviour>[]) => { this.queue.push(...behaviours); },
      setFallback: (behaviour: ScriptOf<Behaviour>) => { this.fallback = behaviour; },
      reset: () => { this.queue.length = 0; this.requests.length = 0; this.fallback = {} as Behaviour; },
    };
  }
}

/** Reads and records one request, then takes the behaviour that answers it (ScriptedBehaviours.take). */
export async function receiveScripted<Behaviour extends object>(
  request: IncomingMessage,
  scripted: ScriptedBehaviours<Behaviour>,
): Promise<{ recorded: RecordedRequest; behaviour: Behaviour; raw: string; body: any }> {
  const bytes = await readBodyBytes(request);
  const raw = bytes.toString('utf8');
  let body: any;
  try { body = raw ? JSON.parse(raw) : undefined; } catch { body = undefined; }
  const contentType = request.headers['content-type'] ?? '';
  const parts = /^multipart\/form-data/i.test(contentType) ? parseMultipart(bytes, contentType) : undefined;
  const recorded: RecordedRequest = { method: request.method ?? '', path: request.url ?? '', headers: request.headers, body, receivedAt: Date.now(), ...(parts ? { parts } : {}) };
  return { recorded, raw, body, behaviour: scripted.take(recorded) };
}

/** The faults a chat-completions fake can be scripted with, each at a chunk count. */
export interface ChunkFaults {
  cutAfterChunks?: number | undefined;
  stallAfterChunks?: number | undefined;
  streamErrorAfterChunks?: number | undefined;
  chunkDelayMs?: number | undefined;
}

/** A whole chat completion (200, JSON) as the OpenAI wire sends it: the envelope, then `rest` (choices, usage, a vendor's extras) in its order. */
export function answerChatCompletion(response: ServerResponse, id: string, created: number, model: string, rest: object): void {
  response.writeHead(200, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ id, object: 'chat.completion', created, model, ...rest }));
}

/** Tool calls as chat-completions stream pieces: each call's id and name, then its arguments whole. */
export function toolCallPieces(toolCalls: readonly { id: string; name: string; arguments: string }[], frame: (delta: unknown) => unknown): unknown[] {
  return toolCalls.flatMap((call, index) => [
    frame({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }),
    frame({ tool_calls: [{ index, function: { arguments: call.arguments } }] }),
  ]);
}

/**
 * Sends chat-completions chunks one at a time with the scripted faults: the connection cut or the stream
 * stalled after N chunks, an in-stream error (`errorMessage`) after N, a delay between chunks. False when
 * a fault ended the stream (nothing more may be sent).
 */
export async function sendChunksWithFaults(
  pieces: readonly unknown[],
  faults: ChunkFaults,
  send: (chunk: unknown) => Promise<void>,
  socket: Socket,
  response: ServerResponse,
  errorMessage: string,
): Promise<boolean> {
  for (let sent = 0; ; sent++) {
    if (faults.cutAfterChunks === sent) { socket.destroy(); return false; }
    if (faults.stallAfterChunks === sent) return false;
    if (faults.streamErrorAfterChunks === sent) {
      await send({ error: { message: errorMessage, type: 'server_error', code: 'server_error' } });
      response.end();
      return false;
    }
    if (sent >= pieces.length) return true;
    if (faults.chunkDelayMs && sent > 0) await sleep(faults.chunkDelayMs);
    await send(pieces[sent]);
  }
}

/** OpenAI's logprobs of a text: one entry per word-ish token, each with `top` alternatives. */
export function fakeLogprobs(text: string, top: number): unknown[] {
  // Whole text, split at word ends: the tokens joined are the text (also across stream chunks).
  const tokens = text.match(/\s+|\S+\s*/g) ?? [];
  return tokens.map((token, position) => ({
    token,
    logprob: -0.25 * (position + 1),
    bytes: [...Buffer.from(token, 'utf8')],
    top_logprobs: Array.from({ length: top }, (_, rank) => {
      const alternative = rank === 0 ? token : `${token}~${rank}`;
      return { token: alternative, logprob: -0.25 * (position + 1) - rank, bytes: [...Buffer.from(alternative, 'utf8')] };
    }),
  }));
}
