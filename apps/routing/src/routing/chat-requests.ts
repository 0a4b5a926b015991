import { Cancellation, CANCELLED_FINISH_REASON, ErrorReason, GatewayError, GrpcStatus, type CallerSignal } from '@gateway/platform';
import { UsageOutcome, type ChatRequest, type ChatResponse, type ChatStreamDelta, type ChatStreamResponse, type Usage, type UsageEvent } from '@gateway/proto';
import { answerChoices } from '../observability/gen-ai-content.js';
import type { GenAiResponse } from '../observability/gen-ai-telemetry.js';
import { ProviderError, streamReader, type AdapterChatRequest, type AdapterChatResult, type AdapterResponseIdentity, type AdapterStreamPart, type AdapterStreamReader } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { StreamCheckpoint } from '../usage/stream-checkpoints.js';
import { meterUsage, type DeliveredOutput } from '../usage/token-counter.js';
import type { AttemptControl } from './attempt-control.js';
import { attemptFailure, type HealthSample, type ServedAttempt } from './attempt-recorder.js';
import { pinServed, type PreparedRequest } from './candidates.js';
import { NO_UPSTREAM_RETRY_AFTER_SECONDS, verdictError, type FailoverPolicy } from './failover.js';
import { learnedRequestFor } from './learned-requests.js';
import { newCompletionId } from './request-hot-path.js';
import type { Reservation } from './reservation.js';
import type { RoutingCore } from './routing-core.js';
import { DeliveredContent } from './stream-metering.js';
import { chatInsurance } from './zero-completion.js';

// Chat completions, unary and streamed: the canonical chat request of every dialect (chat, messages, responses).

export function chat(core: RoutingCore, raw: ChatRequest, signal: CallerSignal): Promise<ChatResponse> {
  return core.admitted(raw.context, raw.modelId, raw.endpoint || 'chat.completions', (hold) => chatHolding(core, raw, signal, hold));
}

async function chatHolding(core: RoutingCore, raw: ChatRequest, signal: CallerSignal, hold: Reservation): Promise<ChatResponse> {
  const prepared = core.prepare(raw, hold);
  // What the serving attempt's request went without (attempts run one after another: the last one set serves).
  let dropped: readonly string[] = [];
  let served;
  try {
    served = await core.withFailover(prepared, signal, async (candidate, attemptSignal) => {
      const learned = learnedRequestFor(core.options, prepared, candidate);
      dropped = learned.dropped;
      const answer = await candidate.adapter.chat(learned.request, attemptSignal);
      hold.firstByteAt = Date.now();
      // Metered here, once the attempt answered, so the loop records its health with the output tokens.
      return { answer, usage: meterAnswer(prepared, answer) };
    }, CHAT_POLICY);
  } catch (error) {
    // The caller left while an upstream had the prompt: that prompt is charged (nobody reads the error).
    if (hold.promptSentTo !== '') chargeSentPrompt(prepared, hold, false);
    throw error;
  }
  const { result: { answer: result, usage }, candidate } = served;
  dropped = withUnsent(dropped, served.control.unsent);
  const providerId = candidate.offer.providerId;
  pinServed(core.options, prepared, providerId);
  // The generation record's facts, and zero-completion insurance (nothing delivered: nothing charged).
  hold.finishReason = result.choices.find((choice) => choice.finishReason !== '')?.finishReason ?? '';
  hold.nativeUsage = result.usage;
  hold.insuredReason = chatInsurance(usage, hold.finishReason);
  await core.recordServed(prepared, providerId, usage);
  return {
    id: newCompletionId(),
    modelId: prepared.model.id,
    created: BigInt(Math.floor(Date.now() / 1000)),
    choices: result.choices,
    usage,
    providerId,
    routingStrategy: prepared.strategyName,
    // Parameters this provider × upstream model refused before (the learned capability map), and those
    // its converter could not send.
    droppedParams: [...dropped],
    // The serving model's prices, as the usage event carries them (the edge shows the charge as usage.cost).
    prices: prepared.model.pricing,
  };
}

/**
 * Where a stream's messages go, in order: the Exchange call (grpc/exchange.ts) or chatStream's reader.
 * A message handed to `send` counts as delivered (its content is charged).
 */
export interface ChatStreamSink {
  /** Takes a message; false: the receiver holds enough, the stream sends on only after `drained()`. */
  send(message: ChatStreamResponse): boolean;
  /** Resolves once the receiver takes more, or once the caller went away. */
  drained(): Promise<void>;
}

