import type { IncomingMessage } from 'node:http';
import type { z } from 'zod';
import type { EdgeContext } from '../context.js';
import { EdgeError } from '../errors.js';
import { readJsonBody } from '../http.js';
import { parseBody } from '../canonical/validation.js';
import { countTextsTokens } from '../inference/tokenizer.js';

/** Reads a JSON body and validates it with the family's schema (400s name the field path). */
export async function readJson<Schema extends z.ZodType>(request: IncomingMessage, context: EdgeContext, schema: Schema): Promise<z.infer<Schema>> {
  return parseBody(schema, await readJsonBody(request, context.bodyLimits));
}

/** The media service, which images-as-URLs and audio need; a gateway started without one answers 503. */
export function mediaOf(context: EdgeContext): NonNullable<EdgeContext['media']> {
  if (!context.media) {
    throw new EdgeError({ status: 503, type: 'server_error', message: 'This gateway has no media service configured (MEDIA_ADDR).', code: 'media_unavailable' });
  }
  return context.media;
}

/** Deadline of one non-streamed Router call of a media endpoint, failover included. */
export const ENDPOINT_DEADLINE_MS = 10 * 60_000;

/**
 * Tokens of each text by the gateway's tokenizer (loaded on first use), with the request's tokenizer
 * work bounded and the event loop yielded between slices (inference/tokenizer.ts).
 */
export function countTokens(texts: readonly string[]): Promise<number[]> {
  return countTextsTokens(texts);
}
