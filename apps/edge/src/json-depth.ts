/*
 * Nesting bound of JSON request bodies, checked on the text BEFORE JSON.parse. Deep nesting hurts twice:
 * much of what follows a parse recurses (JSON.stringify throws a RangeError at ~5,000 levels, and the
 * canonical request carries tool parameters and schemas as JSON text; schema validators and providers
 * recurse too), and V8's JSON.parse itself is slow on it — ~1.6 µs per level (a million nested arrays,
 * a 2 MB body, take 1.6 s; a flat body of that size ~10 ms), so a 32 MiB body of brackets would hold
 * the edge's event loop for half a minute. The scan below costs ~3 µs on a typical 1–2 KB chat body and
 * ~3 ms on a 28 MB body that is mostly one base64 file (docs/dialects.md "Limits on hostile input").
 *
 * 64 levels: the body is level 1, so a tool's `parameters` (level 5) keep 60 levels and a json_schema's
 * `schema` (level 4) keeps 61 — a JSON Schema spends two levels per nested object (`properties` and the
 * property), so that is ~30 nested objects, where OpenAI's structured outputs allow 10 (at first 5).
 */

export const MAX_JSON_DEPTH = 64;

export type JsonPath = Array<string | number>;

const QUOTE = '"'.charCodeAt(0);
const BACKSLASH = '\\'.charCodeAt(0);
const OPEN_BRACE = '{'.charCodeAt(0);
const CLOSE_BRACE = '}'.charCodeAt(0);
const OPEN_BRACKET = '['.charCodeAt(0);
const CLOSE_BRACKET = ']'.charCodeAt(0);
const COMMA = ','.charCodeAt(0);
const COLON = ':'.charCodeAt(0);

/**
 * Index of the quote that closes the string opening at `start`, or -1 when it never closes (then the
 * text is not JSON, and JSON.parse will say so). Strings are skipped with indexOf (a native search), not
 * character by character: most of a large body is string (prompts, base64 files). A quote preceded by an
 * odd number of backslashes is escaped; the runs of backslashes counted end at distinct quotes, so the
 * whole scan stays linear.
 */
function closingQuote(text: string, start: number): number {
  let quote = start;
  for (;;) {
    quote = text.indexOf('"', quote + 1);
    if (quote < 0) return -1;
    let before = quote - 1;
    while (text.charCodeAt(before) === BACKSLASH) before--;
    if (((quote - 1 - before) & 1) === 0) return quote;
  }
}

/**
 * Offset of the first `{` or `[` of `text` that opens a level deeper than `maxDepth` (the outermost
 * value is level 1), or -1 when there is none. Only brackets outside strings count. For valid JSON this
 * is exact; for text that is not JSON it may find a depth or not, and JSON.parse rejects the text anyway.
 */
export function offsetBeyondDepth(text: string, maxDepth: number = MAX_JSON_DEPTH): number {
  let depth = 0;
  for (let index = 0, length = text.length; index < length; index++) {
    const code = text.charCodeAt(index);
    if (code === QUOTE) {
      index = closingQuote(text, index);
      if (index < 0) return -1;
    } else if (code === OPEN_BRACE || code === OPEN_BRACKET) {
      if (++depth > maxDepth) return index;
    } else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
      depth--;
    }
  }
  return -1;
}

/**
 * The path (keys and indexes) from the outermost value to the container that opens at `offset`, as
 * `offsetBeyondDepth` found it. Only called for a body being refused, so it may take its time: a second
 * scan up to `offset` that keeps, per open container, its current key or index.
 */
export function pathAtOffset(text: string, offset: number): JsonPath {
  const path: JsonPath = [];
  const inArray: boolean[] = [];
  for (let index = 0; index < offset; index++) {
    const code = text.charCodeAt(index);
    const top = inArray.length - 1;
    if (code === QUOTE) {
      const close = closingQuote(text, index);
      if (close < 0) break;
      if (top >= 0 && !inArray[top]) {
        let next = close + 1;
        while (next < offset && isJsonSpace(text.charCodeAt(next))) next++;
        // A string followed by a colon is the key of what comes next.
        if (text.charCodeAt(next) === COLON) path[top] = keyOf(text.slice(index, close + 1));
      }
      index = close;
    } else if (code === OPEN_BRACE || code === OPEN_BRACKET) {
      inArray.push(code === OPEN_BRACKET);
      path.push(code === OPEN_BRACKET ? 0 : '');
    } else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
      inArray.pop();
      path.pop();
    } else if (code === COMMA && top >= 0 && inArray[top]) {
      path[top] = (path[top] as number) + 1;
    }
  }
  return path;
}

/** A key token's text; the token as written when it is not valid JSON (the body is refused either way). */
function keyOf(token: string): string {
  try {
    return JSON.parse(token) as string;
  } catch {
    return token.slice(1, -1);
  }
}

function isJsonSpace(code: number): boolean {
  return code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09;
}

/**
 * A field of a dialect whose contents are free-form JSON (a JSON Schema, provider options): a too-deep
 * path inside it is reported as this field. `'*'` stands for any array index.
 */
export type FreeFormField = readonly string[];

/**
 * The field to name for a too-deep path: the free-form field it runs through, else its first two
 * segments (`messages.3`, an unknown top-level field and its first key), which is where a caller
 * looks. Without segments (the body is too deep as a whole) it is the empty path.
 */
export function fieldOfDeepPath(path: JsonPath, freeFormFields: readonly FreeFormField[]): JsonPath {
  for (const field of freeFormFields) {
    if (field.length <= path.length && field.every((segment, index) => (segment === '*' ? typeof path[index] === 'number' : segment === path[index]))) {
      return path.slice(0, field.length);
    }
  }
  return path.slice(0, 2);
}
