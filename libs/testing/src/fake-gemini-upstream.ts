import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { createThoughtSigner, InvalidGeminiRequest, validateBatchEmbed, validateGenerateContent } from './fake-gemini-validation.js';
import { approximateTokens, listenOnLoopback, receiveScripted, ScriptedBehaviours, sleep, splitText } from './fake-upstream-support.js';
import type { FakeBehaviour, FakeUpstream, RecordedRequest } from './fake-upstream-types.js';

/** Usage of one scripted answer, in Gemini's own counters (`candidatesTokenCount` excludes the thoughts). */
export type FakeGeminiUsage =
  | 'absent'
  | { promptTokenCount: number; candidatesTokenCount: number; thoughtsTokenCount?: number; cachedContentTokenCount?: number };

export interface FakeGeminiFunctionCall {
  name: string;
  /** The call's arguments (default `{}`). */
  args?: Record<string, unknown>;
  /** Gemini API calls carry no id; set one to act like an API that does. */
  id?: string;
}

/**
 * One scripted answer of the fake Gemini API. The shared fields (latencyMs, stall, reset, status,
 * text, chunkCount, chunkDelayMs, cutAfterChunks, stallAfterChunks, streamErrorAfterChunks, replay)
 * mean what they mean for the other fakes; a stream "chunk" is one `data:` event holding one
 * GenerateContentResponse. Requests the fake refuses still use up a queued script.
 */
export interface FakeGeminiBehaviour extends Omit<FakeBehaviour, 'usage' | 'toolCalls' | 'finishReason' | 'errorBody'> {
  /** Function calls after the text (no text part unless `text` is set too). */
  functionCalls?: FakeGeminiFunctionCall[];
  /** Gemini finishReason (STOP, MAX_TOKENS, SAFETY, ...). Default STOP, also with function calls. */
  finishReason?: string;
  /** A blocked prompt: `promptFeedback.blockReason` with this reason and no candidates. */
  blockPrompt?: string;
  usage?: FakeGeminiUsage;
  /** A thought part first: its text, `true` for a default text, `false` for none. Default: when the
   *  request sets thinkingConfig.includeThoughts. */
  thought?: string | boolean;
  /** Signs the answer (the first function call part, else the last text part). Default true. */
  signed?: boolean;
  /** Signs the thought too (its last part; in a stream an empty thought part after the thought text). */
  thoughtSigned?: boolean;
  /** Error body for `status` (default: Google's `{error:{code, message, status}}`). */
  errorBody?: unknown;
  /** `error.status` of the default error body (default: the google.rpc code name for the status). */
  errorStatus?: string;
  /** An image the model made (an inlineData part after the text, as image models answer). */
  image?: { mimeType: string; data: string };
  /** Embeddings: vector length when the request sets no outputDimensionality (default 8). */
  dimensions?: number;
}

export type FakeGeminiScript = FakeGeminiBehaviour | ((request: RecordedRequest) => FakeGeminiBehaviour);

export interface FakeGeminiUpstreamOptions {
  /** The only key accepted in `x-goog-api-key` (or `?key=`); default: any non-empty key. */
  apiKey?: string;
  /** Models that exist; default: any. Another model is 404 NOT_FOUND. */
  models?: string[];
}

export interface FakeGeminiUpstream extends Omit<FakeUpstream, 'script' | 'setFallback'> {
  /** The API root with its version, as a `kind: gemini` base_url: `http://127.0.0.1:<port>/v1beta`. */
  url: string;
  script(...behaviours: FakeGeminiScript[]): void;
  setFallback(behaviour: FakeGeminiScript): void;
  /** A fresh thought signature this instance accepts back. */
  signature(): string;
}

const DEFAULT_TEXT = 'Hello from the fake upstream.';
const DEFAULT_THOUGHT = 'The user greets me; a short friendly answer fits.';

const RPC_STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT', 401: 'UNAUTHENTICATED', 403: 'PERMISSION_DENIED', 404: 'NOT_FOUND', 409: 'ABORTED', 429: 'RESOURCE_EXHAUSTED',
  499: 'CANCELLED', 500: 'INTERNAL', 501: 'NOT_IMPLEMENTED', 503: 'UNAVAILABLE', 504: 'DEADLINE_EXCEEDED',
};

function rpcStatusFor(status: number): string {
  return RPC_STATUS[status] ?? (status >= 500 ? 'INTERNAL' : 'FAILED_PRECONDITION');
}

