import { lookup as dnsLookup } from 'node:dns/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { checkAddress, unbracketHost, type AddressPolicyOptions } from './address-policy.js';

/** Bounds of a URL fetch, and their defaults. */
export const DEFAULT_URL_FETCH_LIMITS = {
  /** Largest body read (the spec's single inline file bound); a caller may ask for less, never more. */
  maxBytes: 20 * 1024 * 1024,
  /** Whole fetch (DNS, every redirect, the body) when the caller names no timeout. */
  defaultTimeoutMs: 15_000,
  /** Longest timeout a caller may ask for. */
  maxTimeoutMs: 60_000,
  /** Redirects followed; each target is checked like the first URL. */
  maxRedirects: 3,
  /** Longest URL accepted. */
  maxUrlLength: 8_192,
};
export type UrlFetchLimits = typeof DEFAULT_URL_FETCH_LIMITS;

export type ResolveHost = (host: string) => Promise<{ address: string; family: number }[]>;

export interface UrlFetchOptions extends AddressPolicyOptions {
  limits?: Partial<UrlFetchLimits>;
  /** DNS used to find (and check) a host's addresses; tests replace it to prove the connection is pinned. */
  resolveHost?: ResolveHost;
}

const systemResolveHost: ResolveHost = (host) => dnsLookup(host, { all: true, verbatim: true });

export interface FetchedUrl {
  data: Buffer;
  contentType: string;
  finalUrl: string;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

function refused(message: string): GatewayError {
  return new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_REQUEST, message);
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, `The file at the URL is larger than ${maxBytes} bytes.`);
}

/** The caller's URL was too slow: its fault, not ours, so the reason says "invalid request" (400 at the edge). */
function timedOut(timeoutMs: number): GatewayError {
  return new GatewayError(GrpcStatus.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_INVALID_REQUEST, `Fetching the URL took longer than ${timeoutMs} ms.`);
}