/**
 * A chat stream, pushed into `sink`. Failover (withFailover) lasts until the first content: each attempt
 * reads parts until its first delta (or its end: an empty stream is still an answer). After that a
 * provider failure ends the stream with an error, and what was delivered is charged. `combinedStart`: the
 * caller reads ChatStreamStart.first_delta (ChatStreamRequest.combined_start). Resolves once the stream
 * ended (its usage stored); rejects with the error that ends it.
 *
 * Pushed, not an async generator: a delta from the upstream crosses no generator step between the
 * adapter's read and the sink (four stacked generators were ~a quarter of routing's time per frame).
 */
export async function streamChat(core: RoutingCore, raw: ChatRequest, signal: CallerSignal, options: { combinedStart?: boolean }, sink: ChatStreamSink): Promise<void> {
  // Exactly one usage event per request: the hold ends once, FAILED or SERVED (reservation.ts); what
  // nothing ended is released as this generator ends (RoutingCore.admittedStream).
  using hold = core.admittedStream(raw.context, raw.modelId, raw.endpoint || 'chat.completions', true);
  let servingProvider = '';
  let reported: Usage | undefined;
  // How the provider named its answer (its usage part carries it): for the attempt's span only.
  let identity: AdapterResponseIdentity | undefined;
  const delivered = new DeliveredContent();
  let checkpoint: StreamCheckpoint | undefined;
  let active: { control: AttemptControl; reader: AdapterStreamReader } | undefined;
  // The serving attempt, handed over by the failover loop: ended (and recorded) once with `finish`.
  let attempt: ServedAttempt<FirstStreamPart> | undefined;
  let prepared: PreparedRequest | undefined;
  const meter = () => meterUsage(reported, prepared!.request.messages, prepared!.request.tools, delivered.output);
  try {
    const target = (prepared = core.prepare(raw, hold));
    const { logger } = target;
    // What the serving attempt's request went without (attempts run one after another: the last one set serves).
    let dropped: readonly string[] = [];
    let opened;
    try {
      opened = await core.withFailover(target, signal, (candidate, control) => {
        const learned = learnedRequestFor(core.options, target, candidate);
        dropped = learned.dropped;
        return firstStreamPart(candidate, learned.request, control);
      }, SENT_STREAM_PROMPT_CHARGED);
    } catch (error) {
      // The caller went away before any content: the stream just ends. Its hold is released, or, when an
      // upstream already had the prompt, that prompt is charged.
      if (hold.promptSentTo !== '') chargeSentPrompt(target, hold, true);
      if (signal.aborted) return;
      throw error;
    }
    attempt = opened;
    const { result: first, candidate, durationMs: ttftMs, control } = opened;
    dropped = withUnsent(dropped, control.unsent);
    const providerId = (servingProvider = candidate.offer.providerId);
    pinServed(core.options, target, providerId);
    const reader = first.reader;
    reported = hold.nativeUsage = first.reported;
    identity = first.response;
    const firstPartAt = (hold.firstByteAt = Date.now());
    const start = (firstDelta?: ChatStreamDelta): ChatStreamResponse => ({
      event: {
        $case: 'start',
        value: {
          id: newCompletionId(),
          modelId: target.model.id,
          created: BigInt(Math.floor(Date.now() / 1000)),
          providerId,
          routingStrategy: target.strategyName,
          droppedParams: [...dropped],
          prices: target.model.pricing,
          ...(firstDelta ? { firstDelta } : {}),
        },
      },
    });
    /**
     * The stream's SERVED usage, published; `stored` settles once the bus has it or, when the publish
     * failed, the background does (the content already reached the caller, so it is retried apart). The
     * checkpoint is retired only once the final event is stored (bus or outbox), never before.
     */
    const settleServed = (): { usage: Usage; event: UsageEvent | undefined; stored: Promise<void> } => {
      const usage = meter();
      hold.insuredReason = chatInsurance(usage, hold.finishReason);
      const settled = hold.settleStream(providerId, usage, checkpoint, (error) =>
        logger.error({ err: error }, 'usage event of a stream not stored yet; retrying in the background'));
      return { usage, event: settled?.event, stored: settled?.stored ?? Promise.resolve() };
    };
    if (!first.delta) {
      // A complete stream with nothing in it is still this provider's answer.
      control.dispose();
      if (!sink.send(start())) await sink.drained();
    } else {
      active = { control, reader };
      try {
        delivered.add(first.delta);
        if (first.delta.finishReason !== '') hold.finishReason = first.delta.finishReason;
        // From here the caller has content: its usage must survive a crash (a Set insert; no disk unless
        // the stream is still running at the first checkpoint). The event is built on the checkpoint
        // timer, never on this path.
        checkpoint = core.options.usage.trackStream(delivered, () =>
          hold.event(UsageOutcome.USAGE_OUTCOME_SERVED, providerId, delivered.usageSoFar(reported, target.request), true));
        // A caller that reads first_delta gets the first content in the start: one message (one HTTP/2
        // write: grpc-js writes each message after the previous one's callback) less before it.
        if (options.combinedStart) {
          if (!sink.send(start(first.delta))) await drained(sink, signal);
        } else {
          if (!sink.send(start())) await drained(sink, signal);
          if (!sink.send(deltaMessage(first.delta))) await drained(sink, signal);
        }
        // The parts that came in the first delta's read, then one read's parts at a time.
        let parts: AdapterStreamPart[] | undefined = first.rest;
        for (;;) {
          if (parts === undefined) {
            control.arm();
            parts = await reader.next();
            control.disarm();
            if (parts === undefined) break;
          }
          for (const part of parts) {
            if (part.type === 'usage') { reported = hold.nativeUsage = part.usage; identity = part.response ?? identity; delivered.changes++; continue; }
            delivered.add(part.delta);
            if (part.delta.finishReason !== '') hold.finishReason = part.delta.finishReason;
            // A full receiver: nothing more is counted as delivered until it takes more (or the caller left).
            if (!sink.send(deltaMessage(part.delta))) await drained(sink, signal);
          }
          parts = undefined;
        }
        control.dispose();
        active = undefined;
      } catch (error) {
        control.dispose();
        active = undefined;
        reader.close();
        // Typed errors are the caller's answer as they are (the attempt ends with them: its span and health
        // sample). The finally charges what was delivered.
        if (error instanceof GatewayError) {
          // A verdict on the request, not the provider's failure: counted in the metric, not in health.
          opened.finish('failed_after_content', new ProviderError('rejected', error.message, 0, { cause: error }), { usage: meter(), finishReasons: ERROR_FINISH, chunks: delivered.changes, id: identity?.id, model: identity?.model, output: () => delivered.choices(ERROR_FINISH[0]) });
          throw error;
        }
        if (signal.aborted) { hold.cancelled = true; opened.finish('cancelled'); return; }
        const failure = attemptFailure(error, control);
        opened.finish('failed_after_content', failure, { usage: meter(), finishReasons: ERROR_FINISH, chunks: delivered.changes, id: identity?.id, model: identity?.model, output: () => delivered.choices(ERROR_FINISH[0]) });
        logger.warn({ provider: providerId, failure: failure.message }, 'stream failed after content was sent');
        await settleServed().stored;
        if (!failure.retryable) throw verdictError(failure);
        throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'The upstream provider failed during the stream.', {
          retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
          cause: failure,
        });
      }
    }
    // A complete stream's settlement and usage messages go out with its last deltas (one write to the
    // edge), which ends the caller's answer at once; the stream itself ends only once the publish is
    // stored (bus ack, or the outbox after a failed publish). Until that end the edge keeps the event: a
    // stream that breaks in between (this replica killed before the ack, and the stream too young for a
    // checkpoint) is settled by the edge (LedgerService.SettleUsage), so its charge is never lost.
    const { usage, event, stored } = settleServed();
    core.settling.add(stored);
    void stored.finally(() => core.settling.delete(stored));
    opened.finish('success', { ttftMs, outputTokens: usage.outputTokens, durationMs: Date.now() - firstPartAt },
      { usage, finishReasons: hold.finishReason === '' ? undefined : [hold.finishReason], chunks: delivered.changes, id: identity?.id, model: identity?.model,
        output: () => delivered.choices(hold.finishReason) });
    if (event) sink.send({ event: { $case: 'settlement', value: event } });
    sink.send({ event: { $case: 'usage', value: usage } });
    await stored;
  } finally {
    // The consumer stopped reading mid-stream, or the caller's signal ended it: a cancellation.
    const cancelled = active !== undefined || signal.aborted;
    if (active) {
      // The consumer stopped reading mid-stream: stop the upstream request too.
      active.control.abort(new Error('caller went away'));
      active.control.dispose();
      active.reader.close();
    }
    // The serving attempt ends with its caller (a no-op once it ended otherwise).
    if (cancelled) attempt?.finish('cancelled');
    // Content reached a caller who went away (cancellation or the consumer stopped reading) before the
    // end: SERVED for what it received. Anything else still open is released by the hold's scope.
    if (servingProvider && hold.open) {
      const usage = meter();
      hold.cancelled = cancelled;
      hold.insuredReason = chatInsurance(usage, hold.finishReason);
      hold.settleInBackground(servingProvider, usage, true, checkpoint);
    }
  }
}

