import { ErrorReason, GatewayError, GrpcStatus, errors, type CallerSignal } from '@gateway/platform';
import type { SpeakRequest, SpeakResponse, TranscribeRequest, TranscribeResponse, Usage } from '@gateway/proto';
import { reportedUsageResponse } from '../observability/gen-ai-telemetry.js';
import type { AdapterSpeechResult, AdapterTranscribeResult } from '../providers/provider-adapter.js';
import { emptyUsage } from '../usage/token-counter.js';
import { attemptFailure, type ServedAttempt } from './attempt-recorder.js';
import { canSpeak, canTranscribe } from './candidates.js';
import { NO_UPSTREAM_RETRY_AFTER_SECONDS, type FailoverPolicy } from './failover.js';
import type { Reservation } from './reservation.js';
import type { RoutingCore } from './routing-core.js';

/** A transcription attempt's GenAI usage: the tokens its provider reported (none for one billed in seconds). */
const TRANSCRIBE_POLICY: FailoverPolicy<AdapterTranscribeResult> = { response: (result) => reportedUsageResponse(result.usage) };

/**
 * Speech, streamed: failover only until the first audio bytes exist (they are pulled before anything is
 * yielded); after that a provider failure ends the stream with an error. The usage event (characters,
 * plus audio tokens when the provider reports them) is published after the last byte, then yielded.
 */
export async function* speak(core: RoutingCore, raw: SpeakRequest, signal: CallerSignal): AsyncGenerator<SpeakResponse> {
  // Released as this generator ends unless the stream settled it (RoutingCore.admittedStream).
  using hold = core.admittedStream(raw.context, raw.modelId, 'audio.speech', false);
  let providerId = '';
  // The serving attempt, handed over by the failover loop with its first bytes: ended once with `finish`.
  let attempt: ServedAttempt<FirstAudio> | undefined;
  let iterator: AsyncIterator<Uint8Array> | undefined;
  const charged = (): Usage => ({ ...emptyUsage(), inputTextCharacters: [...raw.input].length });
  let audioBytes = 0;
  try {
    const target = core.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canSpeak);
    if (!raw.input) throw errors.invalidRequest('input must not be empty', 'input');
    const request = {
      input: raw.input,
      voice: raw.voice,
      speed: raw.speed,
      instructions: raw.instructions,
      responseFormat: raw.responseFormat || undefined,
    };
    attempt = await core.withFailover(target, signal, async (candidate, attemptSignal): Promise<FirstAudio> => {
      const speech = await candidate.adapter.speak!({ ...request, upstreamModel: candidate.offer.upstreamModel }, attemptSignal);
      const audio = speech.audio[Symbol.asyncIterator]();
      let first: IteratorResult<Uint8Array>;
      try {
        first = await audio.next();
      } catch (error) {
        void audio.return?.(undefined)?.catch?.(() => undefined);
        throw error;
      }
      return { speech, audio, first };
    }, STREAMED_AUDIO);
    const { result, candidate, control } = attempt;
    providerId = candidate.offer.providerId;
    iterator = result.audio;
    // The rest of the stream keeps the attempt's control: the caller's cancellation and an idle bound per read.
    yield { event: { $case: 'contentType', value: result.speech.contentType ?? '' } };
    let next = result.first;
    hold.firstByteAt = Date.now();
    while (!next.done) {
      audioBytes += next.value.length;
      if (next.value.length > 0) yield { event: { $case: 'audio', value: Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength) } };
      control.arm();
      try {
        next = await iterator.next();
      } finally {
        control.disarm();
      }
    }
    iterator = undefined;
    // Zero-completion insurance: a stream that ended without a byte of audio is not charged.
    const noAudio = audioBytes === 0;
    hold.insuredReason = noAudio ? 'no_audio' : '';
    hold.nativeUsage = result.speech.usage();
    const usage: Usage = { ...charged(), outputAudioTokens: noAudio ? 0 : result.speech.usage()?.outputAudioTokens ?? 0 };
    await core.recordServed(target, providerId, usage);
    attempt.finish('success', NO_SPEECH_SAMPLE);
    yield { event: { $case: 'usage', value: usage } };
  } catch (error) {
    // Before the first bytes (a refusal, or no provider answered) the hold's scope releases it.
    if (!attempt || error instanceof GatewayError) throw error;
    // Audio already reached the caller: it is charged, and the caller learns the answer was cut short.
    hold.settleInBackground(providerId, charged(), true);
    const failure = attemptFailure(error, attempt.control, 'speech stream went silent');
    // A caller who went away cancelled it; else the provider cut the stream after content.
    if (signal.aborted) attempt.finish('cancelled');
    else attempt.finish('failed_after_content', failure);
    throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, `The upstream provider failed during the speech stream: ${failure.providerMessage}`, {
      retryAfterSeconds: NO_UPSTREAM_RETRY_AFTER_SECONDS,
      cause: failure,
    });
  } finally {
    attempt?.control.dispose();
    if (iterator) {
      // The consumer stopped reading mid-stream: the attempt ends with its caller.
      attempt?.finish('cancelled');
      void iterator.return?.(undefined)?.catch?.(() => undefined);
    }
    // The caller went away after the first bytes: what it received is charged. Else nothing was: the scope releases it.
    if (providerId) hold.settleInBackground(providerId, charged(), true);
  }
}

interface FirstAudio {
  speech: AdapterSpeechResult;
  audio: AsyncIterator<Uint8Array>;
  first: IteratorResult<Uint8Array>;
}

/** Speech goes on after its first bytes: its attempt is handed back and finished by the stream. */
const STREAMED_AUDIO = { continues: true } as const;
/** Speech tells health only that it answered (no tokens to time). */
const NO_SPEECH_SAMPLE = { outputTokens: 0, durationMs: 0 };

export function transcribe(core: RoutingCore, raw: TranscribeRequest, signal: CallerSignal): Promise<TranscribeResponse> {
  const endpoint = raw.translate ? 'audio.translations' : 'audio.transcriptions';
  return core.admitted(raw.context, raw.modelId, endpoint, (hold) => transcribeHolding(core, raw, signal, hold));
}

async function transcribeHolding(core: RoutingCore, raw: TranscribeRequest, signal: CallerSignal, hold: Reservation): Promise<TranscribeResponse> {
  const target = core.resolve(hold, raw.modelId, raw.routingStrategy, 0, () => '', canTranscribe);
  if (raw.audio.length === 0) throw errors.invalidRequest('file must not be empty', 'file');
  const { result, candidate } = await core.withFailover(target, signal, (candidate, attemptSignal) =>
    candidate.adapter.transcribe!(
      {
        upstreamModel: candidate.offer.upstreamModel,
        audio: raw.audio,
        filename: raw.filename || 'audio',
        mediaType: raw.mediaType || 'application/octet-stream',
        prompt: raw.prompt || undefined,
        language: raw.language || undefined,
        temperature: raw.temperature,
        translate: raw.translate,
        responseFormat: raw.responseFormat || 'json',
      },
      attemptSignal,
    ),
  TRANSCRIBE_POLICY);
  const reported = result.usage;
  const usage: Usage = {
    ...emptyUsage(),
    ...(reported ?? {}),
    inputAudioMs: reported?.inputAudioMs || raw.audioDurationMs,
    estimated: !reported?.inputAudioMs,
  };
  await core.recordServed(target, candidate.offer.providerId, usage);
  return { text: result.text, content: result.content, usage, providerId: candidate.offer.providerId };
}
