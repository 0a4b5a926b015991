import { z } from 'zod';
import type { SpeakRequest, TranscribeRequest, Usage } from '@gateway/proto';
import { readWavLayout, sniffAudioContainer } from '@gateway/platform';
import type { CatalogModel } from '../../catalog-cache.js';
import { edgeErrors } from '../../errors.js';
import { ClientGoneBeforeRouterError, drained, sendJson } from '../../http.js';
import { parseBody } from '../../canonical/validation.js';
import { gatewayHeaders } from '../../inference/gateway-headers.js';
import { streamStarted } from '../../observability/request-tracker.js';
import type { HttpAnswer } from '../../inference/answer-sink.js';
import type { InferenceSteps } from '../../inference/pipeline-steps.js';
import { readMultipart, singleField } from '../multipart.js';
import { defaultUploadArea } from '../upload-spool.js';
import { ENDPOINT_DEADLINE_MS, mediaOf, pricePico, jsonBody, type EndpointFamily, type PreparedCall } from '../shared.js';

export const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
/** Content type of each speech format when the provider names none (spec §4.3: audio/mpeg when neither side does). */
const SPEECH_CONTENT_TYPES: Record<(typeof SPEECH_FORMATS)[number], string> = {
  mp3: 'audio/mpeg', opus: 'audio/opus', aac: 'audio/aac', flac: 'audio/flac', wav: 'audio/wav', pcm: 'audio/pcm',
};
const MAX_SPEECH_CHARACTERS = 32_768;

export const speechSchema = z.looseObject({
  model: z.string().min(1),
  input: z.string().min(1, 'must not be empty').refine((text) => [...text].length <= MAX_SPEECH_CHARACTERS, `at most ${MAX_SPEECH_CHARACTERS} characters`),
  voice: z.string().min(1),
  speed: z.number().gt(0, 'must be greater than 0').max(100).nullish(),
  instructions: z.string().max(32_768).nullish(),
  response_format: z.enum(SPEECH_FORMATS).nullish(),
  // `sse`: the same audio as server-sent events (OpenAI's speech.audio.delta / speech.audio.done), for
  // every provider kind: the edge wraps what the provider streams, so no provider needs to know.
  stream_format: z.enum(['audio', 'sse']).nullish(),
});
type SpeechBody = z.infer<typeof speechSchema>;

/** A speech call: the Router request and whether the caller wants the audio as server-sent events. */
interface SpeechCall extends PreparedCall<SpeakRequest> {
  sse: boolean;
}

/** One speech.audio.delta event: base64 needs no JSON escaping, so the event is one concatenation. */
function audioDeltaEvent(audio: Uint8Array): string {
  return `data: {"type":"speech.audio.delta","audio":"${Buffer.from(audio.buffer, audio.byteOffset, audio.byteLength).toString('base64')}"}\n\n`;
}

function audioDoneEvent(usage: Usage | undefined): string {
  const input = usage?.inputTokens ?? 0;
  const output = usage?.outputTokens ?? 0;
  return `data: ${JSON.stringify({ type: 'speech.audio.done', usage: { input_tokens: input, output_tokens: output, total_tokens: input + output } })}\n\n`;
}

/**
 * POST /v1/audio/speech (spec §4.3): the audio streamed to the caller as the provider produces it, raw
 * or (`stream_format: "sse"`) as speech.audio.delta events and one speech.audio.done.
 */
