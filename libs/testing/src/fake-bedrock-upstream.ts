import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Sha256 } from '@aws-crypto/sha256-js';
import { EventStreamCodec, type MessageHeaders } from '@smithy/eventstream-codec';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { checkConverseBody, createReasoningSigner, ValidationError } from './fake-bedrock-validation.js';
import { approximateTokens, listenOnLoopback, readBodyBytes, ScriptedBehaviours, sleep, splitText } from './fake-upstream-support.js';
import type { FakeUpstream, RecordedRequest } from './fake-upstream.js';

/**
 * Usage of one scripted answer in Bedrock's TokenUsage terms: `inputTokens` EXCLUDES the cache reads
 * and writes (as the real API reports it). `absent` leaves usage out (the JSON answer and the stream's
 * metadata event).
 */
export type FakeBedrockUsage = 'absent' | { inputTokens: number; outputTokens: number; cacheReadInputTokens?: number; cacheWriteInputTokens?: number };

export interface FakeBedrockToolCall {
  /** Default: `tooluse_fake<request>_<index>`. */
  id?: string;
  name: string;
  /** The input as JSON text, streamed verbatim in pieces; default: JSON of `input`. */
  arguments?: string;
  input?: unknown;
}

/**
 * One scripted answer of the fake Bedrock. A stream "chunk" is one contentBlockDelta frame:
 * `cutAfterChunks: N` delivers exactly N deltas (with the frames before them) and then destroys the
 * socket; `exceptionAfterChunks: N` sends an exception frame after N deltas and ends the body.
 */
export interface FakeBedrockBehaviour {
  latencyMs?: number;
  /** Destroy the socket instead of answering. */
  reset?: boolean;
  /** Never answer. */
  stall?: boolean;
  /** An HTTP error: this status with `errorType` in x-amzn-errortype and `{message}`. */
  status?: number;
  /** Default: the service's type for the status (ValidationException, AccessDeniedException, ...). */
  errorType?: string;
  errorMessage?: string;
  text?: string;
  toolCalls?: FakeBedrockToolCall[];
  /** Bedrock stopReason; default tool_use with tool calls, stop_sequence with `stopSequence`, else end_turn. */
  stopReason?: string;
  /** Reported in additionalModelResponseFields when the request asks for `/stop_sequence`. */
  stopSequence?: string;
  usage?: FakeBedrockUsage;
  /** Signed reasoning first: its text, `true` for a default text, `false` for none. Default: when thinking is enabled. */
  reasoning?: string | boolean;
  /** A redactedContent reasoning block (bytes only this instance accepts back). */
  redactedReasoning?: boolean;
  chunkCount?: number;
  chunkDelayMs?: number;
  cutAfterChunks?: number;
  stallAfterChunks?: number;
  exceptionAfterChunks?: number;
  /** `:exception-type` of that frame (default throttlingException). */
  exceptionType?: string;
}

export type FakeBedrockScript = FakeBedrockBehaviour | ((request: RecordedRequest) => FakeBedrockBehaviour);

export interface FakeBedrockUpstreamOptions {
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** When set, requests must carry it signed in x-amz-security-token. */
  sessionToken?: string;
}

export interface FakeBedrockUpstream extends Omit<FakeUpstream, 'script' | 'setFallback'> {
  /** The runtime endpoint (a provider's base_url). */
  url: string;
  region: string;
  script(...behaviours: FakeBedrockScript[]): void;
  setFallback(behaviour: FakeBedrockScript): void;
  /** The signature this instance gives (and accepts for) reasoning with this text. */
  signReasoning(text: string): string;
  /** Requests whose connection is still open (a stalled answer counts until the client closes it). */
  openRequests(): number;
}

