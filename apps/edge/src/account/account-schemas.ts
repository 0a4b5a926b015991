import { z } from 'zod';
import { MoneyFormatError, parseCredits, formatCredits } from '@gateway/platform';
import { echoed } from '../echoed-value.js';
import { edgeErrors, type EdgeError } from '../errors.js';
import { ROUTING_STRATEGIES } from '../inference/strategy.js';

/*
 * Bodies and queries of the account routes (spec §4.15, §4.16). Every failure is a 400 whose
 * message names the field path (`body.credit_limit: ...`, `query.days: ...`). Bounds mirror the
 * Auth service's, so a request Auth would refuse is refused here with the HTTP field path.
 */

export const KEY_NAME_MAX_LENGTH = 200;
/** A credit limit above this is a typo, not a budget (Auth refuses it too). */
const CREDIT_LIMIT_MAX_PICO = parseCredits('1000000000000');
export const LIST_LIMIT_MAX = 100;
/** An account holds at most 1,000 live keys (Auth), so a larger offset can only answer an empty page. */
export const LIST_OFFSET_MAX = 1_000;
export const ACTIVITY_DAYS_MAX = 30;
export const ACTIVITY_DAYS_DEFAULT = 30;
/** Ids we mint are ~30 characters; a longer one is nobody's key and is answered 404 without a lookup. */
export const KEY_ID_MAX_LENGTH = 100;

/** Zod's error hook: a missing field says so; a present one says what it must be. */
const expected = (what: string) => (issue: { input?: unknown }) => (issue.input === undefined ? 'is required' : `must be ${what}`);

/**
 * The shortest decimal that reads back as this double, written without an exponent. It is the
 * literal a client wrote for any amount a JSON number can carry exactly (`0.1` stays `0.1`); no
 * arithmetic touches the value. Clients needing more digits than a double holds send a string.
 */
export function numberToDecimal(value: number): string {
  const text = String(value);
  const match = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(text);
  if (!match) return text;
  const [, sign, lead, rest = '', exponentText] = match;
  const digits = `${lead}${rest}`;
  // Position of the decimal point counted from the start of `digits`.
  const point = 1 + Number(exponentText);
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return `${sign}${digits}${'0'.repeat(point - digits.length)}`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/**
 * An amount of credits a client sent as a JSON number (read as the literal it wrote) or a decimal string,
 * in pico-credits; undefined after adding the issue when it is not a finite decimal with at most 12
 * decimals. Each schema checks its own bounds on the result.
 */
export function creditsPico(value: number | string, context: z.RefinementCtx): bigint | undefined {
  if (typeof value === 'number' && !Number.isFinite(value)) {
    context.addIssue({ code: 'custom', message: 'must be a finite number of credits' });
    return undefined;
  }
  try {
    return parseCredits(typeof value === 'number' ? numberToDecimal(value) : value.trim());
  } catch (error) {
    if (!(error instanceof MoneyFormatError)) throw error;
    context.addIssue({ code: 'custom', message: 'must be a decimal number of credits with at most 12 decimals' });
    return undefined;
  }
}

/** `credit_limit`: a JSON number (spec §2.10) or a decimal string; null means no limit. Normalised ("5.50" -> "5.5"). */
const creditLimit = z
  .union([z.number(), z.string()], { error: expected('a number of credits or null') })
  .nullable()
  .transform((value, context): string | null => {
    if (value === null) return null;
    const pico = creditsPico(value, context);
    if (pico === undefined) return z.NEVER;
    if (pico < 0n) {
      context.addIssue({ code: 'custom', message: 'must not be negative' });
      return z.NEVER;
    }
    if (pico > CREDIT_LIMIT_MAX_PICO) {
      context.addIssue({ code: 'custom', message: `must be at most ${formatCredits(CREDIT_LIMIT_MAX_PICO)}` });
      return z.NEVER;
    }
    return formatCredits(pico);
  });

const keyName = z
  .string({ error: expected('a string') })
  .trim()
  .min(1, { error: 'must not be empty' })
  .refine((name) => [...name].length <= KEY_NAME_MAX_LENGTH, { error: `must be at most ${KEY_NAME_MAX_LENGTH} characters` })
  // A name is shown in lists and the console; Postgres refuses a NUL in text.
  .refine((name) => !/[\u0000-\u001f\u007f]/.test(name), { error: 'must not contain a control character' });

const strategy = z.enum(ROUTING_STRATEGIES, { error: expected(`one of ${ROUTING_STRATEGIES.join(', ')}`) });

export const LIMIT_RESETS = ['daily', 'weekly', 'monthly'] as const;
/** `limit_reset` (OpenRouter's): the window credit_limit applies to; null: the key's lifetime spend. */
const limitReset = z.enum(LIMIT_RESETS, { error: expected(`one of ${LIMIT_RESETS.join(', ')} or null`) }).nullable();

/** An ISO 8601 date-time with seconds optional, fraction optional, and a zone (`Z` or ±hh:mm) required. */
const ISO_INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-](\d{2}):(\d{2}))$/i;