export const speechFamily: InferenceSteps<SpeechBody, SpeechCall, HttpAnswer> = {
  endpoint: 'audio.speech',
  parse: jsonBody(speechSchema),
  modelName: (body) => body.model,
  async prepare(body, model) {
    const voices = model.model.voices;
    if (!voices.includes(body.voice)) {
      throw edgeErrors.invalidRequest(`body.voice: ${model.id} has no voice of that name; its voices are ${voices.join(', ')}.`, 'body.voice');
    }
    const formats = model.model.audioFormats;
    if (body.response_format && formats.length > 0 && !formats.includes(body.response_format)) {
      throw edgeErrors.invalidRequest(`body.response_format: ${model.id} produces ${formats.join(', ')}.`, 'body.response_format');
    }
    const characters = [...body.input].length;
    const prepared: SpeakRequest = {
      context: undefined,
      modelId: model.id,
      routingStrategy: '',
      input: body.input,
      voice: body.voice,
      speed: body.speed ?? undefined,
      instructions: body.instructions ?? undefined,
      responseFormat: body.response_format ?? '',
    };
    return { prepared, holdPico: pricePico(model, 'perInputTextCharacter', characters), sse: body.stream_format === 'sse' };
  },
  async exchange({ prepared, sse }, job, http, context) {
    const { response } = http;
    let contentType = '';
    let usage: Usage | undefined;
    const stream = context.router.speak(
      { ...prepared, context: job.routerContext, routingStrategy: job.strategy },
      { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
    );
    for await (const message of stream) {
      const event = message.event;
      if (event?.$case === 'contentType') contentType = event.value;
      else if (event?.$case === 'usage') usage = event.value;
      else if (event?.$case === 'audio') {
        if (!response.headersSent) {
          // The commit point: headers with the first audio bytes (failover happened before them).
          job.commit(undefined);
          const asked = prepared.responseFormat as keyof typeof SPEECH_CONTENT_TYPES | '';
          response.writeHead(200, {
            'content-type': sse ? 'text/event-stream' : contentType || (asked ? SPEECH_CONTENT_TYPES[asked] : 'audio/mpeg'),
            'cache-control': 'no-store',
            ...gatewayHeaders(job.strategy),
          });
          streamStarted(response);
        }
        if (!response.write(sse ? audioDeltaEvent(event.value) : event.value)) await drained(response);
      }
    }
    job.commit(usage);
    if (!response.headersSent) {
      response.writeHead(200, { 'content-type': sse ? 'text/event-stream' : contentType || 'audio/mpeg', ...gatewayHeaders(job.strategy) });
    }
    if (sse) response.write(audioDoneEvent(usage));
    response.end();
  },
};

export const TRANSCRIPTION_FORMATS = ['json', 'text', 'srt', 'vtt', 'verbose_json'] as const;

export const transcriptionSchema = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().max(32_768).optional(),
  language: z.string().regex(/^[a-z]{2}$/, 'must be a lower-case ISO 639-1 code such as "en"').optional(),
  temperature: z.coerce.number().min(0).max(1).optional(),
  response_format: z.enum(TRANSCRIPTION_FORMATS).optional(),
});
type TranscriptionBody = z.infer<typeof transcriptionSchema> & { file: { data: Buffer; filename: string } };

/**
 * The length a transcription hold is computed from, before admission and without ffmpeg: a PCM WAV whose
 * header is consistent gives its length exactly; any other file is assumed to hold 16 kbit/s (a bound
 * few real uploads go below), capped at the longest audio the media service converts. Settlement charges
 * the length measured on what the provider is sent.
 */
export const HOLD_BYTES_PER_SECOND = 2_000;
export const MAX_TRANSCRIPTION_MS = 30 * 60_000;
export function transcriptionHoldMs(bytes: Uint8Array): number {
  const wav = readWavLayout(bytes);
  if ('layout' in wav) return Math.min(wav.layout.durationMs, MAX_TRANSCRIPTION_MS);
  return Math.min(Math.ceil((bytes.length * 1000) / HOLD_BYTES_PER_SECOND), MAX_TRANSCRIPTION_MS);
}

function audioHourPico(model: CatalogModel, durationMs: number): bigint {
  const hourPrice = model.model.pricing?.perInputAudioHour;
  return hourPrice ? (pricePico(model, 'perInputAudioHour', durationMs) + 3_599_999n) / 3_600_000n : 0n;
}

const CONTENT_TYPES: Record<(typeof TRANSCRIPTION_FORMATS)[number], string> = {
  json: 'application/json; charset=utf-8',
  verbose_json: 'application/json; charset=utf-8',
  text: 'text/plain; charset=utf-8',
  srt: 'text/plain; charset=utf-8',
  vtt: 'text/vtt; charset=utf-8',
};