const DEFAULT_TEXT = 'Hello from the fake upstream.';
const DEFAULT_REASONING = 'The user greets me; a short friendly answer fits.';
export const FAKE_BEDROCK_GUARDRAIL_TEXT = 'Sorry, the model cannot answer this question.';
const ERROR_NAMESPACE = 'http://internal.amazon.com/coral/com.amazon.bedrock/';
const ERROR_TYPES: Record<number, string> = {
  400: 'ValidationException',
  403: 'AccessDeniedException',
  404: 'ResourceNotFoundException',
  408: 'ModelTimeoutException',
  424: 'ModelErrorException',
  429: 'ThrottlingException',
  500: 'InternalServerException',
  503: 'ServiceUnavailableException',
};
const PATH = /^\/model\/([^/]+)\/(converse|converse-stream)$/;
/** Requests signed further off than this are refused (as AWS does). */
const MAX_CLOCK_SKEW_MS = 15 * 60 * 1000;
const codec = new EventStreamCodec(toUtf8, fromUtf8);

function stringHeaders(values: Record<string, string>): MessageHeaders {
  const headers: MessageHeaders = {};
  for (const [name, value] of Object.entries(values)) headers[name] = { type: 'string', value };
  return headers;
}

/** The real service pads each event payload with `p` (letters, to hide lengths); readers must ignore it. */
function padding(index: number): string {
  return 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'.slice(0, 5 + ((index * 7) % 40));
}

export function encodeBedrockEvent(eventType: string, payload: Record<string, unknown>, index = 0): Uint8Array {
  return codec.encode({
    headers: stringHeaders({ ':event-type': eventType, ':content-type': 'application/json', ':message-type': 'event' }),
    body: fromUtf8(JSON.stringify({ ...payload, p: padding(index) })),
  });
}

export function encodeBedrockException(exceptionType: string, message: string): Uint8Array {
  return codec.encode({
    headers: stringHeaders({ ':exception-type': exceptionType, ':content-type': 'application/json', ':message-type': 'exception' }),
    body: fromUtf8(JSON.stringify({ message })),
  });
}

/**
 * Amazon Bedrock Runtime Converse / ConverseStream on a real loopback HTTP server. Every request must be
 * SigV4-signed (service bedrock, this region) with this instance's credentials: the fake recomputes the
 * signature with @smithy/signature-v4 from what it received (the headers the request signed, the path
 * exactly as sent, the body's hash) and refuses a mismatch with 403 as the service does. Bodies are
 * checked like the service checks them (fake-bedrock-validation.ts); streams are the binary
 * application/vnd.amazon.eventstream with `p` padding in every payload and no start event for text.
 */
