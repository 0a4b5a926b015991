import { learnedFieldsOf } from '@gateway/platform';
import type { ChatRequest } from '@gateway/proto';

/**
 * What a learned parameter name means in the canonical request (issue 27, item 8): the ChatRequest
 * fields dropping it clears, from the one vocabulary (libs/platform PARAMETERS, its learnable rows). Any
 * other name is looked for among the request's extra_body keys. Fields that are the request itself
 * (messages, tools, the output bound, the response format) are never dropped: without them it would be
 * another request.
 */
const CLEARS = { get: learnedFieldsOf, has: (name: string) => learnedFieldsOf(name) !== undefined };

const NONE: readonly string[] = [];

/**
 * Names that are a canonical field in one dialect and may still be an extra_body key from another
 * (chat has `seed`; responses and messages pass it only as an extra parameter the model lists).
 */
const ALSO_EXTRA: ReadonlySet<string> = new Set(['seed']);

/** Whether the name may be a key of the request's extra_body (so it is worth parsing). */
function mayBeExtra(name: string): boolean {
  return !CLEARS.has(name) || ALSO_EXTRA.has(name);
}

function fieldSet(request: ChatRequest, field: keyof ChatRequest): boolean {
  const value = request[field];
  return Array.isArray(value) ? value.length > 0 : value !== undefined;
}

function extraBodyObject(request: ChatRequest): Record<string, unknown> | undefined {
  if (request.extraBody === undefined || request.extraBody === '') return undefined;
  try {
    const parsed: unknown = JSON.parse(request.extraBody);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Whether the request asks for the named parameter (so a retry without it is another request). */
export function requestSets(request: ChatRequest, name: string): boolean {
  return setsWith(request, name, mayBeExtra(name) ? extraBodyObject(request) : undefined);
}

/** requestSets with the request's extra_body already parsed (`extra`; read only for a name CLEARS lacks). */
function setsWith(request: ChatRequest, name: string, extra: Record<string, unknown> | undefined): boolean {
  const fields = CLEARS.get(name);
  if (fields !== undefined && fields.some((field) => fieldSet(request, field))) return true;
  return mayBeExtra(name) && extra?.[name] !== undefined;
}

/** Whether a name can be learned at all: a clearable field, or a key an extra_body may carry. */
export function learnable(name: string): boolean {
  return name !== '' && (CLEARS.has(name) || /^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(name));
}

/**
 * The request without the learned names it sets, and those names (sorted): a shallow copy only when
 * something is dropped, so a request the map says nothing about goes on as it is.
 */
export function withoutParameters(request: ChatRequest, names: readonly string[]): { request: ChatRequest; dropped: readonly string[] } {
  // extra_body is parsed once, and only when a name may be one of its keys.
  const extra = names.some(mayBeExtra) ? extraBodyObject(request) : undefined;
  let dropped: string[] | undefined;
  for (const name of names) if (setsWith(request, name, extra)) (dropped ??= []).push(name);
  if (dropped === undefined) return { request, dropped: NONE };
  const copy: ChatRequest = { ...request };
  const fields = copy as unknown as Record<string, unknown>;
  let extraDropped = false;
  for (const name of dropped) {
    const cleared = CLEARS.get(name);
    if (cleared !== undefined) for (const field of cleared) fields[field] = Array.isArray(fields[field]) ? [] : undefined;
    // Set in extra_body when setsWith found it there (so `extra` is the parsed object).
    if (mayBeExtra(name) && extra?.[name] !== undefined) {
      delete extra[name];
      extraDropped = true;
    }
  }
  if (extraDropped) copy.extraBody = Object.keys(extra!).length > 0 ? JSON.stringify(extra) : undefined;
  return { request: copy, dropped: dropped.sort() };
}
