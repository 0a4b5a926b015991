/*
 * The usual chat-completions body checked by hand: a model, text messages (role, content, name) and a
 * few scalar parameters. zod's safeParse of the whole schema cost ~5 % of the edge's CPU per request
 * at max load (docs/performance.md, issue 39); most bodies use none of its unions, blocks, tools or
 * routing choices. This answers only when the body is exactly such a body and every value is one the
 * schema accepts, with what the schema would answer (a fresh object per level, null kept as null);
 * for anything else it answers undefined and the schema decides, and words the error, as before.
 * chat-schema.test.ts compares the two on seeded random bodies.
 */

const ROLES: ReadonlySet<unknown> = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

type Check = (value: unknown) => boolean;

const number = (min: number, max: number): Check => (value) => typeof value === 'number' && value >= min && value <= max;
// zod 4's .int() takes safe integers only.
const integer = (min: number, max: number): Check => (value) => Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max;
const boolean: Check = (value) => typeof value === 'boolean';
const string: Check = (value) => typeof value === 'string';

/** The scalar top-level fields taken here, each with the schema's own bounds; null is "absent" for every one. */
const SCALARS: ReadonlyMap<string, Check> = new Map<string, Check>([
  ['temperature', number(0, 2)],
  ['top_p', number(0, 1)],
  ['presence_penalty', number(-2, 2)],
  ['frequency_penalty', number(-2, 2)],
  ['max_tokens', integer(1, 4_294_967_295)],
  ['max_completion_tokens', integer(1, 4_294_967_295)],
  ['stream', boolean],
  ['user', string],
  ['seed', integer(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)],
  ['n', integer(1, 128)],
  ['logprobs', boolean],
  ['top_logprobs', integer(0, 20)],
  ['parallel_tool_calls', boolean],
  ['store', boolean],
  ['prompt_cache_key', string],
]);

function plainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/** A text message: role, and string-or-null content and name; any other key or value (undefined too): undefined. */
function plainMessage(value: unknown): Record<string, unknown> | undefined {
  if (!plainObject(value)) return undefined;
  const message: Record<string, unknown> = {};
  let role = false;
  for (const key in value) {
    const field = value[key];
    if (key === 'role') {
      if (!ROLES.has(field)) return undefined;
      role = true;
    } else if (key === 'content' || key === 'name') {
      if (field !== null && typeof field !== 'string') return undefined;
    } else {
      return undefined;
    }
    message[key] = field;
  }
  return role ? message : undefined;
}

/**
 * The body as the chat schema would parse it, when it is the usual kind (see above); else undefined.
 * Typed as a record here (chat-schema.ts, which calls it, owns the request's type).
 */
export function plainChatRequest(body: unknown): Record<string, unknown> | undefined {
  if (!plainObject(body)) return undefined;
  const parsed: Record<string, unknown> = {};
  let model = false;
  let messages = false;
  for (const key in body) {
    const value = body[key];
    if (key === 'model') {
      if (typeof value !== 'string' || value.length === 0) return undefined;
      model = true;
      parsed.model = value;
    } else if (key === 'messages') {
      if (!Array.isArray(value) || value.length === 0) return undefined;
      const list: Record<string, unknown>[] = new Array(value.length);
      for (let index = 0; index < value.length; index++) {
        const message = plainMessage(value[index]);
        if (message === undefined) return undefined;
        list[index] = message;
      }
      messages = true;
      parsed.messages = list;
    } else if (key === 'stream_options') {
      if (value === null) {
        parsed.stream_options = null;
      } else {
        if (!plainObject(value)) return undefined;
        const options: Record<string, unknown> = {};
        for (const option in value) {
          const include = value[option];
          if (option !== 'include_usage') return undefined;
          if (include !== null && typeof include !== 'boolean') return undefined;
          options.include_usage = include;
        }
        parsed.stream_options = options;
      }
    } else {
      // Any other field, or a value that is not JSON's (undefined): the schema's.
      const check = SCALARS.get(key);
      if (check === undefined || (value !== null && !check(value))) return undefined;
      parsed[key] = value;
    }
  }
  return model && messages ? parsed : undefined;
}