/**
 * The same stream, read as an async generator (Router.ChatStream's own RPC, tests): one message per
 * `next()`, in lockstep as a generator would run (the stream sends its next message only once the reader
 * came back for more), and a reader that stops early is a caller who went away.
 */
export async function* chatStream(core: RoutingCore, raw: ChatRequest, signal: CallerSignal, options: { combinedStart?: boolean } = {}): AsyncGenerator<ChatStreamResponse> {
  const pulled = new PulledStream(signal);
  const running = streamChat(core, raw, pulled.stop, options, pulled).then(() => pulled.end(undefined), (error: unknown) => pulled.end({ error }));
  try {
    for (;;) {
      const message = pulled.queue.shift();
      if (message !== undefined) {
        yield message;
        // The reader is back for more.
        if (pulled.queue.length === 0) pulled.wakeSender();
        continue;
      }
      if (pulled.ended) {
        if (pulled.failure) throw pulled.failure.error;
        return;
      }
      await pulled.arrival();
    }
  } finally {
    if (!pulled.ended) pulled.stop.abort(new Error('the stream\'s reader stopped'));
    pulled.wakeSender();
    await running;
    pulled.dispose();
  }
}

/** chatStream's sink: a queue its generator reads, with the caller's signal and an early stop in one cancellation. */
class PulledStream implements ChatStreamSink {
  /** The stream's signal: the caller's abort, or the generator's reader stopping early. */
  readonly stop = new Cancellation();
  readonly queue: ChatStreamResponse[] = [];
  ended = false;
  failure: { error: unknown } | undefined;
  private onArrival: (() => void) | undefined;
  private onTaken: (() => void) | undefined;
  private readonly onCallerAbort = () => this.stop.abort(this.caller.reason);

