import type { CallerSignal } from '@gateway/platform';
import type {
  ChatRequest,
  ChatResponse,
  ChatStreamResponse,
  EditImagesRequest,
  EditImagesResponse,
  EmbedRequest,
  EmbedResponse,
  GenerateImagesRequest,
  GenerateImagesResponse,
  ModerateRequest,
  ModerateResponse,
  SpeakRequest,
  SpeakResponse,
  TranscribeRequest,
  TranscribeResponse,
} from '@gateway/proto';
import { speak, transcribe } from './audio-requests.js';
import { chat, chatStream, streamChat, type ChatStreamSink } from './chat-requests.js';
import { embed, moderate } from './embeddings-moderations.js';
import { editImages, generateImages } from './image-requests.js';
import { RoutingCore, type RouterOptions } from './routing-core.js';

export type { RouterOptions } from './routing-core.js';
export type { ChatStreamSink } from './chat-requests.js';

/**
 * Routing domain: picks offers by strategy, calls adapters with failover, meters usage and publishes
 * the request's one UsageEvent. Plain class: the gRPC layer only decodes, calls and encodes. The work is
 * in the files beside it: candidates (resolution), failover (the one loop), reservation (the hold and
 * its usage event), stream-metering, reasoning-provenance, and one file per endpoint family.
 */
export class Router {
  private readonly core: RoutingCore;

  constructor(options: RouterOptions) {
    this.core = new RoutingCore(options);
  }

  /** Resolves once the usage of every stream that ended so far is stored (or handed to the background). */
  async settled(): Promise<void> {
    const settling = this.core.settling;
    while (settling.size > 0) await Promise.allSettled([...settling]);
  }

  chat(raw: ChatRequest, signal: CallerSignal): Promise<ChatResponse> {
    return chat(this.core, raw, signal);
  }

  /** `combinedStart`: the caller reads ChatStreamStart.first_delta (ChatStreamRequest.combined_start). */
  chatStream(raw: ChatRequest, signal: CallerSignal, options: { combinedStart?: boolean } = {}): AsyncGenerator<ChatStreamResponse> {
    return chatStream(this.core, raw, signal, options);
  }

  /** The same stream pushed into `sink` (the Exchange call): no async generator step per message. */
  streamChat(raw: ChatRequest, signal: CallerSignal, options: { combinedStart?: boolean }, sink: ChatStreamSink): Promise<void> {
    return streamChat(this.core, raw, signal, options, sink);
  }

  embed(raw: EmbedRequest, signal: CallerSignal): Promise<EmbedResponse> {
    return embed(this.core, raw, signal);
  }

  moderate(raw: ModerateRequest, signal: CallerSignal): Promise<ModerateResponse> {
    return moderate(this.core, raw, signal);
  }

  generateImages(raw: GenerateImagesRequest, signal: CallerSignal): Promise<GenerateImagesResponse> {
    return generateImages(this.core, raw, signal);
  }

  editImages(raw: EditImagesRequest, signal: CallerSignal): Promise<EditImagesResponse> {
    return editImages(this.core, raw, signal);
  }

  speak(raw: SpeakRequest, signal: CallerSignal): AsyncGenerator<SpeakResponse> {
    return speak(this.core, raw, signal);
  }

  transcribe(raw: TranscribeRequest, signal: CallerSignal): Promise<TranscribeResponse> {
    return transcribe(this.core, raw, signal);
  }
}
