import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { startFakeAnthropicUpstream, type FakeAnthropicUpstream } from './fake-anthropic-upstream.js';
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from './fake-gemini-upstream.js';
import { listenOnLoopback, readBody } from './fake-upstream-support.js';
import type { RecordedRequest } from './fake-upstream-types.js';
import { answerVertexPredict } from './fake-vertex-embeddings.js';
import { oauthGrantChecker } from './fake-vertex-oauth.js';

export { createTestServiceAccount, type TestServiceAccount } from './fake-vertex-oauth.js';
export { fakeVertexEmbedding } from './fake-vertex-embeddings.js';

/** The body version Claude on Vertex requires (Anthropic's Vertex SDK sends it; Google's docs name it). */
export const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';
/** The header version the inner Anthropic fake speaks. */
const INNER_ANTHROPIC_VERSION = '2023-06-01';
const INNER_KEY = 'fake-vertex-inner-key';

export interface FakeVertexUpstreamOptions {
  project: string;
  location: string;
  /** The service accounts Google knows: client_email and the SPKI PEM public key of each. */
  serviceAccounts: { clientEmail: string; publicKey: string }[];
  /** Lifetime of the access tokens the token endpoint gives out (default 3600 s, as Google's). */
  tokenLifetimeSeconds?: number;
}

export interface FakeVertexUpstream {
  /** The API root, as a Vertex provider's base_url (`http://127.0.0.1:port`). */
  url: string;
  /** The token endpoint a service-account file's `token_uri` names. */
  tokenUri: string;
  /** The Claude half: script it, sign thinking with it. Its own `requests` hold the bodies as Anthropic sees them. */
  anthropic: FakeAnthropicUpstream;
  /** The Gemini half (the fake Gemini API): script it, get thought signatures from it. */
  gemini: FakeGeminiUpstream;
  /** Model-route requests as received (Vertex paths, bearer token, Vertex-shaped bodies). */
  requests: RecordedRequest[];
  /** Grants asked of the token endpoint (answered or refused). */
  tokenRequests: number;
  /** Grants answered with a token. */
  tokensIssued: number;
  setTokenLifetime(seconds: number): void;
  /**
   * How the next grants are answered, one script each: after `delayMs`, and with `status` (Google's
   * error body) instead of checking the grant. Unscripted grants are checked and answered at once.
   */
  scriptToken(...scripts: { status?: number; delayMs?: number }[]): void;
  /** Every access token given out so far stops working (as after a revocation). */
  revokeTokens(): void;
  reset(): void;
  close(): Promise<void>;
}

const MODEL_ROUTE = /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/([^/]+)\/models\/([^/:]+):([A-Za-z]+)$/;

/** Google's error body (google.rpc.Status as JSON), as Vertex answers refusals of its own. */
function googleError(response: ServerResponse, code: number, status: string, message: string) {
  response.writeHead(code, { 'content-type': 'application/json; charset=UTF-8' });
  response.end(JSON.stringify({ error: { code, message, status } }));
}

/** An Anthropic-format 400, as Vertex relays Claude's own validation. */
function anthropicInvalid(response: ServerResponse, message: string) {
  response.writeHead(400, { 'content-type': 'application/json' });
  response.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message } }));
}

/**
 * Vertex AI on a real loopback HTTP server. The token endpoint (a service-account file's `token_uri`)
 * takes Google's signed-JWT grant and checks its RS256 signature with the account's public key, its
 * issuer, audience, scope and lifetime; the model routes then require one of the access tokens it gave
 * out (401 UNAUTHENTICATED otherwise), the configured project (403) and location (400).
 * `publishers/anthropic/models/{model}:rawPredict|streamRawPredict` take the Messages body without
 * `model` and with `anthropic_version: vertex-2023-10-16` and are answered by a fake Anthropic upstream
 * (same scripting, validation and thinking signatures); `publishers/google/models/{model}:generateContent|
 * streamGenerateContent` by a fake Gemini API (its validation, thought signatures and SSE); `:predict` of
 * Google's embedding models here (fake-vertex-embeddings.ts).
 */
