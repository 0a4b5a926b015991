import type { Pool } from 'undici';
import { ProviderError, toProviderError, type AdapterChatRequest, type AdapterChatResult, type AdapterStreamPart, type AttemptSignal, type ProviderAdapterV1 } from '../provider-adapter.js';
import { createProviderPool } from '../http/provider-pool.js';
import {
  bedrockStreamEventSchemas,
  parseBedrockAnswer,
  parseBedrockStreamEvent,
  type BedrockStreamEvent,
  type BedrockStreamEventType,
} from './bedrock-api-types.js';
import { bedrockStreamException } from './bedrock-error.js';
import { EventStreamDecoder } from './bedrock-eventstream.js';
import { bedrockBufferedRequest, bedrockStreamingRequest } from './bedrock-http.js';
import { BedrockSigner, bedrockCredentials, type BedrockCredentialOptions } from './bedrock-signer.js';
import { convertBedrockAnswer } from './convert-bedrock-answer.js';
import { BedrockStreamConverter } from './convert-bedrock-stream.js';
import { convertBedrockUsage } from './convert-bedrock-usage.js';
import { convertToBedrockRequest } from './convert-to-bedrock-request.js';
import { parseJsonAnswer } from '../http/json-answer.js';

export interface BedrockAdapterOptions extends BedrockCredentialOptions {
  providerId: string;
  region: string;
  /** The runtime endpoint; empty: `https://bedrock-runtime.{region}.amazonaws.com`. */
  baseUrl?: string | undefined;
  /** Static extra request headers (catalog `headers`), sent unsigned; the adapter's own headers win. */
  headers?: Record<string, string> | undefined;
  connections?: number;
}

const JSON_TYPE = 'application/json';
const EVENTSTREAM_TYPE = 'application/vnd.amazon.eventstream';

/** Percent-encodes a model id for one path segment, `!'()*` included (ARNs carry ':' and '/'). */
function encodeModelId(modelId: string): string {
  return encodeURIComponent(modelId).replace(/[!'()*]/g, (character) => `%${character.charCodeAt(0).toString(16).toUpperCase()}`);
}

export function defaultBedrockBaseUrl(region: string): string {
  return `https://bedrock-runtime.${region}.amazonaws.com`;
}

/** Amazon Bedrock Runtime Converse / ConverseStream (`kind: bedrock`), SigV4-signed. Chat only. */
export class BedrockAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'bedrock';
  readonly providerId: string;
  private readonly pool: Pool;
  private readonly signer: BedrockSigner;
  private readonly basePath: string;
  private readonly extraHeaders: Record<string, string>;
  private readonly hasExtraHeaders: boolean;
  /** `/model/{encoded id}` per upstream model, built once. */
  private readonly modelPaths = new Map<string, string>();

  constructor(options: BedrockAdapterOptions) {
    this.providerId = options.providerId;
    const url = new URL(options.baseUrl || defaultBedrockBaseUrl(options.region));
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.pool = createProviderPool(url.origin, options.connections);
    this.signer = new BedrockSigner(url, options.region, bedrockCredentials(options));
    this.extraHeaders = { ...options.headers };
    this.hasExtraHeaders = Object.keys(this.extraHeaders).length > 0;
  }

  private modelPath(modelId: string): string {
    let path = this.modelPaths.get(modelId);
    if (path === undefined) {
      path = `${this.basePath}/model/${encodeModelId(modelId)}`;
      this.modelPaths.set(modelId, path);
    }
    return path;
  }

  private async signedHeaders(path: string, body: string, accept: string): Promise<Record<string, string>> {
    try {
      const signed = await this.signer.sign(path, body, accept);
      return this.hasExtraHeaders ? { ...this.extraHeaders, ...signed } : signed;
    } catch (error) {
      // The credential chain found nothing usable (or a refresh failed): our configuration, not the request's.
      throw new ProviderError('misconfigured', `AWS credentials unavailable: ${(error as Error).message}`, 0, { cause: error });
    }
  }

  /** The body, and what it goes without reported to the attempt (AttemptSignal.parametersUnsent). */
  private convert(request: AdapterChatRequest, signal: AttemptSignal) {
    const converted = convertToBedrockRequest(request.chat, {
      upstreamModel: request.upstreamModel,
      providerId: this.providerId,
      modelMaxOutputTokens: request.modelMaxOutputTokens,
    });
    if (converted.unsent.length > 0) signal.parametersUnsent?.(converted.unsent);
    return converted;
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    const { body, tools } = this.convert(request, signal);
    const path = `${this.modelPath(request.upstreamModel)}/converse`;
    const text = JSON.stringify(body);
    const headers = await this.signedHeaders(path, text, JSON_TYPE);
    const answer = await bedrockBufferedRequest(this.pool, { method: 'POST', path, headers, body: text }, signal);
    const parsed = parseJsonAnswer(answer, parseBedrockAnswer);
    return { choices: [convertBedrockAnswer(parsed, this.providerId, tools)], usage: convertBedrockUsage(parsed.usage) };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    const { body, tools } = this.convert(request, signal);
    const path = `${this.modelPath(request.upstreamModel)}/converse-stream`;
    const text = JSON.stringify(body);
    const headers = await this.signedHeaders(path, text, EVENTSTREAM_TYPE);
    const response = await bedrockStreamingRequest(this.pool, { method: 'POST', path, headers, body: text }, signal);
    const converter = new BedrockStreamConverter(tools);
    const decoder = new EventStreamDecoder();
    try {
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        decoder.push(chunk);
        for (let frame = decoder.next(); frame !== undefined; frame = decoder.next()) {
          // Read on to the end of the body after metadata so the keep-alive connection goes back to the pool.
          if (converter.done) continue;
          if (frame.messageType === 'exception' || frame.messageType === 'error') throw bedrockStreamException(frame.name, frame.payload);
          // An event type of a newer API version (or a message type we do not know) is skipped.
          if (frame.messageType !== 'event' || !Object.hasOwn(bedrockStreamEventSchemas, frame.name)) continue;
          const type = frame.name as BedrockStreamEventType;
          let json: unknown;
          try {
            json = JSON.parse(frame.payload);
          } catch {
            throw new ProviderError('connection', `stream event ${type} is not JSON`);
          }
          const parsed = parseBedrockStreamEvent(type, json);
          if (!parsed.success) throw new ProviderError('connection', `malformed stream event ${type}: ${parsed.error.message.slice(0, 300)}`);
          const delta = converter.accept({ type, payload: parsed.data } as BedrockStreamEvent);
          if (delta) yield { type: 'delta', delta };
          if (converter.done && converter.usage) yield { type: 'usage', usage: converter.usage };
        }
      }
      decoder.end();
    } catch (error) {
      throw toProviderError(error, signal);
    } finally {
      if (!converter.done) response.body.destroy();
    }
    // A stream that ends before messageStop was cut: the caller must not see it as complete.
    if (!converter.complete) throw new ProviderError('connection', 'stream ended before messageStop');
    // messageStop without metadata: complete, without usage.
    if (!converter.done) yield { type: 'delta', delta: converter.finish() };
  }

  async close(): Promise<void> {
    await this.pool.close().catch(() => undefined);
  }
}
