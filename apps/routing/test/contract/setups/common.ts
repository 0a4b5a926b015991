import { Provider } from '@gateway/proto';
import { createAdapter } from '../../../src/providers/create-adapter.js';
import type { ProviderAdapter } from '../../../src/providers/provider-adapter.js';
import { portOf, startConnectionWatch } from '../connection-watch.js';
import type { ReceivedRequest, ScriptedAnswer, ScriptedToolCall } from '../contract-types.js';

/** Static extra headers every row's config sets (catalog `headers`); the fakes must receive them. */
export const CONTRACT_HEADERS: Readonly<Record<string, string>> = { 'x-contract-tenant': 'acme-contract' };

/**
 * The adapter a catalog would build for this provider config, with secrets read from `secrets` (the
 * environment in production). Throws when this build has no adapter for the kind.
 */
export function adapterFromConfig(config: Partial<Provider>, secrets: Record<string, string>): ProviderAdapter {
  const provider = Provider.fromPartial(config);
  const adapter = createAdapter(provider, (name) => secrets[name]);
  if (!adapter) throw new Error(`createAdapter has no adapter for kind ${provider.kind}`);
  return adapter;
}

/** A scripted answer's text and tool calls, under the names the fakes take them by (all but Gemini's). */
export function textAndToolCalls(answer: Extract<ScriptedAnswer, { type: 'answer' }>): { text?: string; toolCalls?: ScriptedToolCall[] } {
  return { ...(answer.text !== undefined ? { text: answer.text } : {}), ...(answer.toolCalls ? { toolCalls: answer.toolCalls } : {}) };
}

/** The text of a content value written as a string or as blocks / parts carrying `text`. */
export function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((block: any) => (typeof block?.text === 'string' ? block.text : '')).join('');
}

/** media type and base64 of a data: URL, undefined for another URL. */
export function parseDataUrl(url: unknown): { mediaType: string; base64: string } | undefined {
  if (typeof url !== 'string') return undefined;
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  return match ? { mediaType: match[1]!, base64: match[2]! } : undefined;
}

/** JSON text parsed, or the text itself when it is not JSON. */
export function parsedOrText(value: unknown): unknown {
  if (typeof value !== 'string') return value;
  try { return JSON.parse(value); } catch { return value; }
}

export function asReceived(requests: readonly { method: string; path: string; headers: any; body: any }[]): ReceivedRequest[] {
  return requests.map((request) => ({ method: request.method, path: request.path, headers: request.headers, body: request.body }));
}

/**
 * What every row backed by a fake upstream hands the suite besides its own fields. Starts the
 * connection watch in front of `fake` and builds the adapter a catalog would from `config` pointed at
 * the watch (`path` after its address, CONTRACT_HEADERS as the static headers): with `secrets`, and
 * with `wrongSecrets` (absent: the kind has no credentials to get wrong). reset and close cover all of
 * them (`cleanup` runs last, e.g. removing a key file).
 */
export async function fakeBackedRow(parts: {
  fake: { url: string; requests: readonly { method: string; path: string; headers: any; body: any }[]; reset(): void; close(): Promise<void> };
  config: Partial<Provider> & { id: string };
  path?: string;
  secrets: Record<string, string>;
  wrongSecrets?: Record<string, string>;
  cleanup?: () => void;
}) {
  const { fake, cleanup } = parts;
  const watch = await startConnectionWatch(portOf(fake.url));
  const config = { ...parts.config, baseUrl: `http://${watch.address}${parts.path ?? ''}`, headers: { ...CONTRACT_HEADERS } };
  const adapter = adapterFromConfig(config, parts.secrets);
  const wrong = parts.wrongSecrets === undefined ? undefined : adapterFromConfig(config, parts.wrongSecrets);
  return {
    scripted: true,
    providerId: config.id,
    adapter,
    received: (): ReceivedRequest[] => asReceived(fake.requests),
    adapterWithWrongCredentials: () => wrong,
    watch,
    reset: () => fake.reset(),
    close: async () => {
      await adapter.close();
      await wrong?.close();
      await watch.close();
      await fake.close();
      cleanup?.();
    },
  };
}