export async function startFakeVertexUpstream(options: FakeVertexUpstreamOptions): Promise<FakeVertexUpstream> {
  const anthropic = await startFakeAnthropicUpstream({ apiKey: INNER_KEY });
  const gemini = await startFakeGeminiUpstream({ apiKey: INNER_KEY });
  const anthropicPort = Number(new URL(anthropic.url).port);
  const geminiPort = Number(new URL(gemini.url).port);
  const requests: RecordedRequest[] = [];
  let tokenLifetime = options.tokenLifetimeSeconds ?? 3_600;
  let tokenUri = '';
  const counts = { tokenRequests: 0, tokensIssued: 0 };
  const tokenScripts: { status?: number; delayMs?: number }[] = [];
  const oauth = oauthGrantChecker({
    accounts: new Map(options.serviceAccounts.map((account) => [account.clientEmail, account.publicKey])),
    get tokenUri() { return tokenUri; },
    tokenLifetimeSeconds: () => tokenLifetime,
  });

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const raw = await readBody(request);
    const url = new URL(request.url ?? '/', 'http://fake');
    if (url.pathname === '/token') {
      counts.tokenRequests++;
      const script = tokenScripts.shift();
      if (script?.delayMs) await new Promise((resolve) => setTimeout(resolve, script.delayMs));
      if (script?.status) {
        response.writeHead(script.status, { 'content-type': 'application/json; charset=utf-8' });
        response.end(JSON.stringify({ error: 'internal_failure', error_description: `fake token endpoint error ${script.status}` }));
        return;
      }
      if (request.method !== 'POST') return googleError(response, 405, 'METHOD_NOT_ALLOWED', 'Method Not Allowed');
      const outcome = oauth.grant(request.headers['content-type'] ?? '', raw);
      if (outcome.status === 200) counts.tokensIssued++;
      response.writeHead(outcome.status, { 'content-type': 'application/json; charset=utf-8' });
      response.end(JSON.stringify(outcome.body));
      return;
    }

    let body: any;
    try { body = raw ? JSON.parse(raw) : undefined; } catch { body = undefined; }
    requests.push({ method: request.method ?? '', path: request.url ?? '', headers: request.headers, body, receivedAt: Date.now() });

    const route = MODEL_ROUTE.exec(url.pathname);
    if (request.method !== 'POST' || !route) return googleError(response, 404, 'NOT_FOUND', `The requested URL ${url.pathname} was not found on this server.`);
    if (!oauth.holder(request.headers.authorization)) {
      return googleError(response, 401, 'UNAUTHENTICATED',
        'Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.');
    }
    const [, project, location, publisher, model, method] = route as unknown as [string, string, string, string, string, string];
    if (decodeURIComponent(project) !== options.project) {
      return googleError(response, 403, 'PERMISSION_DENIED', `Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/${project}/locations/${location}/publishers/${publisher}/models/${model}' (or it may not exist).`);
    }
    if (decodeURIComponent(location) !== options.location) {
      return googleError(response, 400, 'INVALID_ARGUMENT', `Request location ${location} does not match the endpoint's location ${options.location}.`);
    }
    if (publisher === 'anthropic' && (method === 'rawPredict' || method === 'streamRawPredict')) {
      return claude(request, response, raw, body, decodeURIComponent(model));
    }
    if (publisher === 'google' && method === 'predict') return answerVertexPredict(response, body, decodeURIComponent(model));
    if (publisher === 'google' && (method === 'generateContent' || method === 'streamGenerateContent')) {
      // The Gemini API's request and answer formats are Vertex's too; only the path and the auth differ.
      const alt = url.searchParams.get('alt');
      return relay(request, response, geminiPort, `/v1beta/models/${model}:${method}${alt ? `?alt=${encodeURIComponent(alt)}` : ''}`, { 'x-goog-api-key': INNER_KEY }, raw);
    }
    return googleError(response, 404, 'NOT_FOUND', `Publisher Model \`projects/${project}/locations/${location}/publishers/${publisher}/models/${model}\` was not found or your project does not have access to it.`);
  }

  /** Vertex's own checks of a Claude body, then the Anthropic fake answers it (relayed as it streams). */
  function claude(request: IncomingMessage, response: ServerResponse, raw: string, body: any, model: string) {
    if (!body || typeof body !== 'object' || Array.isArray(body)) return anthropicInvalid(response, raw ? 'There was an error parsing the body: invalid JSON' : 'body: Field required');
    if ('model' in body) return anthropicInvalid(response, 'model: Extra inputs are not permitted');
    if (body.anthropic_version === undefined) return anthropicInvalid(response, 'anthropic_version: Field required');
    if (body.anthropic_version !== VERTEX_ANTHROPIC_VERSION) return anthropicInvalid(response, `anthropic_version: invalid version ${String(body.anthropic_version)}`);
    const { anthropic_version: _version, ...rest } = body;
    return relay(request, response, anthropicPort, '/v1/messages', { 'anthropic-version': INNER_ANTHROPIC_VERSION, 'x-api-key': INNER_KEY }, JSON.stringify({ model, ...rest }));
  }

  /** Forwards a request to an inner fake and relays its answer as it arrives, cuts and stalls included. */
  function relay(request: IncomingMessage, response: ServerResponse, port: number, path: string, headers: Record<string, string>, forwarded: string) {
    const inner = httpRequest({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(forwarded), ...headers },
    }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, {
        'content-type': answer.headers['content-type'] ?? 'application/json',
        ...(answer.headers['retry-after'] ? { 'retry-after': answer.headers['retry-after'] } : {}),
      });
      response.flushHeaders();
      answer.on('data', (chunk: Buffer) => response.write(chunk));
      answer.on('end', () => response.end());
      // The inner fake cut its answer (scripted): Vertex's connection drops the same way.
      answer.on('aborted', () => request.socket.destroy());
      answer.on('error', () => request.socket.destroy());
    });
    inner.on('error', () => request.socket.destroy());
    // The client gave up: the inner fake sees its connection close too.
    response.on('close', () => { if (!response.writableFinished) inner.destroy(); });
    inner.end(forwarded);
  }

  const server = await listenOnLoopback(handle);
  const url = `http://127.0.0.1:${server.port}`;
  tokenUri = `${url}/token`;

  return {
    url,
    tokenUri,
    anthropic,
    gemini,
    requests,
    get tokenRequests() { return counts.tokenRequests; },
    get tokensIssued() { return counts.tokensIssued; },
    setTokenLifetime: (seconds) => { tokenLifetime = seconds; },
    scriptToken: (...scripts) => { tokenScripts.push(...scripts); },
    revokeTokens: () => oauth.revokeAll(),
    reset: () => { requests.length = 0; tokenScripts.length = 0; anthropic.reset(); gemini.reset(); },
    close: async () => { await server.close(); await Promise.all([anthropic.close(), gemini.close()]); },
  };
}
