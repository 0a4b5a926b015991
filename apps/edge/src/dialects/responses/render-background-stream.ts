import { Cancellation, GatewayError, GrpcStatus, type Logger } from '@gateway/platform';
import type { BackgroundRun, BackgroundRunRecord, GetResponseResponse, StreamResponseEventsResponse, Usage } from '@gateway/proto';
import type { CatalogCache } from '../../catalog-cache.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { edgeErrors, toApiError, type ApiError } from '../../errors.js';
import type { AnswerSink } from '../../inference/answer-sink.js';
import type { AnswerContext } from '../../inference/dialect.js';
import { responsesDialect } from './responses-dialect.js';
import type { ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';
import { markStoredBody } from './stored-marks.js';
import type { EventSource, StreamRun } from './background-stream-types.js';

/*
 * A background response streamed (docs/stored-responses.md "Streaming a background response"): both
 * `POST /v1/responses` with `background` and `stream`, and `GET /v1/responses/{id}?stream=true&starting_after=N`.
 * The jobs service runs it and stores its records (each attempt's start and the router's stream
 * messages); the edge follows them (ResponsesStoreService.StreamResponseEvents) and renders OpenAI's
 * events as it renders a stream it relays itself. The rendering is a function of the records alone, so
 * every reader numbers the events alike and `starting_after` skips exactly the events it names:
 * `response.created` (queued) is 0, each attempt's start a `response.in_progress` (a second one after a
 * jobs crash: the output starts again from output_index 0 and the run is re-run), its deltas, and the
 * run's end (`response.completed`, or `response.failed` and `error`; a cancelled run's stream just
 * ends). Should the jobs service go away mid-stream, the edge calls again from the next record for up to
 * RECONNECT_WINDOW_MS without progress; past it the stream ends with an `error` event the client can
 * resume from (`starting_after` = the last sequence number it got).
 */

const RECONNECT_WINDOW_MS = 60_000;
const RECONNECT_DELAY_MS = 250;
/** A follow lasts at most this long (a run's own bound is shorter); then the client resumes. */
const FOLLOW_DEADLINE_MS = 60 * 60 * 1000;


/** The events of one run, numbered from its records. */
class RunRenderer {
  private writer: ResponsesStreamWriter;
  private began = false;
  private usage: Usage | undefined;

  constructor(
    private context: AnswerContext,
    private readonly body: ResponsesRequest,
    private readonly after: number,
    /** A model of the catalog by id: a fallback model's attempt is rendered naming it. */
    private readonly resolve: (modelId: string) => AnswerContext['model'] | undefined,
  ) {
    this.writer = new ResponsesStreamWriter(context, body, false, { firstSequence: 0, after });
  }

  opening(): string {
    return this.writer.lifecycle('response.created', 'queued');
  }

  record(record: BackgroundRunRecord): string {
    const chunk = record.chunk?.event;
    if (record.chunk === undefined) {
      // An attempt began: a later one starts the output anew, its events numbered after the earlier one's.
      if (this.began) this.writer = new ResponsesStreamWriter(this.context, this.body, false, { firstSequence: this.writer.nextSequence, after: this.after });
      this.began = true;
      this.usage = undefined;
      return this.writer.lifecycle('response.in_progress', 'in_progress');
    }
    if (chunk?.$case === 'start') {
      // A fallback model serves this attempt (model fallbacks): its events name that model from here on.
      const served = chunk.value.modelId !== this.context.model.id ? this.resolve(chunk.value.modelId) : undefined;
      if (served !== undefined) {
        this.context = { ...this.context, model: served };
        this.writer = new ResponsesStreamWriter(this.context, this.body, false, { firstSequence: this.writer.nextSequence, after: this.after });
      }
      this.writer.start(chunk.value);
      return chunk.value.firstDelta ? this.writer.delta(chunk.value.firstDelta) : '';
    }
    if (chunk?.$case === 'delta') return this.writer.delta(chunk.value);
    if (chunk?.$case === 'usage') this.usage = chunk.value;
    return '';
  }

  end(run: BackgroundRun): string {
    if (run.status === 'completed') return this.writer.end(this.usage, Number(run.endedAt) || undefined);
    if (run.status === 'failed') return this.writer.fail(failureOf(run.errorJson), this.usage);
    return '';
  }
}

function failureOf(text: string): ApiError {
  try {
    const parsed = JSON.parse(text) as Partial<ApiError>;
    return {
      status: typeof parsed.status === 'number' ? parsed.status : 500,
      type: typeof parsed.type === 'string' ? parsed.type : 'server_error',
      message: typeof parsed.message === 'string' ? parsed.message : 'The response failed.',
      ...(typeof parsed.code === 'string' ? { code: parsed.code } : {}),
    };
  } catch {
    return { status: 500, type: 'server_error', message: 'The response failed.' };
  }
}

/** The `error` event of a stream the edge could not go on with (the run goes on: resume it). */
function interrupted(responseId: string, error: ApiError): string {
  const message = `The stream of this response was interrupted (${error.message}); the response goes on: resume it with GET /v1/responses/${responseId}?stream=true&starting_after=<the last sequence_number received>.`;
  const nested = JSON.stringify({ type: 'server_error', code: 'stream_interrupted', message, param: null });
  return `event: error\ndata: {"type":"error","code":"stream_interrupted","message":${JSON.stringify(message)},"param":null,"error":${nested}}\n\n`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function backgroundStreamer(source: EventSource, catalogCache: CatalogCache, tags: ReasoningTags, logger: Logger): StreamRun {
  const rendererOf = (found: GetResponseResponse, responseId: string, after: number): RunRenderer => {
    const run = found.background;
    if (run === undefined) throw edgeErrors.invalidRequest('query.stream: only a background response can be streamed again; retrieve this one without `stream`.', 'stream', 'unsupported_parameter');
    const model = catalogCache.resolve(run.modelId);
    if (model === undefined) throw edgeErrors.notFound(`The model of response '${responseId}' is no longer served; retrieve it without \`stream\`.`);
    const queued = JSON.parse(found.responseJson) as { created_at?: unknown };
    const body = responsesDialect.parse(JSON.parse(run.requestJson));
    markStoredBody(body);
    const context = { requestId: responseId.slice('resp_'.length), model, tags, created: Number(queued.created_at) || 0, logger };
    return new RunRenderer(context, body, after, (modelId) => catalogCache.resolve(modelId));
  };

  return async (sink, { accountId, responseId, startingAfter, requestId, headers }) => {
    const abort = new Cancellation();
    sink.onClose(() => abort.abort());
    let renderer: RunRenderer | undefined;
    let nextSeq = 0;
    let failingSince = 0;
    for (;;) {
      try {
        for await (const message of source(accountId, responseId, nextSeq, requestId, abort, FOLLOW_DEADLINE_MS)) {
          failingSince = 0;
          const event = message.event;
          if (event?.$case === 'response') {
            if (renderer !== undefined) continue; // a call made again after a break
            renderer = rendererOf(event.value, responseId, startingAfter);
            sink.commit(headers);
            const opening = sink.write(renderer.opening());
            if (opening) await opening;
          } else if (event?.$case === 'record' && renderer) {
            nextSeq = event.value.seq + 1;
            const full = sink.write(renderer.record(event.value));
            if (full) await full;
          } else if (event?.$case === 'end' && renderer) {
            sink.end(renderer.end(event.value));
            return;
          }
        }
        // Ended without the run's end: the response was deleted meanwhile.
        sink.end('');
        return;
      } catch (error) {
        if (abort.aborted) return;
        if (renderer === undefined) {
          if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) throw edgeErrors.responseNotFound(responseId);
          if (error instanceof GatewayError && error.status === GrpcStatus.FAILED_PRECONDITION) {
            throw edgeErrors.invalidRequest(`query.stream: ${error.message}`, 'stream', 'unsupported_parameter');
          }
          throw error;
        }
        const gone = error instanceof GatewayError && (error.status === GrpcStatus.NOT_FOUND || error.status === GrpcStatus.FAILED_PRECONDITION);
        failingSince ||= Date.now();
        if (gone || Date.now() - failingSince > RECONNECT_WINDOW_MS) {
          logger.warn({ err: error, request_id: requestId, response: responseId }, 'background response stream ended before its run did');
          sink.end(gone ? '' : interrupted(responseId, toApiError(error)));
          return;
        }
        await sleep(RECONNECT_DELAY_MS);
      }
    }
  };
}