  constructor(private readonly caller: CallerSignal) {
    if (caller.aborted) this.stop.abort(caller.reason);
    else caller.addEventListener('abort', this.onCallerAbort, { once: true });
  }

  send(message: ChatStreamResponse): boolean {
    this.queue.push(message);
    this.wakeReader();
    return false;
  }

  drained(): Promise<void> {
    if (this.queue.length === 0 || this.stop.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      this.onTaken = resolve;
    });
  }

  end(failure: { error: unknown } | undefined): void {
    this.ended = true;
    this.failure = failure;
    this.wakeReader();
  }

  arrival(): Promise<void> {
    return new Promise((resolve) => {
      this.onArrival = resolve;
    });
  }

  wakeSender(): void {
    const taken = this.onTaken;
    this.onTaken = undefined;
    taken?.();
  }

  dispose(): void {
    this.caller.removeEventListener('abort', this.onCallerAbort);
  }

  private wakeReader(): void {
    const arrival = this.onArrival;
    this.onArrival = undefined;
    arrival?.();
  }
}

/** The serving attempt's learned drops and what its converter could not send, each once (sorted). */
function withUnsent(learned: readonly string[], unsent: readonly string[]): readonly string[] {
  if (unsent.length === 0) return learned;
  return [...new Set([...learned, ...unsent])].sort();
}

/** A served chat answer's health sample: its output tokens (as metered) over the attempt's duration. */
const CHAT_POLICY: FailoverPolicy<{ answer: AdapterChatResult; usage: Usage }> = {
  chargesSentPrompt: true,
  sample: (served, durationMs): HealthSample => ({ outputTokens: served.usage.outputTokens, durationMs }),
  response: (served): GenAiResponse => ({
    usage: served.usage, finishReasons: served.answer.choices.map((choice) => choice.finishReason), id: served.answer.response?.id, model: served.answer.response?.model,
    output: () => answerChoices(served.answer.choices),
  }),
};
/** The conventions' finish reason of a generation that ended abnormally. */
const ERROR_FINISH = ['error'] as const;
const SENT_STREAM_PROMPT_CHARGED = { continues: true, chargesSentPrompt: true } as const;
const NOTHING_DELIVERED: DeliveredOutput = { content: '', reasoning: '', toolCalls: [] };