export async function startFakeBedrockUpstream(options: FakeBedrockUpstreamOptions = {}): Promise<FakeBedrockUpstream> {
  const region = options.region ?? 'us-east-1';
  const accessKeyId = options.accessKeyId ?? 'AKIAFAKEBEDROCK0001';
  const secretAccessKey = options.secretAccessKey ?? 'fake-secret-access-key';
  const scripted = new ScriptedBehaviours<FakeBedrockBehaviour>();
  let answered = 0;
  let open = 0;
  const signer = createReasoningSigner();
  const sigv4 = new SignatureV4({
    service: 'bedrock',
    region,
    sha256: Sha256,
    credentials: { accessKeyId, secretAccessKey, ...(options.sessionToken ? { sessionToken: options.sessionToken } : {}) },
  });

  function sendError(response: ServerResponse, status: number, type: string, message: string) {
    response.writeHead(status, { 'content-type': 'application/json', 'x-amzn-errortype': `${type}:${ERROR_NAMESPACE}`, 'x-amzn-requestid': `fake-${answered}` });
    response.end(JSON.stringify({ message }));
  }

  /** The refusal of a request whose signature does not hold, or undefined when it does. */
  async function signatureProblem(request: IncomingMessage, raw: Buffer): Promise<{ status: number; type: string; message: string } | undefined> {
    const authorization = request.headers.authorization ?? '';
    const match = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(authorization);
    if (!match) return { status: 403, type: 'MissingAuthenticationTokenException', message: 'Missing Authentication Token' };
    const [, keyId, , scopeRegion, service, signedHeaderList] = match;
    if (keyId !== accessKeyId) return { status: 403, type: 'UnrecognizedClientException', message: 'The security token included in the request is invalid.' };
    if (service !== 'bedrock' || scopeRegion !== region) {
      return { status: 403, type: 'InvalidSignatureException', message: `Credential should be scoped to a valid region and service 'bedrock' in '${region}'.` };
    }
    const amzDate = String(request.headers['x-amz-date'] ?? '');
    const dateMatch = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(amzDate);
    if (!dateMatch) return { status: 403, type: 'IncompleteSignatureException', message: 'Date must be in ISO-8601 basic format in x-amz-date.' };
    const signingDate = new Date(Date.UTC(+dateMatch[1]!, +dateMatch[2]! - 1, +dateMatch[3]!, +dateMatch[4]!, +dateMatch[5]!, +dateMatch[6]!));
    if (Math.abs(Date.now() - signingDate.getTime()) > MAX_CLOCK_SKEW_MS) return { status: 403, type: 'InvalidSignatureException', message: 'Signature expired.' };
    const signedNames = signedHeaderList!.split(';');
    if (!signedNames.includes('host') || !signedNames.includes('x-amz-date')) return { status: 403, type: 'IncompleteSignatureException', message: 'host and x-amz-date must be signed.' };
    if (options.sessionToken !== undefined) {
      if (request.headers['x-amz-security-token'] !== options.sessionToken || !signedNames.includes('x-amz-security-token')) {
        return { status: 403, type: 'UnrecognizedClientException', message: 'The security token included in the request is invalid.' };
      }
    }
    const bodyHash = createHash('sha256').update(raw).digest('hex');
    const claimedHash = request.headers['x-amz-content-sha256'];
    if (claimedHash !== undefined && claimedHash !== bodyHash) return { status: 400, type: 'ValidationException', message: 'The provided x-amz-content-sha256 header does not match the computed payload hash.' };
    const headers: Record<string, string> = {};
    for (const name of signedNames) {
      const value = request.headers[name];
      if (value === undefined) return { status: 403, type: 'IncompleteSignatureException', message: `Signed header ${name} is missing.` };
      headers[name] = Array.isArray(value) ? value.join(',') : value;
    }
    const [path, query] = (request.url ?? '').split('?');
    const host = headers.host ?? '';
    const recomputed = await sigv4.sign(
      new HttpRequest({
        method: request.method ?? 'POST',
        protocol: 'http:',
        hostname: host.split(':')[0]!,
        path: path!,
        query: Object.fromEntries(new URLSearchParams(query ?? '')),
        headers: { ...headers, 'x-amz-content-sha256': bodyHash },
        body: raw,
      }),
      // The body's hash always comes from the body received; it is signed only if the client signed it.
      { signingDate, ...(signedNames.includes('x-amz-content-sha256') ? {} : { unsignableHeaders: new Set(['x-amz-content-sha256']) }) },
    );
    // The signature over the headers the client signed (a hash header it did not sign is not ours to add).
    const expected = /Signature=([0-9a-f]{64})/.exec(String(recomputed.headers.authorization))?.[1];
    const recomputedNames = /SignedHeaders=([^,]+)/.exec(String(recomputed.headers.authorization))?.[1];
    if (recomputedNames !== signedHeaderList || expected !== match[6]) {
      return {
        status: 403,
        type: 'InvalidSignatureException',
        message: 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.',
      };
    }
    return undefined;
  }

  async function handle(request: IncomingMessage, response: ServerResponse) {
    open++;
    response.once('close', () => { open--; });
    const raw = await readBodyBytes(request);
    const text = raw.toString('utf8');
    let body: any;
    try { body = text ? JSON.parse(text) : undefined; } catch { body = undefined; }
    const recorded: RecordedRequest = { method: request.method ?? '', path: request.url ?? '', headers: request.headers, body, receivedAt: Date.now() };
    const behaviour = scripted.take(recorded);
    const number = ++answered;

    if (behaviour.latencyMs) await sleep(behaviour.latencyMs);
    if (behaviour.stall) return;
    if (behaviour.reset) { request.socket.destroy(); return; }

    const match = PATH.exec((request.url ?? '').split('?')[0]!);
    if (request.method !== 'POST' || !match) return sendError(response, 404, 'UnknownOperationException', `Unknown operation ${request.method} ${request.url}`);
    const signature = await signatureProblem(request, raw);
    if (signature) return sendError(response, signature.status, signature.type, signature.message);
    if (!/^application\/json/.test(request.headers['content-type'] ?? '')) return sendError(response, 415, 'UnsupportedMediaTypeException', 'content-type must be application/json');
    if (body === undefined) return sendError(response, 400, 'ValidationException', 'Malformed input request: the body is not JSON');
    let thinkingBudget: number | undefined;
    try {
      thinkingBudget = checkConverseBody(body, signer, decodeURIComponent(match[1]!)).thinkingBudget;
    } catch (error) {
      if (error instanceof ValidationError) return sendError(response, 400, 'ValidationException', error.message);
      throw error;
    }
    if (behaviour.status && behaviour.status >= 400) {
      return sendError(response, behaviour.status, behaviour.errorType ?? ERROR_TYPES[behaviour.status] ?? 'InternalServerException', behaviour.errorMessage ?? `fake upstream error ${behaviour.status}`);
    }
    const stream = match[2] === 'converse-stream';
    return answer(body, behaviour, number, stream, thinkingBudget !== undefined, response, request);
  }

  function usageFor(body: any, behaviour: FakeBedrockBehaviour, outputText: string) {
    if (behaviour.usage === 'absent') return undefined;
    const scripted = behaviour.usage ?? { inputTokens: approximateTokens(JSON.stringify(body.messages)), outputTokens: approximateTokens(outputText) };
    const read = scripted.cacheReadInputTokens ?? 0;
    const write = scripted.cacheWriteInputTokens ?? 0;
    return {
      inputTokens: scripted.inputTokens,
      outputTokens: scripted.outputTokens,
      totalTokens: scripted.inputTokens + scripted.outputTokens + read + write,
      ...(read || write ? { cacheReadInputTokens: read, cacheWriteInputTokens: write } : {}),
    };
  }

  async function answer(
    body: any, behaviour: FakeBedrockBehaviour, number: number, stream: boolean, thinking: boolean, response: ServerResponse, request: IncomingMessage,
  ) {
    const pieces = behaviour.chunkCount ?? 3;
    const toolCalls = behaviour.toolCalls ?? [];
    const guardrail = behaviour.stopReason === 'guardrail_intervened';
    const text = behaviour.text ?? (guardrail ? FAKE_BEDROCK_GUARDRAIL_TEXT : DEFAULT_TEXT);
    const reasoningText =
      typeof behaviour.reasoning === 'string' ? behaviour.reasoning
      : behaviour.reasoning === true || (behaviour.reasoning === undefined && thinking) ? DEFAULT_REASONING
      : undefined;
    // Each block: its final form (JSON answer), its start (toolUse only) and its deltas.
    const blocks: { final: Record<string, unknown>; start?: Record<string, unknown>; deltas: Record<string, unknown>[] }[] = [];
    if (reasoningText !== undefined) {
      const signature = signer.sign(reasoningText);
      blocks.push({
        final: { reasoningContent: { reasoningText: { text: reasoningText, signature } } },
        deltas: [...splitText(reasoningText, pieces).map((piece) => ({ reasoningContent: { text: piece } })), { reasoningContent: { signature } }],
      });
    }
    if (behaviour.redactedReasoning) {
      const data = signer.redacted();
      blocks.push({ final: { reasoningContent: { redactedContent: data } }, deltas: [{ reasoningContent: { redactedContent: data } }] });
    }
    if (toolCalls.length === 0 || behaviour.text) {
      blocks.push({ final: { text }, deltas: splitText(text, pieces).map((piece) => ({ text: piece })) });
    }
    let outputText = (reasoningText ?? '') + text;
    toolCalls.forEach((call, index) => {
      const toolUseId = call.id ?? `tooluse_fake${number}_${index}`;
      const inputJson = call.arguments ?? JSON.stringify(call.input ?? {});
      outputText += inputJson;
      blocks.push({
        final: { toolUse: { toolUseId, name: call.name, input: call.input ?? JSON.parse(inputJson) } },
        start: { toolUse: { toolUseId, name: call.name } },
        deltas: inputJson === '{}' ? [] : splitText(inputJson, pieces).map((piece) => ({ toolUse: { input: piece } })),
      });
    });
    const stopReason = behaviour.stopReason
      ?? (behaviour.stopSequence !== undefined ? 'stop_sequence' : toolCalls.length > 0 ? 'tool_use' : 'end_turn');
    const wantsStopSequence = Array.isArray(body.additionalModelResponseFieldPaths) && body.additionalModelResponseFieldPaths.includes('/stop_sequence');
    const responseFields = wantsStopSequence ? { additionalModelResponseFields: { stop_sequence: behaviour.stopSequence ?? null } } : {};
    const usage = usageFor(body, behaviour, outputText);
    const requestId = `fake-${number}`;

    if (!stream) {
      response.writeHead(200, { 'content-type': 'application/json', 'x-amzn-requestid': requestId });
      response.end(JSON.stringify({
        output: { message: { role: 'assistant', content: blocks.map((block) => block.final) } },
        stopReason,
        ...(usage ? { usage } : {}),
        metrics: { latencyMs: 42 },
        ...responseFields,
      }));
      return;
    }

    const frames: { bytes: Uint8Array; delta: boolean }[] = [];
    let frameIndex = 0;
    const event = (type: string, payload: Record<string, unknown>, delta = false) => frames.push({ bytes: encodeBedrockEvent(type, payload, frameIndex++), delta });
    event('messageStart', { role: 'assistant' });
    blocks.forEach((block, contentBlockIndex) => {
      if (block.start) event('contentBlockStart', { contentBlockIndex, start: block.start });
      for (const delta of block.deltas) event('contentBlockDelta', { contentBlockIndex, delta }, true);
      event('contentBlockStop', { contentBlockIndex });
    });
    event('messageStop', { stopReason, ...responseFields });
    event('metadata', { ...(usage ? { usage } : {}), metrics: { latencyMs: 42 } });

    response.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', 'x-amzn-requestid': requestId });
    response.flushHeaders();
    const write = (bytes: Uint8Array) => new Promise<void>((resolve) => { response.write(bytes, () => resolve()); });
    // Written a group at a time: the frames up to and including one delta, so a cut after N chunks
    // delivers exactly N deltas.
    let pending: Uint8Array[] = [];
    let sent = 0;
    for (const frame of frames) {
      pending.push(frame.bytes);
      if (!frame.delta) continue;
      const group = Buffer.concat(pending);
      pending = [];
      if (behaviour.cutAfterChunks === sent) { request.socket.destroy(); return; }
      if (behaviour.stallAfterChunks === sent) return;
      if (behaviour.exceptionAfterChunks === sent) {
        await write(encodeBedrockException(behaviour.exceptionType ?? 'throttlingException', 'Too many requests, please wait before trying again.'));
        response.end();
        return;
      }
      if (behaviour.chunkDelayMs && sent > 0) await sleep(behaviour.chunkDelayMs);
      await write(group);
      sent++;
    }
    if (behaviour.cutAfterChunks === sent) { request.socket.destroy(); return; }
    if (behaviour.exceptionAfterChunks === sent) {
      await write(encodeBedrockException(behaviour.exceptionType ?? 'throttlingException', 'Too many requests, please wait before trying again.'));
      response.end();
      return;
    }
    response.end(Buffer.concat(pending));
  }

  const server = await listenOnLoopback(handle);
  return {
    url: `http://127.0.0.1:${server.port}`,
    region,
    ...scripted.controls(),
    close: () => server.close(),
    signReasoning: (text) => signer.sign(text),
    openRequests: () => open,
  };
}