/**
 * Unix ms of an ISO 8601 instant, or undefined when it is not one: a calendar date that exists, a time
 * of day below 24:00, a zone offset below 24 h. The fraction is kept to the millisecond (truncated).
 */
export function parseIsoInstant(text: string): number | undefined {
  const match = ISO_INSTANT.exec(text);
  if (!match) return undefined;
  const [, y, mo, d, h, mi, s = '0', fraction = '', zone, zoneHours = '0', zoneMinutes = '0'] = match;
  const [year, month, day, hour, minute, second] = [y, mo, d, h, mi, s].map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59 || Number(zoneHours) > 23 || Number(zoneMinutes) > 59) return undefined;
  const millisecond = Number(fraction.slice(0, 3).padEnd(3, '0'));
  const date = new Date(Date.UTC(year, month - 1, day, hour, minute, second, millisecond));
  date.setUTCFullYear(year);
  if (date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) return undefined;
  const offsetMinutes = zone!.toUpperCase() === 'Z' ? 0 : (zone!.startsWith('-') ? -1 : 1) * (Number(zoneHours) * 60 + Number(zoneMinutes));
  return date.getTime() - offsetMinutes * 60_000;
}

/** The latest expiry accepted (Auth's bound too): the end of year 9999. */
const EXPIRES_AT_MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** `expires_at`: an ISO 8601 instant with its zone (OpenRouter's form), as Unix ms; null: never. Must lie in the future (checked by the route, on its clock). */
const expiresAt = z
  .string({ error: expected('an ISO 8601 date-time with a time zone (e.g. 2027-01-31T23:59:59Z) or null') })
  .nullable()
  .transform((value, context): number | null => {
    if (value === null) return null;
    const at = parseIsoInstant(value.trim());
    if (at === undefined || at < 0 || at > EXPIRES_AT_MAX_MS) {
      context.addIssue({ code: 'custom', message: 'must be an ISO 8601 date-time with a time zone (e.g. 2027-01-31T23:59:59Z)' });
      return z.NEVER;
    }
    return at;
  });

/** POST /v1/account/keys. `credit_limit` is required by the spec (§4.15); null asks for no limit. */
export const createKeyBody = z.strictObject(
  {
    name: keyName,
    credit_limit: creditLimit,
    default_routing_strategy: strategy.nullish(),
    limit_reset: limitReset.optional(),
    expires_at: expiresAt.optional(),
  },
  { error: 'must be a JSON object' },
);
export type CreateKeyBody = z.infer<typeof createKeyBody>;

/** PATCH /v1/account/keys/{key_id}: every field optional; `credit_limit: null` removes the limit, `default_routing_strategy: null` the default. */
export const updateKeyBody = z.strictObject(
  {
    name: keyName.optional(),
    disabled: z.boolean({ error: expected('a boolean') }).optional(),
    credit_limit: creditLimit.optional(),
    default_routing_strategy: strategy.nullable().optional(),
    /** null: back to a lifetime limit. */
    limit_reset: limitReset.optional(),
    /** null: the key no longer expires. */
    expires_at: expiresAt.optional(),
  },
  { error: 'must be a JSON object' },
);
export type UpdateKeyBody = z.infer<typeof updateKeyBody>;

/** Query values arrive as strings; a repeated parameter arrives as an array and is refused. */
export const queryInteger = (minimum: number, maximum: number) =>
  z
    .string({ error: 'must be given once' })
    .regex(/^\d{1,9}$/, { error: `must be an integer between ${minimum} and ${maximum}` })
    .transform(Number)
    .refine((value) => value >= minimum && value <= maximum, { error: `must be an integer between ${minimum} and ${maximum}` });

/** An opaque page cursor of the query (the service that made it judges it); longer than `maxLength`: not one. */
export const queryCursor = (maxLength: number) => z.string({ error: 'must be given once' }).max(maxLength, { error: 'is not valid' });

/** A `key_id` filter of the query. */
const keyIdFilter = z
  .string({ error: 'must be given once' })
  .min(1, { error: 'must not be empty' })
  .max(KEY_ID_MAX_LENGTH, { error: `must be at most ${KEY_ID_MAX_LENGTH} characters` });

const queryBoolean = z
  .string({ error: 'must be given once' })
  .transform((value) => value.toLowerCase())
  .refine((value) => value === 'true' || value === 'false', { error: 'must be true or false' })
  .transform((value) => value === 'true');

/** GET /v1/account/keys: `limit` with either an opaque `cursor` or an `offset`; newest first. */
export const listKeysQuery = z
  .object({
    limit: queryInteger(1, LIST_LIMIT_MAX).optional(),
    offset: queryInteger(0, LIST_OFFSET_MAX).optional(),
    cursor: queryCursor(64).optional(),
    include_disabled: queryBoolean.optional(),
  })
  .refine((query) => query.offset === undefined || query.cursor === undefined, {
    error: 'offset and cursor cannot be combined',
    path: ['offset'],
  });
export type ListKeysQuery = z.infer<typeof listKeysQuery>;

/** GET /v1/account/activity: `days` 1..30 (spec §4.16, default 30), optional `key_id` filter. */
export const activityQuery = z.object({
  days: queryInteger(1, ACTIVITY_DAYS_MAX).optional(),
  key_id: keyIdFilter.optional(),
});
export type ActivityQuery = z.infer<typeof activityQuery>;

/** GET /v1/account/generations: page size (default GENERATIONS_LIMIT_DEFAULT). */
export const GENERATIONS_LIMIT_MAX = 100;
export const GENERATIONS_LIMIT_DEFAULT = 20;
/** The ledger's cursors are far shorter; a longer one is not one of them. */
const GENERATIONS_CURSOR_MAX_LENGTH = 400;

/** GET /v1/account/generations: `limit` 1..100, the opaque `cursor` of a previous page, optional `key_id` filter. */
export const generationsQuery = z.object({
  limit: queryInteger(1, GENERATIONS_LIMIT_MAX).optional(),
  cursor: queryCursor(GENERATIONS_CURSOR_MAX_LENGTH).optional(),
  key_id: keyIdFilter.optional(),
});
export type GenerationsQuery = z.infer<typeof generationsQuery>;

type Issue = z.core.$ZodIssue;

/** The first issue as `<where>.<path>: <message>`; an unknown field is named by its own path. */
export function fieldError(where: 'body' | 'query', issues: readonly Issue[]): EdgeError {
  const first = issues[0];
  if (!first) return edgeErrors.invalidRequest(`${where}: invalid request.`, where);
  let path = first.path.map(String);
  let message = first.message;
  if (first.code === 'unrecognized_keys' && first.keys.length > 0) {
    path = [...path, String(first.keys[0])];
    message = 'unknown field';
  }
  // Unknown fields are named by their key, which is the client's: bounded like any echoed value.
  const param = echoed([where, ...path].join('.'));
  return edgeErrors.invalidRequest(`${param}: ${message}`, param);
}

export function parseWith<Schema extends z.ZodType>(schema: Schema, where: 'body' | 'query', value: unknown): z.output<Schema> {
  // No parse context (see parseChatCompletionRequest); issues leave the input out by default.
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw fieldError(where, result.error.issues);
}
