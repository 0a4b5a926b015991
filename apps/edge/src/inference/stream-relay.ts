import type { ChatRequest, Usage, UsageEvent } from '@gateway/proto';
import { Cancellation, errors } from '@gateway/platform';
import type { AnswerSink } from './answer-sink.js';
import type { EdgeContext } from '../context.js';
import type { ConvertedRequest, StreamWriter } from './dialect.js';
import { toApiError } from '../errors.js';
import { gatewayHeaders } from './gateway-headers.js';
import { ClientGoneError } from '../http.js';
import type { InferenceJob } from './pipeline-steps.js';
import { settleHandedOver } from './undelivered.js';

/**
 * SSE relay of Router.ChatStream for every dialect. Nothing is written until the first delta: a
 * failure before any content is still a normal HTTP error (the router fails over until then), thrown
 * to the pipeline, which releases the reservation — unless the dialect pings (messages), in which case
 * a slow first token commits the stream early and pings keep it alive. After the commit point a failure
 * ends the stream with the dialect's error events, never a clean close that looks like a complete
 * answer, and resolves: the pipeline settles with the usage that arrived.
 *
 * The router's `usage` message completes the caller's answer at once; the router ends its stream only
 * once the request's usage event is stored (ChatStreamResponse.settlement). Should the stream break in
 * between, the router may have died with the charge, so the edge settles the event it was handed.
 */