function transcriptionFamily(translate: boolean): EndpointFamily<TranscriptionBody, TranscribeRequest> {
  return {
    endpoint: translate ? 'audio.translations' : 'audio.transcriptions',
    async read(request, context, response) {
      const upload = await readMultipart(request, context.bodyLimits, context.multipartBounds, { area: context.uploads ?? defaultUploadArea(), response });
      const fields: Record<string, string> = {};
      for (const name of ['model', 'prompt', 'language', 'temperature', 'response_format']) {
        const value = singleField(upload, name);
        if (value !== undefined && value !== '') fields[name] = value;
      }
      const parsed = parseBody(transcriptionSchema, fields);
      const files = upload.files.filter((file) => file.field === 'file');
      if (files.length !== 1) throw edgeErrors.invalidRequest('body.file: exactly one audio file part named `file` is required.', 'body.file');
      if (files[0]!.size === 0) throw edgeErrors.invalidRequest('body.file: the file is empty.', 'body.file');
      // Into memory under the upload budget (upload-spool.ts), held until the answer is over.
      const [data] = await upload.load(files);
      return { ...parsed, file: { data: data!, filename: files[0]!.filename } };
    },
    modelName: (body) => body.model,
    async prepare(body, model) {
      // Cheap checks only: no ffmpeg before admission. The container is judged by its magic bytes (a
      // playlist or anything else is refused here); the hold comes from the header or the size.
      if (!sniffAudioContainer(body.file.data)) {
        throw edgeErrors.invalidRequest(
          'body.file: not audio in a container the gateway reads (mp3, mp4/m4a, mpeg/mpga, wav, webm, ogg, flac, aac), judged by its bytes.',
          'body.file',
        );
      }
      const prepared: TranscribeRequest = {
        context: undefined,
        modelId: model.id,
        routingStrategy: '',
        audio: body.file.data,
        filename: body.file.filename,
        prompt: body.prompt ?? '',
        language: translate ? '' : (body.language ?? ''),
        translate,
        responseFormat: body.response_format ?? 'json',
        temperature: body.temperature,
        audioDurationMs: 0,
        mediaType: '',
      };
      return { prepared, holdPico: audioHourPico(model, transcriptionHoldMs(body.file.data)) };
    },
    async exchange({ prepared: upload }, job, http, context) {
      // After admission: the media service turns the upload into what the provider is sent (a consistent
      // PCM wav as it is, mp3 frames remuxed, anything else 16 kHz mono wav) and measures exactly that —
      // the length charged is the length the provider receives. The caller leaving cancels it.
      if (job.signal.aborted) throw new ClientGoneBeforeRouterError('client left before the audio was converted');
      const converted = await mediaOf(context).convertAudio(
        { data: upload.audio, targetFormat: 'transcription', filename: upload.filename },
        { requestId: job.requestId, deadlineMs: 90_000, signal: job.signal },
      );
      const sentAsIs = converted.data.length === 0;
      const base = upload.filename.replace(/\.[^.]*$/, '') || 'audio';
      const extension = converted.contentType === 'audio/mpeg' ? 'mp3' : 'wav';
      const prepared: TranscribeRequest = {
        ...upload,
        audio: sentAsIs ? upload.audio : Buffer.from(converted.data),
        filename: sentAsIs && upload.filename ? upload.filename : `${base}.${extension}`,
        mediaType: converted.contentType || 'audio/wav',
        audioDurationMs: converted.durationMs,
      };
      const answer = await context.router.transcribe(
        { ...prepared, context: job.routerContext, routingStrategy: job.strategy },
        { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
      );
      job.commit(answer.usage);
      const format = prepared.responseFormat as (typeof TRANSCRIPTION_FORMATS)[number];
      const headers = gatewayHeaders(job.strategy);
      if (format === 'json') {
        sendJson(http.response, 200, { text: answer.text }, headers);
      } else {
        const text = answer.content || answer.text;
        http.response.writeHead(200, { ...headers, 'content-type': CONTENT_TYPES[format], 'content-length': Buffer.byteLength(text) });
        http.response.end(text);
      }
    },
  };
}

/** POST /v1/audio/transcriptions (spec §4.4). */
export const transcriptionsFamily = transcriptionFamily(false);
/** POST /v1/audio/translations (spec §4.5): the same request, answered in English. */
export const translationsFamily = transcriptionFamily(true);
