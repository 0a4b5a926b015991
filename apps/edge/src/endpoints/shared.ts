import type { z } from 'zod';
import { parseCredits } from '@gateway/platform';
import type { CatalogModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import type { HttpAnswer } from '../inference/answer-sink.js';
import type { InferenceSteps } from '../inference/pipeline-steps.js';
import { EdgeError } from '../errors.js';
import { parseBody } from '../canonical/validation.js';
import { countTextsTokens } from '../inference/tokenizer.js';

/**
 * The body step of a family with a JSON body (its `parse`): the pipeline reads the bounded JSON, the
 * family's schema validates it (400s name the field path). Made once per family, at module load.
 */
export function jsonBody<Schema extends z.ZodType>(schema: Schema): (json: unknown) => z.infer<Schema> {
  return (json) => parseBody(schema, json);
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

/** A family's prepared Router call and the worst-case cost admission holds for it. */
export interface PreparedCall<Prepared> {
  prepared: Prepared;
  /** Worst-case cost in pico-credits (at least the 0.05 minimum is held for a paid model). */
  holdPico: bigint;
}

/**
 * One non-chat endpoint family (DESIGN §6: `apps/edge/src/endpoints/<family>/`): its steps of the one
 * inference pipeline (inference/pipeline-steps.ts) — its catalog endpoint, how its body is read and
 * validated, the model it names, its model-specific checks and worst-case cost (`prepare`, before
 * admission), and its `exchange`: the Router call and the answer, written on `http.response`, calling
 * `job.commit(usage)` once the Router answered (a stream: at its first bytes, and with the usage at its end).
 */
export type EndpointFamily<Body, Prepared> = InferenceSteps<Body, PreparedCall<Prepared>, HttpAnswer>;

/** Unit count × a model's price key, in pico-credits (0 when the model has no such price). */
export function pricePico(model: CatalogModel, key: keyof NonNullable<CatalogModel['model']['pricing']>, units: number | bigint): bigint {
  const text = model.model.pricing?.[key];
  if (!text) return 0n;
  return BigInt(units) * parseCreditsSafe(text);
}

function parseCreditsSafe(text: string): bigint {
  try {
    return parseCredits(text);
  } catch {
    return 0n;
  }
}