/**
 * The caller went away before any content while the attempt's upstream had the whole request
 * (hold.promptSentTo): the provider processed (and bills) the prompt, so the request is SERVED with its
 * prompt only — the provider's input counts when it reported them before content (hold.nativeUsage, from
 * AttemptSignal.promptReported), else the gateway's own count — cancelled, finish reason `cancelled`. No
 * zero-completion insurance: that covers a provider that answered nothing, not a caller who left (the
 * ledger refuses the claim on such an event too).
 */
function chargeSentPrompt(target: PreparedRequest, hold: Reservation, streamed: boolean): void {
  const usage = promptOnly(meterUsage(hold.nativeUsage, target.request.messages, target.request.tools, NOTHING_DELIVERED));
  hold.cancelled = true;
  hold.finishReason = CANCELLED_FINISH_REASON;
  hold.insuredReason = '';
  hold.settleInBackground(hold.promptSentTo, usage, streamed);
}

/** A unary answer's usage: the provider's report, with what it lacks counted from what was delivered. */
function meterAnswer(prepared: PreparedRequest, answer: AdapterChatResult): Usage {
  const delivered: DeliveredOutput = {
    content: answer.choices.map((choice) => choice.message?.content ?? '').join(''),
    reasoning: answer.choices.flatMap((choice) => choice.message?.reasoning ?? []).map((part) => part.text).join(''),
    toolCalls: answer.choices.flatMap((choice) => choice.message?.toolCalls ?? []),
  };
  return meterUsage(answer.usage, prepared.request.messages, prepared.request.tools, delivered);
}

/** The input side of a usage (prompt, cache reads and writes, input audio/images); every output count 0. */
function promptOnly(usage: Usage): Usage {
  usage.outputTokens = 0;
  usage.reasoningTokens = 0;
  usage.outputAudioTokens = 0;
  usage.outputAudioMs = 0;
  usage.outputTextTokens = 0;
  usage.outputTextCharacters = 0;
  usage.outputImageTokens = 0;
  return usage;
}

/** One delta as a stream message (its finish reason goes on the attempt's span when the stream ends). */
function deltaMessage(delta: ChatStreamDelta): ChatStreamResponse {
  return { event: { $case: 'delta', value: delta } };
}

/**
 * One stream attempt up to its first content: the parts before the first delta (a usage report) are
 * kept; no delta at all is an empty, complete answer. Each read gets the attempt's idle bound.
 */
interface FirstStreamPart {
  reader: AdapterStreamReader;
  /** The first content; undefined: the stream ended without any (an empty, complete answer). */
  delta: Extract<AdapterStreamPart, { type: 'delta' }>['delta'] | undefined;
  /** The parts after the first delta that came in the same read. */
  rest: AdapterStreamPart[] | undefined;
  reported: Usage | undefined;
  /** The answer's name, when a part before the first content carried it. */
  response: AdapterResponseIdentity | undefined;
}

async function firstStreamPart(candidate: Candidate, request: AdapterChatRequest, control: AttemptControl): Promise<FirstStreamPart> {
  const reader = streamReader(candidate.adapter, request, control);
  let reported: Usage | undefined;
  let response: AdapterResponseIdentity | undefined;
  try {
    for (;;) {
      control.arm();
      const parts = await reader.next();
      if (parts === undefined) return { reader, delta: undefined, rest: undefined, reported, response };
      for (let index = 0; index < parts.length; index += 1) {
        const part = parts[index]!;
        // Adapters drop empty deltas, so the first delta is the first content: failover ends here.
        if (part.type === 'delta') return { reader, delta: part.delta, rest: index + 1 < parts.length ? parts.slice(index + 1) : undefined, reported, response };
        reported = part.usage;
        response = part.response ?? response;
      }
    }
  } catch (error) {
    reader.close();
    throw error;
  }
}

/** Waits for a full receiver; a caller who went away meanwhile ends the stream as cancelled. */
async function drained(sink: ChatStreamSink, signal: CallerSignal): Promise<void> {
  await sink.drained();
  if (signal.aborted) throw new Error('caller went away');
}
