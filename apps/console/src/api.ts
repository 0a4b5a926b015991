import { sessionKey } from './session.js';

// The console talks only to the public HTTP API on its own origin: the account routes with the
// provisioning key, the catalog routes without a credential.

export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

export interface KeyRecord {
  id: string;
  name: string;
  label: string;
  disabled: boolean;
  credit_limit: number | null;
  usage: number;
  limit_remaining: number | null;
  default_routing_strategy: string | null;
  created_at: number;
  key?: string;
}

export interface ActivityRow {
  date: string;
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  cached_prompt_tokens: number;
  total_tokens: number;
  credits: string;
}

export interface Model {
  id: string;
  owned_by: string;
  display_name?: string;
  context_window?: number;
  supported_endpoints?: string[];
  pricing?: Record<string, number | string>;
  architecture?: { input_modalities?: string[]; output_modalities?: string[] };
}

export interface Startup {
  id: string;
  display_name: string;
  icon_url: string;
  website_url?: string;
}

export interface Generation {
  id: string;
  model: string;
  provider_name: string;
  tokens_prompt: number;
  tokens_completion: number;
  total_cost: string;
  latency: number;
  finish_reason: string | null;
  created_at: number;
}

export const ROUTING_STRATEGIES = ['reliability', 'balanced', 'latency', 'throughput', 'cache'] as const;

/** The API's error in words: its message, or what the status means when the body has none. */
function describe(status: number, body: unknown): string {
  const message = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
  if (typeof message === 'string' && message !== '') return message;
  if (status === 401) return 'The provisioning key was not accepted.';
  if (status === 404) return 'Not found.';
  if (status === 429) return 'Too many requests; try again in a moment.';
  return `The gateway answered ${status}.`;
}

async function call<T>(method: string, path: string, body?: unknown, authorised = true): Promise<T> {
  const headers: Record<string, string> = {};
  const key = sessionKey();
  if (authorised && key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit' });
  } catch {
    throw new ApiError(0, 'The gateway could not be reached.');
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (!response.ok) throw new ApiError(response.status, describe(response.status, parsed));
  return parsed as T;
}

export const api = {
  balance: () => call<{ balance: string }>('GET', '/v1/account/balance'),
  keys: () => call<{ data: KeyRecord[] }>('GET', '/v1/account/keys?include_disabled=true&limit=100'),
  createKey: (body: { name: string; credit_limit: string | null; default_routing_strategy?: string }) =>
    call<KeyRecord>('POST', '/v1/account/keys', body),
  updateKey: (id: string, body: Record<string, unknown>) => call<KeyRecord>('PATCH', `/v1/account/keys/${encodeURIComponent(id)}`, body),
  deleteKey: (id: string) => call<{ deleted: boolean }>('DELETE', `/v1/account/keys/${encodeURIComponent(id)}`),
  activity: (days: number, keyId?: string) =>
    call<{ data: ActivityRow[] }>('GET', `/v1/account/activity?days=${days}${keyId ? `&key_id=${encodeURIComponent(keyId)}` : ''}`),
  generation: (id: string) => call<{ data: Generation }>('GET', `/v1/generation?id=${encodeURIComponent(id)}`),
  models: () => call<{ data: Model[] }>('GET', '/v1/models', undefined, false),
  startups: () => call<{ data: Startup[] }>('GET', '/v1/startups', undefined, false),
};

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
