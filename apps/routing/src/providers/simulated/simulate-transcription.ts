import { createHash } from 'node:crypto';
import type { AdapterTranscribeRequest, AdapterTranscribeResult } from '../provider-adapter.js';

const WORDS = ['the', 'gateway', 'heard', 'a', 'steady', 'tone', 'and', 'wrote', 'down', 'what', 'it', 'meant', 'clearly', 'today'];

/**
 * A stable transcript derived from the audio bytes (same bytes, same text), in English for a
 * translation, marked with the asked language otherwise, in every response format.
 */
export function simulateTranscription(request: AdapterTranscribeRequest): AdapterTranscribeResult {
  const digest = createHash('sha256').update(request.audio).digest();
  const words = Array.from({ length: 10 }, (_, index) => WORDS[digest[index]! % WORDS.length]!);
  const hint = request.prompt ? ` (${request.prompt.split(/\s+/).slice(0, 4).join(' ')})` : '';
  const sentence = `${words.join(' ')}${hint}.`;
  const body = sentence.charAt(0).toUpperCase() + sentence.slice(1);
  const language = request.translate ? 'en' : (request.language ?? 'en');
  const text = request.translate || language === 'en' ? `Simulated transcript: ${body}` : `[${language}] Simulated transcript: ${body}`;
  const end = 2.5;
  const content = (() => {
    switch (request.responseFormat) {
      case 'text':
        return `${text}\n`;
      case 'srt':
        return `1\n00:00:00,000 --> 00:00:02,500\n${text}\n\n`;
      case 'vtt':
        return `WEBVTT\n\n00:00:00.000 --> 00:00:02.500\n${text}\n\n`;
      case 'verbose_json':
        return JSON.stringify({
          task: request.translate ? 'translate' : 'transcribe',
          language: language === 'en' ? 'english' : language,
          duration: 0,
          text,
          segments: [{ id: 0, seek: 0, start: 0, end, text, tokens: [], temperature: request.temperature ?? 0, avg_logprob: -0.2, compression_ratio: 1, no_speech_prob: 0.01 }],
        });
      default:
        return '';
    }
  })();
  return { text, content, usage: undefined };
}