/** The body Google answers a wrong API key with (HTTP 400, not 401). */
export function apiKeyInvalidBody(): unknown {
  return {
    error: {
      code: 400,
      message: 'API key not valid. Please pass a valid API key.',
      status: 'INVALID_ARGUMENT',
      details: [
        {
          '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
          reason: 'API_KEY_INVALID',
          domain: 'googleapis.com',
          metadata: { service: 'generativelanguage.googleapis.com' },
        },
        { '@type': 'type.googleapis.com/google.rpc.LocalizedMessage', locale: 'en-US', message: 'API key not valid. Please pass a valid API key.' },
      ],
    },
  };
}

const PATH = /^\/v1beta\/(models|tunedModels)\/([^/:]+):(generateContent|streamGenerateContent|batchEmbedContents)$/;

/**
 * The Gemini API (generativelanguage v1beta) on a real loopback HTTP server: generateContent,
 * streamGenerateContent (`?alt=sse`: SSE whose events end in CRLF CRLF, as Google's servers send them;
 * without it a JSON array) and batchEmbedContents, scriptable per request like the other fakes. It
 * checks the key, then refuses what the real API refuses (fake-gemini-validation.ts: unknown fields,
 * JSON Schema keywords in `parameters`, non-object function responses, calls and responses that do not
 * pair, a Gemini 3 function call sent back without its thought signature, signatures it did not issue)
 * before any scripted behaviour but latency, stall and reset.
 */
