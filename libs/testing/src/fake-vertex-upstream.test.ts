import { createSign } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestServiceAccount, startFakeVertexUpstream, type FakeVertexUpstream, type TestServiceAccount } from './fake-vertex-upstream.js';

const PROJECT = 'p-1';
const LOCATION = 'europe-west1';
const SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
const claudePath = (method = 'rawPredict', project = PROJECT, location = LOCATION) =>
  `/v1/projects/${project}/locations/${location}/publishers/anthropic/models/claude-sonnet-4-5@20250929:${method}`;

const segment = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A grant JWT signed RS256 by hand (what google-auth-library sends), claims overridable. */
function assertion(privateKey: string, claims: Record<string, unknown>, header: Record<string, unknown> = { alg: 'RS256', typ: 'JWT' }): string {
  const unsigned = `${segment(header)}.${segment(claims)}`;
  const signature = createSign('RSA-SHA256').update(unsigned).sign(privateKey).toString('base64url');
  return `${unsigned}.${signature}`;
}

describe('fake Vertex upstream', () => {
  let account: TestServiceAccount;
  let stranger: TestServiceAccount;
  let upstream: FakeVertexUpstream;

  const now = () => Math.floor(Date.now() / 1000);
  const claims = (extra: Record<string, unknown> = {}) => ({ iss: account.clientEmail, aud: upstream.tokenUri, scope: SCOPE, iat: now(), exp: now() + 3600, ...extra });

  async function grant(body: string, contentType = 'application/x-www-form-urlencoded') {
    const response = await fetch(upstream.tokenUri, { method: 'POST', headers: { 'content-type': contentType }, body });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  }
  const form = (jwt: string) => new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion: jwt }).toString();

  async function token(): Promise<string> {
    const answer = await grant(form(assertion(account.privateKey, claims())));
    expect(answer.status).toBe(200);
    return answer.body.access_token as string;
  }

  async function post(path: string, body: unknown, bearer?: string) {
    const response = await fetch(`${upstream.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
      body: JSON.stringify(body),
    });
    return { status: response.status, type: response.headers.get('content-type') ?? '', text: await response.text() };
  }

  const claudeBody = { anthropic_version: 'vertex-2023-10-16', max_tokens: 32, messages: [{ role: 'user', content: 'Hi' }] };

  beforeAll(async () => {
    account = createTestServiceAccount();
    stranger = createTestServiceAccount(account.clientEmail);
    upstream = await startFakeVertexUpstream({ project: PROJECT, location: LOCATION, serviceAccounts: [{ clientEmail: account.clientEmail, publicKey: account.publicKey }] });
  });
  afterAll(() => upstream.close());
  beforeEach(() => { upstream.reset(); upstream.setTokenLifetime(3600); });

  it('writes a key file whose token_uri is the fake, and gives a Bearer token for a valid grant', async () => {
    const file = JSON.parse(account.keyFile(upstream.tokenUri));
    expect(file).toMatchObject({ type: 'service_account', client_email: account.clientEmail, token_uri: upstream.tokenUri, private_key: account.privateKey });
    const answer = await grant(form(assertion(account.privateKey, claims())));
    expect(answer).toEqual({ status: 200, body: { access_token: expect.stringMatching(/^ya29\.fake-/), expires_in: 3600, token_type: 'Bearer' } });
  });

  it('refuses grants Google refuses: foreign signature, unknown account, wrong audience, no scope, too long or expired, wrong grant type or encoding', async () => {
    const issued = upstream.tokensIssued;
    const refusal = async (jwt: string) => (await grant(form(jwt))).body;
    expect(await refusal(assertion(stranger.privateKey, claims()))).toEqual({ error: 'invalid_grant', error_description: 'Invalid JWT Signature.' });
    expect(await refusal(assertion(account.privateKey, claims({ iss: 'nobody@x.iam.gserviceaccount.com' })))).toMatchObject({ error: 'invalid_grant', error_description: 'Invalid grant: account not found' });
    expect(await refusal(assertion(account.privateKey, claims({ aud: 'https://elsewhere.example/token' })))).toMatchObject({ error: 'invalid_grant', error_description: expect.stringContaining('audience') });
    expect(await refusal(assertion(account.privateKey, claims({ scope: 'https://www.googleapis.com/auth/userinfo.email' })))).toMatchObject({ error: 'invalid_scope' });
    expect(await refusal(assertion(account.privateKey, claims({ exp: now() + 7200 })))).toMatchObject({ error: 'invalid_grant', error_description: expect.stringContaining('short-lived') });
    expect(await refusal(assertion(account.privateKey, claims({ iat: now() - 7200, exp: now() - 3600 })))).toMatchObject({ error: 'invalid_grant' });
    expect(await refusal(assertion(account.privateKey, claims(), { alg: 'none' }))).toMatchObject({ error: 'invalid_grant' });
    expect((await grant(new URLSearchParams({ grant_type: 'client_credentials', assertion: assertion(account.privateKey, claims()) }).toString())).body).toMatchObject({ error: 'unsupported_grant_type' });
    expect((await grant(JSON.stringify({ grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer' }), 'application/json')).status).toBe(400);
    expect(upstream.tokensIssued).toBe(issued);
  });

  it('model routes need a token it gave out, still valid: 401 UNAUTHENTICATED in Google\'s body otherwise', async () => {
    const expected = { error: { code: 401, message: expect.stringMatching(/^Request had invalid authentication credentials/), status: 'UNAUTHENTICATED' } };
    const missing = await post(claudePath(), claudeBody);
    expect(missing.status).toBe(401);
    expect(JSON.parse(missing.text)).toEqual(expected);
    expect(JSON.parse((await post(claudePath(), claudeBody, 'ya29.made-up')).text)).toEqual(expected);
    upstream.setTokenLifetime(1);
    const shortLived = await token();
    expect((await post(claudePath(), claudeBody, shortLived)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await post(claudePath(), claudeBody, shortLived)).status).toBe(401);
    const revoked = await token();
    upstream.revokeTokens();
    expect((await post(claudePath(), claudeBody, revoked)).status).toBe(401);
  });

  it('checks project (403), location (400) and publisher model route (404)', async () => {
    const bearer = await token();
    const otherProject = await post(claudePath('rawPredict', 'p-2'), claudeBody, bearer);
    expect(otherProject.status).toBe(403);
    expect(JSON.parse(otherProject.text).error.status).toBe('PERMISSION_DENIED');
    const otherLocation = await post(claudePath('rawPredict', PROJECT, 'us-east5'), claudeBody, bearer);
    expect(otherLocation.status).toBe(400);
    expect(JSON.parse(otherLocation.text).error.status).toBe('INVALID_ARGUMENT');
    expect((await post(claudePath('predict'), claudeBody, bearer)).status).toBe(404);
  });

  it('Claude routes refuse a body with model or without anthropic_version vertex-2023-10-16, and answer Anthropic\'s format otherwise', async () => {
    const bearer = await token();
    const withModel = await post(claudePath(), { ...claudeBody, model: 'claude-sonnet-4-5' }, bearer);
    expect(withModel.status).toBe(400);
    expect(JSON.parse(withModel.text)).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'model: Extra inputs are not permitted' } });
    const { anthropic_version: _version, ...unversioned } = claudeBody;
    expect(JSON.parse((await post(claudePath(), unversioned, bearer)).text).error.message).toBe('anthropic_version: Field required');
    expect((await post(claudePath(), { ...claudeBody, anthropic_version: '2023-06-01' }, bearer)).status).toBe(400);
    // Anthropic's own checks still apply (the relayed fake validates the body).
    expect((await post(claudePath(), { ...claudeBody, max_tokens: undefined }, bearer)).status).toBe(400);

    const whole = await post(claudePath(), claudeBody, bearer);
    expect(whole.status).toBe(200);
    expect(JSON.parse(whole.text)).toMatchObject({ type: 'message', model: 'claude-sonnet-4-5@20250929', content: [{ type: 'text', text: 'Hello from the fake upstream.' }] });
    const streamed = await post(claudePath('streamRawPredict'), { ...claudeBody, stream: true }, bearer);
    expect(streamed.type).toMatch(/^text\/event-stream/);
    expect(streamed.text).toContain('event: message_start');
    expect(streamed.text).toContain('event: message_stop');
  });

  it('Gemini routes answer through the fake Gemini API: JSON and SSE with CRLF line ends', async () => {
    const bearer = await token();
    const gemini = (method: string) => `/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/gemini-2.5-flash:${method}`;
    const body = { contents: [{ role: 'user', parts: [{ text: 'Hi' }] }] };
    const whole = await post(gemini('generateContent'), body, bearer);
    expect(whole.status).toBe(200);
    expect(JSON.parse(whole.text).candidates[0].content.parts[0].text).toBe('Hello from the fake upstream.');
    const streamed = await post(`${gemini('streamGenerateContent')}?alt=sse`, body, bearer);
    expect(streamed.type).toMatch(/^text\/event-stream/);
    expect(streamed.text).toMatch(/^data: \{.*\}\r\n\r\n/);
    // The Gemini API's refusals hold here too (an unknown field).
    expect((await post(gemini('generateContent'), { ...body, bogus: 1 }, bearer)).status).toBe(400);
    expect(upstream.gemini.requests[0]!.path).toBe('/v1beta/models/gemini-2.5-flash:generateContent');
  });
  it('embeds on :predict as Vertex does, refusing what it refuses (no instances, unknown fields, several inputs for gemini-embedding)', async () => {
    const bearer = await token();
    const predict = (model: string) => `/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/${model}:predict`;
    const answer = await post(predict('text-embedding-005'), { instances: [{ content: 'a b c d e' }, { content: 'x' }], parameters: { outputDimensionality: 3 } }, bearer);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).predictions).toEqual([
      { embeddings: { values: expect.any(Array), statistics: { token_count: 3, truncated: false } } },
      { embeddings: { values: expect.any(Array), statistics: { token_count: 1, truncated: false } } },
    ]);
    expect(JSON.parse(answer.text).predictions[0].embeddings.values).toHaveLength(3);
    expect((await post(predict('text-embedding-005'), { instances: [] }, bearer)).status).toBe(400);
    expect((await post(predict('text-embedding-005'), { instances: [{ content: 'a', bogus: 1 }] }, bearer)).status).toBe(400);
    expect((await post(predict('text-embedding-005'), { instances: [{ content: 'a' }], parameters: { dimensions: 3 } }, bearer)).status).toBe(400);
    expect((await post(predict('gemini-embedding-001'), { instances: [{ content: 'a' }, { content: 'b' }] }, bearer)).status).toBe(400);
    expect((await post(predict('gemini-embedding-001'), { instances: [{ content: 'a' }] }, bearer)).status).toBe(200);
    expect((await post(predict('gemini-embedding-001'), { instances: [{ content: 'a' }] })).status).toBe(401);
  });
});