/** URL without credentials, query or fragment, for messages: callers' URLs may carry tokens. */
function describe(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`.slice(0, 200);
}

/** The address to connect to: every address of the host must pass the policy; the first one is used. */
async function resolvePinned(url: URL, options: AddressPolicyOptions, resolveHost: ResolveHost): Promise<{ address: string; family: 4 | 6 }> {
  const host = unbracketHost(url.hostname);
  const literal = checkLiteral(host);
  let addresses: { address: string; family: number }[];
  if (literal) addresses = [literal];
  else {
    try {
      addresses = await resolveHost(host);
    } catch {
      throw refused(`The host of ${describe(url)} could not be resolved.`);
    }
  }
  if (addresses.length === 0) throw refused(`The host of ${describe(url)} could not be resolved.`);
  // All of them, not just the first: a name resolving to one public and one internal address
  // would otherwise let the connection land on the internal one.
  for (const entry of addresses) {
    const verdict = checkAddress(entry.address, options);
    if (!verdict.allowed) throw refused(`The URL ${describe(url)} points at a ${verdict.reason} address, which is not fetched.`);
  }
  const first = addresses[0]!;
  return { address: first.address, family: first.family === 6 ? 6 : 4 };
}

function checkLiteral(host: string): { address: string; family: number } | undefined {
  if (/^[\d.]+$/.test(host)) return { address: host, family: 4 };
  if (host.includes(':')) return { address: host, family: 6 };
  return undefined;
}

/** One GET whose connection goes to `pinned`, whatever DNS says by then (no rebinding). */
function get(url: URL, pinned: { address: string; family: 4 | 6 }, signal: AbortSignal): Promise<IncomingMessage> {
  const lookup: LookupFunction = (_hostname, options, callback) => {
    if (options.all) (callback as (error: null, addresses: { address: string; family: number }[]) => void)(null, [pinned]);
    else callback(null, pinned.address, pinned.family);
  };
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const outgoing = send(url, {
      method: 'GET',
      // A fresh connection per hop: a pooled one could belong to an address checked for another URL.
      agent: false,
      lookup,
      signal,
      headers: { accept: '*/*', 'accept-encoding': 'identity', 'user-agent': 'inference-gateway-media/1' },
    });
    outgoing.once('response', resolve);
    outgoing.once('error', reject);
    outgoing.end();
  });
}

async function readBody(response: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.destroy();
    throw tooLarge(maxBytes);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of response) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) {
      response.destroy();
      throw tooLarge(maxBytes);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, size);
}

/**
 * Fetches a public http(s) URL for a caller that cannot be trusted with our network position:
 * every hop's host is resolved and checked against the address policy before connecting, the
 * connection is pinned to the checked address, redirects are followed at most `maxRedirects` times
 * (each re-checked), the body is capped and the whole fetch has one deadline.
 */
export async function fetchUrl(
  rawUrl: string,
  request: { maxBytes: number; timeoutMs: number },
  options: UrlFetchOptions = {},
  caller?: AbortSignal,
): Promise<FetchedUrl> {
  const limits: UrlFetchLimits = { ...DEFAULT_URL_FETCH_LIMITS, ...options.limits };
  const maxBytes = request.maxBytes > 0 ? Math.min(request.maxBytes, limits.maxBytes) : limits.maxBytes;
  const timeoutMs = request.timeoutMs > 0 ? Math.min(request.timeoutMs, limits.maxTimeoutMs) : limits.defaultTimeoutMs;
  if (rawUrl.length > limits.maxUrlLength) throw refused(`The URL is longer than ${limits.maxUrlLength} characters.`);
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw refused('The URL is not a valid absolute URL.');
  }

  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), timeoutMs);
  const onCallerAbort = () => deadline.abort();
  caller?.addEventListener('abort', onCallerAbort, { once: true });
  const policy: AddressPolicyOptions = { allowLoopback: options.allowLoopback === true };
  try {
    for (let redirects = 0; ; redirects++) {
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw refused(`Only http and https URLs are fetched, not ${url.protocol.replace(/:$/, '')}.`);
      if (url.username !== '' || url.password !== '') throw refused('URLs carrying credentials are not fetched.');
      const pinned = await withDeadline(resolvePinned(url, policy, options.resolveHost ?? systemResolveHost), deadline.signal);
      let response: IncomingMessage;
      try {
        response = await get(url, pinned, deadline.signal);
      } catch (error) {
        if (deadline.signal.aborted) throw error;
        throw refused(`Fetching ${describe(url)} failed: ${error instanceof Error ? error.message : String(error)}.`);
      }
      const status = response.statusCode ?? 0;
      if (REDIRECT_STATUSES.has(status)) {
        response.resume();
        const location = response.headers.location;
        if (!location) throw refused(`${describe(url)} answered a redirect without a location.`);
        if (redirects >= limits.maxRedirects) throw refused(`The URL redirected more than ${limits.maxRedirects} times.`);
        try {
          url = new URL(location, url);
        } catch {
          throw refused(`${describe(url)} redirected to an invalid URL.`);
        }
        continue;
      }
      if (status < 200 || status >= 300) {
        response.resume();
        throw refused(`${describe(url)} answered HTTP ${status}.`);
      }
      const data = await readBody(response, maxBytes);
      const contentType = String(response.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
      return { data, contentType, finalUrl: url.href };
    }
  } catch (error) {
    if (deadline.signal.aborted && !(error instanceof GatewayError && error.reason === ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE)) {
      if (caller?.aborted) throw new GatewayError(GrpcStatus.CANCELLED, ErrorReason.ERROR_REASON_UNSPECIFIED, 'The caller cancelled the fetch.');
      throw timedOut(timeoutMs);
    }
    throw error;
  } finally {
    clearTimeout(timer);
    caller?.removeEventListener('abort', onCallerAbort);
  }
}

function withDeadline<Value>(promise: Promise<Value>, signal: AbortSignal): Promise<Value> {
  if (signal.aborted) return Promise.reject(new Error('aborted'));
  return new Promise<Value>((resolve, reject) => {
    const onAbort = () => reject(new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