export async function startFakeGeminiUpstream(options: FakeGeminiUpstreamOptions = {}): Promise<FakeGeminiUpstream> {
  const scripted = new ScriptedBehaviours<FakeGeminiBehaviour>();
  let answered = 0;
  const signer = createThoughtSigner();

  function sendError(response: ServerResponse, status: number, message: string, rpcStatus = rpcStatusFor(status), body?: unknown) {
    response.writeHead(status, { 'content-type': 'application/json; charset=UTF-8' });
    response.end(JSON.stringify(body ?? { error: { code: status, message, status: rpcStatus } }));
  }

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const { behaviour, body } = await receiveScripted(request, scripted);
    const number = ++answered;
    if (behaviour.latencyMs) await sleep(behaviour.latencyMs);
    if (behaviour.stall) return;
    if (behaviour.reset) { request.socket.destroy(); return; }

    const url = new URL(request.url ?? '/', 'http://fake');
    const route = PATH.exec(url.pathname);
    if (request.method !== 'POST' || !route) return sendError(response, 404, 'Not Found');
    const key = (request.headers['x-goog-api-key'] as string | undefined) || url.searchParams.get('key');
    if (!key) {
      return sendError(response, 403, 'Method doesn\'t allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.');
    }
    if (options.apiKey !== undefined && key !== options.apiKey) return sendError(response, 400, '', 'INVALID_ARGUMENT', apiKeyInvalidBody());
    const [, , model, method] = route as unknown as [string, string, string, string];
    if (options.models && !options.models.includes(model)) {
      return sendError(response, 404, `models/${model} is not found for API version v1beta, or is not supported for ${method}. Call ListModels to see the list of available models and their supported methods.`);
    }
    if (body === undefined) return sendError(response, 400, 'Invalid JSON payload received. Unexpected end of string.');
    try {
      if (method === 'batchEmbedContents') validateBatchEmbed(body, model);
      else validateGenerateContent(body, { model, signer, stream: method === 'streamGenerateContent' });
    } catch (error) {
      if (error instanceof InvalidGeminiRequest) return sendError(response, error.status, error.message, error.rpcStatus);
      throw error;
    }

    if (behaviour.status && behaviour.status >= 400) {
      const status = behaviour.status;
      return sendError(response, status, `fake upstream error ${status}`, behaviour.errorStatus ?? rpcStatusFor(status), behaviour.errorBody);
    }
    if (behaviour.replay) {
      response.writeHead(200, { 'content-type': behaviour.replay.contentType });
      response.end(behaviour.replay.body);
      return;
    }
    if (method === 'batchEmbedContents') return embed(body, behaviour, response);
    const stream = method === 'streamGenerateContent';
    return answer(body, model, behaviour, number, stream ? (url.searchParams.get('alt') === 'sse' ? 'sse' : 'array') : 'json', response, request.socket);
  }

  function embed(body: any, behaviour: FakeGeminiBehaviour, response: ServerResponse) {
    const embeddings = body.requests.map((item: any, index: number) => {
      const size = item.outputDimensionality ?? item.output_dimensionality ?? behaviour.dimensions ?? 8;
      const text = (item.content.parts as any[]).map((part) => part.text ?? '').join('');
      return { values: Array.from({ length: size }, (_unused, position) => ((text.length + index + position) % 7) / 7) };
    });
    response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
    response.end(JSON.stringify({ embeddings }));
  }

  function promptText(body: any): string {
    const parts: string[] = [];
    for (const content of [body.systemInstruction, ...body.contents]) {
      for (const part of content?.parts ?? []) {
        if (typeof part.text === 'string') parts.push(part.text);
        else if (part.functionCall) parts.push(JSON.stringify(part.functionCall.args ?? {}));
        else if (part.functionResponse) parts.push(JSON.stringify(part.functionResponse.response));
      }
    }
    return parts.join('\n');
  }

  function usageFor(body: any, behaviour: FakeGeminiBehaviour, outputText: string, thoughtText: string) {
    const scripted = behaviour.usage;
    if (scripted === 'absent') return undefined;
    const counts = scripted ?? {
      promptTokenCount: approximateTokens(promptText(body)),
      candidatesTokenCount: approximateTokens(outputText),
      ...(thoughtText ? { thoughtsTokenCount: approximateTokens(thoughtText) } : {}),
    };
    const total = counts.promptTokenCount + counts.candidatesTokenCount + (counts.thoughtsTokenCount ?? 0);
    return {
      promptTokenCount: counts.promptTokenCount,
      candidatesTokenCount: counts.candidatesTokenCount,
      totalTokenCount: total,
      ...(counts.cachedContentTokenCount !== undefined ? { cachedContentTokenCount: counts.cachedContentTokenCount } : {}),
      ...(counts.thoughtsTokenCount !== undefined ? { thoughtsTokenCount: counts.thoughtsTokenCount } : {}),
      promptTokensDetails: [{ modality: 'TEXT', tokenCount: counts.promptTokenCount }],
    };
  }

  async function answer(
    body: any, model: string, behaviour: FakeGeminiBehaviour, number: number, mode: 'json' | 'sse' | 'array',
    response: ServerResponse, socket: Socket,
  ) {
    const responseId = `fakeResp${number}`;
    const base = { modelVersion: model, responseId };
    if (behaviour.blockPrompt) {
      const blocked = { promptFeedback: { blockReason: behaviour.blockPrompt }, usageMetadata: usageFor(body, behaviour, '', ''), ...base };
      if (mode === 'json') {
        response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
        response.end(JSON.stringify(blocked));
      } else {
        response.writeHead(200, { 'content-type': mode === 'sse' ? 'text/event-stream' : 'application/json; charset=UTF-8' });
        response.end(mode === 'sse' ? `data: ${JSON.stringify(blocked)}\r\n\r\n` : `[${JSON.stringify(blocked)}]`);
      }
      return;
    }
    const pieces = behaviour.chunkCount ?? 3;
    const calls = behaviour.functionCalls ?? [];
    const includeThoughts = body.generationConfig?.thinkingConfig?.includeThoughts === true;
    const thought = typeof behaviour.thought === 'string' ? behaviour.thought
      : behaviour.thought === true || (behaviour.thought === undefined && includeThoughts) ? DEFAULT_THOUGHT : '';
    const text = calls.length === 0 || behaviour.text !== undefined ? (behaviour.text ?? DEFAULT_TEXT) : '';
    const signature = behaviour.signed === false ? undefined : signer.sign();
    const thoughtSignature = thought && behaviour.thoughtSigned ? signer.sign() : undefined;
    const finishReason = behaviour.finishReason ?? 'STOP';
    // candidateCount: that many candidates (non-streamed only: validation refuses more in a stream), each its
    // own text (the first the scripted one); candidatesTokenCount counts them all, as Google reports it.
    const candidateCount = typeof body.generationConfig?.candidateCount === 'number' ? body.generationConfig.candidateCount : 1;
    const texts = Array.from({ length: candidateCount }, (_, index) => (index === 0 || !text ? text : `${text} (candidate ${index})`));
    const wantsLogprobs = body.generationConfig?.responseLogprobs === true;
    const topLogprobs = typeof body.generationConfig?.logprobs === 'number' ? body.generationConfig.logprobs : 0;
    const callText = calls.map((call) => JSON.stringify(call.args ?? {})).join('');
    const usage = usageFor(body, behaviour, texts.map((candidateText) => candidateText + callText).join(''), thought);
    const callPart = (call: FakeGeminiFunctionCall, index: number) => ({
      functionCall: { ...(call.id ? { id: call.id } : {}), name: call.name, args: call.args ?? {} },
      ...(index === 0 && signature ? { thoughtSignature: signature } : {}),
    });

    if (mode === 'json') {
      const candidates = texts.map((candidateText, index) => {
        const parts: Record<string, unknown>[] = [];
        if (thought) parts.push({ text: thought, thought: true, ...(thoughtSignature ? { thoughtSignature } : {}) });
        if (candidateText) parts.push({ text: candidateText, ...(calls.length === 0 && signature ? { thoughtSignature: signature } : {}) });
        if (behaviour.image) parts.push({ inlineData: behaviour.image });
        calls.forEach((call, callIndex) => parts.push(callPart(call, callIndex)));
        return {
          content: { parts, role: 'model' }, finishReason, index,
          ...(wantsLogprobs ? { logprobsResult: fakeLogprobsResult(candidateText, topLogprobs) } : {}),
        };
      });
      response.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
      response.end(JSON.stringify({ candidates, ...(usage ? { usageMetadata: usage } : {}), ...base }));
      return;
    }

    // Streams: one part per chunk; the last chunk carries the finish reason, the signature of a text
    // answer (on an empty text part, as Google sends it) and the final usage; earlier chunks the prompt count.
    const chunkParts: Record<string, unknown>[][] = [];
    for (const piece of splitText(thought, pieces)) chunkParts.push([{ text: piece, thought: true }]);
    if (thoughtSignature) chunkParts.push([{ text: '', thought: true, thoughtSignature }]);
    for (const piece of splitText(text, pieces)) chunkParts.push([{ text: piece }]);
    if (behaviour.image) chunkParts.push([{ inlineData: behaviour.image }]);
    calls.forEach((call, index) => chunkParts.push([callPart(call, index)]));
    if (calls.length === 0 && signature) chunkParts.push([{ text: '', thoughtSignature: signature }]);
    if (chunkParts.length === 0) chunkParts.push([{ text: '' }]);
    const chunks = chunkParts.map((parts, index) => {
      const last = index === chunkParts.length - 1;
      return {
        candidates: [{
          content: { parts, role: 'model' }, ...(last ? { finishReason } : {}), index: 0,
          // A chunk's logprobs are those of the tokens it carries (its text parts that are not thoughts).
          ...(wantsLogprobs ? { logprobsResult: fakeLogprobsResult(parts.filter((part) => !part.thought).map((part) => (typeof part.text === 'string' ? part.text : '')).join(''), topLogprobs) } : {}),
        }],
        ...(usage ? { usageMetadata: last ? usage : { promptTokenCount: usage.promptTokenCount, totalTokenCount: usage.promptTokenCount } } : {}),
        ...base,
      };
    });

    response.writeHead(200, {
      'content-type': mode === 'sse' ? 'text/event-stream' : 'application/json; charset=UTF-8',
      'x-content-type-options': 'nosniff',
    });
    response.flushHeaders();
    const write = (data: string) => new Promise<void>((resolve) => { response.write(data, () => resolve()); });
    const frame = (data: unknown, index: number) => (mode === 'sse' ? `data: ${JSON.stringify(data)}\r\n\r\n` : `${index === 0 ? '[' : ',\r\n'}${JSON.stringify(data)}`);
    for (let sent = 0; sent <= chunks.length; sent++) {
      if (behaviour.cutAfterChunks === sent) { socket.destroy(); return; }
      if (behaviour.stallAfterChunks === sent) return;
      if (behaviour.streamErrorAfterChunks === sent) {
        const error = { error: { code: 503, message: 'The model is overloaded. Please try again later.', status: 'UNAVAILABLE' } };
        await write(frame(error, sent));
        response.end(mode === 'array' ? ']' : undefined);
        return;
      }
      if (sent === chunks.length) break;
      if (behaviour.chunkDelayMs && sent > 0) await sleep(behaviour.chunkDelayMs);
      await write(frame(chunks[sent], sent));
    }
    response.end(mode === 'array' ? ']' : undefined);
  }

  const server = await listenOnLoopback(handle);
  return {
    url: `http://127.0.0.1:${server.port}/v1beta`,
    ...scripted.controls(),
    close: () => server.close(),
    signature: () => signer.sign(),
  };
}

/** Gemini's logprobsResult of a text: one chosen candidate per word-ish token, each step with `top` candidates. */
function fakeLogprobsResult(text: string, top: number): unknown {
  // Split at word ends: the tokens joined are the text (also across stream chunks).
  const tokens = text.match(/\s+|\S+\s*/g) ?? [];
  return {
    chosenCandidates: tokens.map((token, position) => ({ token, logProbability: -0.5 * (position + 1) })),
    topCandidates: tokens.map((token, position) => ({
      candidates: Array.from({ length: top }, (_, rank) => ({ token: rank === 0 ? token : `${token}~${rank}`, logProbability: -0.5 * (position + 1) - rank })),
    })),
  };
}
