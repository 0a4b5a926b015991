import { OpenAIAdapter } from '../openai/openai-adapter.js';
import type { ProviderAdapterV1 } from '../provider-adapter.js';
import { azureOpenAIHttpError } from './azure-openai-error.js';
import { azurePathBuilder } from './azure-openai-paths.js';

export interface AzureOpenAIAdapterOptions {
  providerId: string;
  /** The resource endpoint, e.g. https://my-resource.openai.azure.com */
  baseUrl: string;
  apiKey: string | undefined;
  /** A dated API version (deployment URLs); undefined or empty: the v1 API. */
  apiVersion: string | undefined;
  /** Static extra request headers (catalog `headers`); the adapter's own auth and content headers win. */
  headers?: Record<string, string> | undefined;
  /** Keep-alive connections per resource. */
  connections?: number;
}

type Capability<Name extends keyof ProviderAdapterV1> = NonNullable<ProviderAdapterV1[Name]>;

/**
 * Azure OpenAI: the OpenAI wire format (the OpenAI adapter's converters, streaming and error mapping),
 * with Azure's URLs, its `api-key` header, and filtered answers failing as content_filter (Azure
 * withholds output its content filter flags and finishes with `content_filter`). Azure serves no
 * moderations endpoint, so this adapter has no `moderate`: it is never a moderation candidate.
 */
export class AzureOpenAIAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'azure-openai';
  readonly providerId: string;
  readonly chat: Capability<'chat'>;
  readonly chatStream: Capability<'chatStream'>;
  readonly chatStreamReader: Capability<'chatStreamReader'>;
  readonly embed: Capability<'embed'>;
  readonly generateImages: Capability<'generateImages'>;
  readonly editImages: Capability<'editImages'>;
  readonly speak: Capability<'speak'>;
  readonly transcribe: Capability<'transcribe'>;
  private readonly inner: OpenAIAdapter;

  constructor(options: AzureOpenAIAdapterOptions) {
    this.providerId = options.providerId;
    const inner = new OpenAIAdapter({
      providerId: options.providerId,
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      headers: options.headers,
      ...(options.connections !== undefined ? { connections: options.connections } : {}),
      pathFor: azurePathBuilder(options.baseUrl, options.apiVersion || undefined),
      authHeaders: (apiKey) => ({ 'api-key': apiKey }),
      httpError: azureOpenAIHttpError,
      filteredAnswerFails: true,
    });
    this.inner = inner;
    // Bound once here: no wrapper call per request.
    this.chat = inner.chat.bind(inner);
    this.chatStream = inner.chatStream.bind(inner);
    this.chatStreamReader = inner.chatStreamReader.bind(inner);
    this.embed = inner.embed.bind(inner);
    this.generateImages = inner.generateImages.bind(inner);
    this.editImages = inner.editImages.bind(inner);
    this.speak = inner.speak.bind(inner);
    this.transcribe = inner.transcribe.bind(inner);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
