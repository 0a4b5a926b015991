import { ProviderError, toProviderError, type AdapterStreamPart, type AdapterStreamReader, type AttemptSignal } from '../provider-adapter.js';
import { ServerSentEventReader } from '../http/server-sent-events.js';
import type { StreamingResponse } from '../http/streaming-request.js';
import { parseJsonAnswer } from '../http/json-answer.js';
import { parseOpenAIChunk } from './openai-api-types.js';
import { convertOpenAIStreamChoice } from './convert-openai-stream.js';
import { convertOpenAIUsage } from './convert-openai-usage.js';
import { openAIStreamError } from './openai-error.js';

/** Why a filteredAnswerFails adapter refuses a finished answer. */
export const FILTERED_ANSWER_MESSAGE = 'The answer was withheld by the provider\'s content filter.';

/**
 * A chat completions stream read in batches (AdapterStreamReader): each `next()` reads the body until
 * one read's SSE events made at least one part, and hands those parts over together. A delta thus costs
 * one promise of the body's read and none of its own (an async generator step per part was most of the
 * adapter's time per frame at 128 streams, docs/performance.md).
 */
export class OpenAIStreamReader implements AdapterStreamReader {
  private readonly events = new ServerSentEventReader();
  private response: StreamingResponse | undefined;
  private bodyEnded = false;
  private sawDone = false;
  private sawFinish = false;
  private usageSent = false;
  private closed = false;

  constructor(
    private readonly opening: Promise<StreamingResponse>,
    private readonly signal: AttemptSignal,
    private readonly filteredAnswerFails: boolean,
  ) {
    // A reader closed before the answer's headers came: the request is dropped once they come.
    opening.then((response) => { if (this.closed) this.destroy(response); }, () => undefined);
  }

  async next(): Promise<AdapterStreamPart[] | undefined> {
    let parts: AdapterStreamPart[] | undefined;
    try {
      const response = (this.response ??= await this.opening);
      const body = response.body;
      for (;;) {
        let event = this.events.next();
        if (event === undefined) {
          if (parts !== undefined) return parts;
          if (this.bodyEnded) break;
          const read = await body.next();
          if (!read.done) {
            this.events.push(read.value);
            continue;
          }
          this.bodyEnded = true;
          event = this.events.end();
          if (event === undefined) continue;
        }
        const data = event.data;
        // Read on to the end of the body after [DONE] so the keep-alive connection goes back to the pool.
        if (data === '[DONE]' || this.sawDone) { this.sawDone = true; continue; }
        const chunk = parseJsonAnswer(data, parseOpenAIChunk, 'stream chunk');
        if (chunk.error) throw openAIStreamError(chunk.error);
        for (const choice of chunk.choices ?? []) {
          const delta = convertOpenAIStreamChoice(choice);
          if (choice.finish_reason) {
            this.sawFinish = true;
            if (this.filteredAnswerFails && choice.finish_reason === 'content_filter') throw new ProviderError('content_filter', FILTERED_ANSWER_MESSAGE);
          }
          if (delta) (parts ??= []).push({ type: 'delta', delta });
        }
        const usage = convertOpenAIUsage(chunk.usage);
        if (usage && !this.usageSent) {
          this.usageSent = true;
          // The usage chunk names the answer like every chunk (Azure's first, its prompt filter verdict, does not).
          (parts ??= []).push({ type: 'usage', usage, response: { id: chunk.id ?? '', model: typeof chunk.model === 'string' ? chunk.model : '' } });
        }
      }
    } catch (error) {
      this.close();
      throw toProviderError(error, this.signal);
    }
    this.close();
    // A stream that ends without its finish (or [DONE]) was cut: the caller must not see it as complete.
    if (!this.sawDone && !this.sawFinish) throw new ProviderError('connection', 'stream ended before it finished');
    return undefined;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.response) this.destroy(this.response);
  }

  /** A body read to [DONE] is left to finish (its connection goes back to the pool); any other is dropped. */
  private destroy(response: StreamingResponse): void {
    if (!this.sawDone) response.body.destroy();
  }
}