export async function relayStream(
  context: EdgeContext,
  sink: AnswerSink,
  job: InferenceJob,
  chat: ChatRequest,
  converted: ConvertedRequest,
  firstWriter: StreamWriter,
  /** A request with model fallbacks: the writer for the model the stream's start names, when it is another. */
  retarget?: (modelId: string) => StreamWriter,
): Promise<void> {
  let writer = firstWriter;
  const { requestId } = job;
  let usage: Usage | undefined;
  let settlement: UsageEvent | undefined;
  /** The caller has the whole answer (the router's `usage` came); what follows is the router confirming its usage stored. */
  let answered = false;
  /** Ends this stream's wait in context.unconfirmedStreams (set once answered). */
  let confirmed: (() => void) | undefined;
  let committed = false;
  let started = false;
  let startStrategy: string = job.strategy;
  let startDropped: readonly string[] = [];
  const commit = () => {
    sink.commit(gatewayHeaders(startStrategy, converted.droppedParams, converted.spelling?.clientSpelling(startDropped) ?? startDropped, converted.droppedTools));
    committed = true;
    job.commit(undefined);
    const opening = writer.open();
    if (opening) void sink.write(opening);
  };
  // Bound on silence: a router stream that neither sends nor ends (lost status, wedged peer) must not
  // hold the client and this request forever.
  const streamAbort = new Cancellation();
  const onClientGone = () => streamAbort.abort();
  job.signal.addEventListener('abort', onClientGone);
  let wentSilent = false;
  const idleTimer = new SilenceTimer(context.streamIdleTimeoutMs, () => {
    wentSilent = true;
    streamAbort.abort();
  });
  // Keep-alive of a dialect that has one: put off by every write, so it only fires into silence.
  const ping = writer.ping?.bind(writer);
  const pingTimer = ping
    ? new SilenceTimer(context.streamPingIntervalMs, () => {
        if (!committed) commit();
        void sink.write(ping());
      }, true)
    : undefined;
  try {
    for await (const message of context.chatRouter.chatStream({ chat, combinedStart: true }, { requestId, signal: streamAbort })) {
      idleTimer.touch();
      const event = message.event;
      if (!event) continue;
      if (event.$case === 'start') {
        started = true;
        // Before anything was written, a fallback model's stream gets a writer naming that model.
        if (retarget && !committed && event.value.modelId !== chat.modelId) writer = retarget(event.value.modelId);
        writer.start(event.value);
        startStrategy = event.value.routingStrategy || job.strategy;
        startDropped = event.value.droppedParams;
        // The first content may ride in the start (combinedStart): one message less before it reaches the client.
        if (event.value.firstDelta) {
          if (!committed) commit();
          pingTimer?.touch();
          const full = sink.write(writer.delta(event.value.firstDelta));
          if (full) await full;
        }
      } else if (event.$case === 'delta') {
        if (!started) throw new Error('router stream sent a delta before its start');
        if (!committed) commit();
        pingTimer?.touch();
        // Awaited only while the client's buffer is full: no turn of the microtask queue per delta.
        const full = sink.write(writer.delta(event.value));
        if (full) await full;
      } else if (event.$case === 'settlement') {
        settlement = event.value;
      } else if (event.$case === 'usage' && !answered) {
        if (!started) throw new Error('router stream sent its usage before its start');
        usage = event.value;
        if (!committed) commit();
        job.commit(usage);
        sink.end(writer.end(usage));
        answered = true;
        // A caller leaving now must not cut the router's stream: its end confirms the usage stored.
        job.signal.removeEventListener('abort', onClientGone);
        if (context.unconfirmedStreams) {
          const waiting = new Promise<void>((resolve) => { confirmed = resolve; });
          context.unconfirmedStreams.add(waiting);
          const done = confirmed!;
          confirmed = () => { context.unconfirmedStreams?.delete(waiting); done(); };
        }
      }
    }
  } catch (caught) {
    if (answered) {
      // The answer is with the caller; its usage event may have died with the router (or the router went
      // silent): settled here, once per request id whatever the router managed to store.
      context.logger.warn({ request_id: requestId, err: caught, handed_over: settlement !== undefined }, 'router stream broke after the answer ended, before its usage was confirmed stored; the edge settles it');
      if (settlement) settleHandedOver(context, settlement);
      return;
    }
    const error = wentSilent ? errors.internal(`router stream sent nothing for ${context.streamIdleTimeoutMs} ms`) : caught;
    if (wentSilent) context.logger.warn({ request_id: requestId }, 'router stream went silent; ending it');
    if (!committed) throw job.signal.aborted ? new ClientGoneError('client left before the first content') : error;
    if (job.signal.aborted) return;
    const apiError = toApiError(error);
    // Our own failures keep their stack; an upstream outage (503) is an ordinary event, logged without one.
    if (apiError.status === 500) context.logger.warn({ err: error, request_id: requestId }, 'stream failed after it was committed');
    else if (apiError.status > 500) context.logger.warn({ request_id: requestId, status: apiError.status, code: apiError.code }, 'stream failed after it was committed');
    // Settled with whatever usage arrived: a stream committed by pings but failed before any content
    // delivered nothing, and the router published no usage for it.
    job.commit(usage);
    job.failedAfterCommit = true;
    sink.end(writer.fail(apiError, usage));
    return;
  } finally {
    confirmed?.();
    idleTimer.stop();
    pingTimer?.stop();
    job.signal.removeEventListener('abort', onClientGone);
  }
  if (answered) return;
  if (!started) throw new Error('router stream ended without a start');
  if (!committed) commit();
  job.commit(usage);
  sink.end(writer.end(usage));
}

/**
 * Calls `onSilence` once `ms` passed without a `touch()` (and, `repeating`, again after each further `ms`
 * of silence). A touch per relayed message is a clock read; the timer is put back only when it fires
 * early, instead of a timer's refresh (its unlink and re-insertion) per message.
 */
class SilenceTimer {
  private touchedAt = Date.now();
  private timer: NodeJS.Timeout;
  private stopped = false;

  constructor(private readonly ms: number, private readonly onSilence: () => void, private readonly repeating = false) {
    this.timer = setTimeout(this.fire, ms);
  }

  touch(): void {
    this.touchedAt = Date.now();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private readonly fire = (): void => {
    const silentMs = Date.now() - this.touchedAt;
    if (silentMs < this.ms) {
      this.timer = setTimeout(this.fire, this.ms - silentMs);
      return;
    }
    this.onSilence();
    if (!this.repeating || this.stopped) return;
    this.touchedAt = Date.now();
    this.timer = setTimeout(this.fire, this.ms);
  };
}
