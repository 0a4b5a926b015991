import { ErrorReason, GatewayError, type CallSettings } from '@gateway/platform';
import type { ChatRequest, ChatResponse, ChatStreamRequest, ChatStreamResponse, Usage } from '@gateway/proto';
import type { Admission, AdmissionRequest, AdmissionTicket } from '../inference/admission.js';
import type { VerifiedApiKey } from '../inference/auth-cache.js';
import type { ChatRouter } from '../inference/router-exchange.js';
import type { RequestTracker } from './request-tracker.js';

/**
 * The admission, observed (CONVENTIONS 8: a cross-cutting concern wraps the interface, the pipeline
 * does not change): notes the request's model for its access line and counts rate-limit refusals.
 */
export class ObservedAdmission implements Admission {
  constructor(private readonly inner: Admission, private readonly tracker: RequestTracker) {}

  admit(request: AdmissionRequest): Promise<AdmissionTicket> {
    this.tracker.noteModel(request.requestId, request.model.id);
    return this.inner.admit(request).catch(this.onRefused);
  }

  private readonly onRefused = (error: unknown): never => {
    if (error instanceof GatewayError && error.reason === ErrorReason.ERROR_REASON_RATE_LIMITED) this.tracker.rateLimited();
    throw error;
  };

  release(request: { requestId: string; key: VerifiedApiKey }): Promise<void> {
    return this.inner.release(request);
  }

  settle(request: { requestId: string; usage: Usage | undefined }): void {
    this.inner.settle(request);
  }

  stop(): Promise<void> {
    return this.inner.stop();
  }
}

/**
 * The chat router, observed: notes which provider served the request (the answer, or the stream's
 * start). The stream is passed through with one look at each message until the start has been seen.
 */
export class ObservedChatRouter implements ChatRouter {
  constructor(private readonly inner: ChatRouter, private readonly tracker: RequestTracker) {}

  async chat(request: ChatRequest, settings: CallSettings): Promise<ChatResponse> {
    const answer = await this.inner.chat(request, settings);
    this.tracker.noteProvider(request.context?.requestId ?? settings.requestId ?? '', answer.providerId);
    return answer;
  }

  chatStream(request: ChatStreamRequest, settings: CallSettings): AsyncIterable<ChatStreamResponse> {
    const stream = this.inner.chatStream(request, settings);
    const requestId = request.chat?.context?.requestId ?? settings.requestId ?? '';
    const tracker = this.tracker;
    return {
      [Symbol.asyncIterator]() {
        const iterator = stream[Symbol.asyncIterator]();
        let started = false;
        const look = (result: IteratorResult<ChatStreamResponse>) => {
          const event = result.done ? undefined : result.value.event;
          if (event?.$case === 'start') {
            started = true;
            tracker.noteProvider(requestId, event.value.providerId);
          }
          return result;
        };
        return {
          next: () => (started ? iterator.next() : iterator.next().then(look)),
          return: (value?: unknown) => iterator.return?.(value) ?? Promise.resolve({ done: true as const, value: undefined }),
          throw: (error?: unknown) => iterator.throw?.(error) ?? Promise.reject(error),
        };
      },
    };
  }
}
