import { z } from 'zod';
import type { SpeakRequest, TranscribeRequest, Usage } from '@gateway/proto';
import { edgeErrors } from '../../errors.js';
import { drained, sendJson } from '../../http.js';
import { parseBody } from '../../canonical/validation.js';
import { endpointHeaders, pricePico, type EndpointFamily } from '../../inference/endpoint-pipeline.js';
import { readMultipart, singleField } from '../multipart.js';
import { ENDPOINT_DEADLINE_MS, mediaOf, readJson } from '../shared.js';

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
});
type SpeechBody = z.infer<typeof speechSchema>;

/** POST /v1/audio/speech (spec §4.3): the audio streamed to the caller as the provider produces it. */
export const speechFamily: EndpointFamily<SpeechBody, SpeakRequest> = {
  endpoint: 'audio.speech',
  read: (request, context) => readJson(request, context, speechSchema),
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
    return { prepared, holdPico: pricePico(model, 'perInputTextCharacter', characters) };
  },
  async answer(prepared, job) {
    const { response } = job;
    let contentType = '';
    let usage: Usage | undefined;
    const stream = job.context.router.speak(
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
          const asked = prepared.responseFormat as keyof typeof SPEECH_CONTENT_TYPES | '';
          response.writeHead(200, {
            'content-type': contentType || (asked ? SPEECH_CONTENT_TYPES[asked] : 'audio/mpeg'),
            'cache-control': 'no-store',
            ...endpointHeaders(job.strategy),
          });
        }
        if (!response.write(event.value)) await drained(response);
      }
    }
    if (!response.headersSent) response.writeHead(200, { 'content-type': contentType || 'audio/mpeg', ...endpointHeaders(job.strategy) });
    response.end();
    return usage;
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

/** mp3 and wav go to providers as they are; any other container is converted to wav by the media service. */
function providerTakes(bytes: Buffer): boolean {
  const wav = bytes.length >= 12 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WAVE';
  const mp3 = bytes.toString('latin1', 0, 3) === 'ID3' || (bytes.length >= 2 && bytes[0] === 0xff && (bytes[1]! & 0xe6) === 0xe2);
  return wav || mp3;
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
    async read(request, context) {
      const upload = await readMultipart(request, context.bodyLimits, context.multipartBounds);
      const fields: Record<string, string> = {};
      for (const name of ['model', 'prompt', 'language', 'temperature', 'response_format']) {
        const value = singleField(upload, name);
        if (value !== undefined && value !== '') fields[name] = value;
      }
      const parsed = parseBody(transcriptionSchema, fields);
      const files = upload.files.filter((file) => file.field === 'file');
      if (files.length !== 1) throw edgeErrors.invalidRequest('body.file: exactly one audio file part named `file` is required.', 'body.file');
      if (files[0]!.data.length === 0) throw edgeErrors.invalidRequest('body.file: the file is empty.', 'body.file');
      return { ...parsed, file: { data: files[0]!.data, filename: files[0]!.filename } };
    },
    modelName: (body) => body.model,
    async prepare(body, model, { context, requestId, signal }) {
      // The length prices the request (per_input_audio_hour) and bounds its hold; a container the
      // providers do not take becomes wav on the way.
      const convert = !providerTakes(body.file.data);
      const measured = await mediaOf(context).convertAudio(
        { data: body.file.data, targetFormat: convert ? 'wav' : '', filename: body.file.filename },
        { requestId, deadlineMs: 90_000, signal },
      );
      const audio = convert ? measured.data : body.file.data;
      const mediaType = convert ? 'audio/wav' : measured.sourceFormat === 'wav' ? 'audio/wav' : 'audio/mpeg';
      const filename = convert ? `${body.file.filename.replace(/\.[^.]*$/, '') || 'audio'}.wav` : body.file.filename || `audio.${measured.sourceFormat}`;
      const prepared: TranscribeRequest = {
        context: undefined,
        modelId: model.id,
        routingStrategy: '',
        audio,
        filename,
        prompt: body.prompt ?? '',
        language: translate ? '' : (body.language ?? ''),
        translate,
        responseFormat: body.response_format ?? 'json',
        temperature: body.temperature,
        audioDurationMs: measured.durationMs,
        mediaType,
      };
      const hourPrice = model.model.pricing?.perInputAudioHour;
      const holdPico = hourPrice ? (pricePico(model, 'perInputAudioHour', measured.durationMs) + 3_599_999n) / 3_600_000n : 0n;
      return { prepared, holdPico };
    },
    async answer(prepared, job) {
      const answer = await job.context.router.transcribe(
        { ...prepared, context: job.routerContext, routingStrategy: job.strategy },
        { requestId: job.requestId, deadlineMs: ENDPOINT_DEADLINE_MS, signal: job.signal },
      );
      const format = prepared.responseFormat as (typeof TRANSCRIPTION_FORMATS)[number];
      const headers = endpointHeaders(job.strategy);
      if (format === 'json') {
        sendJson(job.response, 200, { text: answer.text }, headers);
      } else {
        const text = answer.content || answer.text;
        job.response.writeHead(200, { ...headers, 'content-type': CONTENT_TYPES[format], 'content-length': Buffer.byteLength(text) });
        job.response.end(text);
      }
      return answer.usage;
    },
  };
}

/** POST /v1/audio/transcriptions (spec §4.4). */
export const transcriptionsFamily = transcriptionFamily(false);
/** POST /v1/audio/translations (spec §4.5): the same request, answered in English. */
export const translationsFamily = transcriptionFamily(true);
