import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { CatalogChanged, KeysChanged } from '@gateway/proto';
import { subjects } from '@gateway/platform';
import { eventually } from '@gateway/testing';
import { rawRequest, snapshot, useEdgeFixture } from './edge-fixture.js';
import { model } from './fakes.js';

// The edge's body limits, route dispatch, request ids, catalog and account routes and its API key cache,
// through a real edge in front of fake services (edge-fixture.ts).
const fixture = useEdgeFixture();
const { client } = fixture;

describe('body limits', () => {
  it('413 on a chunked body that grows past 32 MiB, counted while reading', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    const answer = await rawRequest(fixture.edge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      write: (request) => {
        let sent = 0;
        const pump = () => {
          while (sent < 40) {
            sent++;
            if (!request.write(chunk)) {
              request.once('drain', pump);
              return;
            }
          }
          request.end();
        };
        request.on('error', () => undefined);
        pump();
      },
    }).catch((error: unknown) => ({ status: -1, headers: {} as Record<string, string | undefined>, body: String(error) }));
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body).error.type).toBe('invalid_request_error');
    expect(answer.headers['x-request-id']).toBeTruthy();
  });

  it('408 when the body stalls', async () => {
    const answer = await rawRequest(fixture.slowEdge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'content-length': '100' },
      write: (request) => request.write('{"model":'),
    });
    expect(answer.status).toBe(408);
    expect(answer.headers['x-request-id']).toBeTruthy();
  });

  it('400 on a body that is not JSON', async () => {
    const answer = await rawRequest(fixture.edge.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json' },
      write: (request) => request.end('{"model": nope'),
    });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).error.type).toBe('invalid_request_error');
  });
});

describe('inference route dispatch', () => {
  // POST /v1/chat/completions is handed to its handler directly; other spellings go through express.
  it('answers every spelling express accepts the same way, with a query string too', async () => {
    const body = JSON.stringify({ model: 'chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    for (const path of ['/v1/chat/completions', '/v1/chat/completions?trace=1', '/v1/chat/completions/', '/V1/Chat/Completions']) {
      const answer = await rawRequest(fixture.edge.url, {
        method: 'POST', path,
        headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json', 'x-request-id': 'dispatch-check-1' },
        write: (request) => request.end(body),
      });
      expect(answer.status, path).toBe(200);
      expect(JSON.parse(answer.body).choices[0].message.content, path).toBe('Hello there.');
      expect(answer.headers['x-request-id'], path).toBe('dispatch-check-1');
      expect(answer.headers['x-gateway-api-version'], path).toBe('2026-03-31');
      // The caller's id is echoed only: the router (and so the usage event and charge) gets the gateway's own id.
      const gatewayId = answer.headers['x-gateway-request-id'] as string;
      expect(gatewayId, path).toMatch(/^req_[0-9a-f]{32}$/);
      expect(fixture.fakes.router.chats.at(-1)?.context?.requestId, path).toBe(gatewayId);
    }
  });

  it('answers errors on both paths in the same envelope', async () => {
    const answers = [];
    for (const path of ['/v1/chat/completions', '/v1/chat/completions/']) {
      answers.push(await rawRequest(fixture.edge.url, {
        method: 'POST', path, headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json' }, write: (request) => request.end('{not json'),
      }));
    }
    for (const answer of answers) {
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).error).toMatchObject({ type: 'invalid_request_error' });
      expect(answer.headers['x-request-id']).toMatch(/^req_/);
    }
    expect(JSON.parse(answers[0]!.body).error.message).toBe(JSON.parse(answers[1]!.body).error.message);
    // Other methods on the inference path are express's: 404 in the envelope.
    const get = await rawRequest(fixture.edge.url, { method: 'GET', path: '/v1/chat/completions' });
    expect(get.status).toBe(404);
    expect(JSON.parse(get.body).error.type).toBeTruthy();
  });
});

describe('x-request-id', () => {
  it('is on every response, errors included, and a caller-supplied valid id is honoured', async () => {
    const paths: Array<[string, string, Record<string, string>]> = [
      ['GET', '/v1/models', {}],
      ['GET', '/v1/nowhere', {}],
      ['GET', '/v1/models', { authorization: 'Bearer sk-wrong' }],
      ['POST', '/v1/chat/completions', {}],
      ['GET', '/v1/account/balance', {}],
    ];
    for (const [method, path, headers] of paths) {
      const answer = await rawRequest(fixture.edge.url, { method, path, headers });
      expect(answer.headers['x-request-id'], `${method} ${path}`).toMatch(/^req_[0-9a-f]{32}$/);
      expect(answer.headers['x-gateway-api-version']).toBe('2026-03-31');
    }
    const honoured = await rawRequest(fixture.edge.url, { method: 'GET', path: '/v1/nowhere', headers: { 'x-request-id': 'client-chosen-id-123' } });
    expect(honoured.status).toBe(404);
    expect(JSON.parse(honoured.body).error.type).toBeTruthy();
    expect(honoured.headers['x-request-id']).toBe('client-chosen-id-123');
    const replaced = await rawRequest(fixture.edge.url, { method: 'GET', path: '/v1/models', headers: { 'x-request-id': 'bad id!' } });
    expect(replaced.headers['x-request-id']).toMatch(/^req_/);
  });
});

describe('catalog routes', () => {
  it('lists models newest first in the spec 2.6 shape', async () => {
    const page = await client('unused').models.list({ headers: { authorization: null } } as never);
    const ids = page.data.map((entry) => entry.id);
    expect(ids).toEqual(['acme/free-tiny', 'acme/chat-small', 'acme/embed', 'acme/retired']);
    const response = await fetch(`${fixture.edge.url}/v1/models`);
    const text = await response.text();
    // Prices are JSON numbers written from the decimal text (no 5e-7).
    expect(text).toContain('"per_input_token":0.0000005');
    const chatSmall = (JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/chat-small');
    expect(chatSmall).toMatchObject({
      object: 'model',
      created: 1_767_225_600,
      owned_by: 'acme',
      supported_endpoints: ['chat.completions', 'messages'],
      pricing: { per_input_token: 0.0000005, per_output_token: 0.0000015 },
      architecture: { input_modalities: ['text'], output_modalities: ['text'] },
      available_tiers: ['free', 'tier-1'],
      context_window: 128_000,
    });
    const retired = (JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/retired');
    expect(retired?.expires_at).toBe(1_700_000_000);
    expect((JSON.parse(text) as { data: Array<Record<string, unknown>> }).data.find((entry) => entry.id === 'acme/free-tiny')?.owned_by).toBeNull();
  });

  it('narrows the listing to what the balance reaches; a wrong key is 401', async () => {
    const rich = await client('sk-good').models.list();
    expect(rich.data.map((entry) => entry.id)).toContain('acme/chat-small');
    const poor = await client('sk-poor').models.list();
    expect(poor.data.map((entry) => entry.id)).toEqual(['acme/free-tiny']);
    const wrong = await client('sk-wrong').models.list().catch((error: unknown) => error);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('serves /v1/models from memory: no Catalog call per request', async () => {
    const before = fixture.fakes.catalog.snapshotCalls;
    for (let index = 0; index < 20; index++) {
      const response = await fetch(`${fixture.edge.url}/v1/models`);
      expect(response.status).toBe(200);
      await response.arrayBuffer();
    }
    expect(fixture.fakes.catalog.snapshotCalls).toBe(before);
  });

  it('gets one model by id or alias, 404 otherwise', async () => {
    const byAlias = await client('sk-good').models.retrieve('chat-small');
    expect(byAlias.id).toBe('acme/chat-small');
    const byId = await client('sk-good').models.retrieve('acme/chat-small');
    expect(byId).toMatchObject({ id: 'acme/chat-small', object: 'model', owned_by: 'acme' });
    const rawPath = await fetch(`${fixture.edge.url}/v1/models/acme/chat-small`);
    expect(((await rawPath.json()) as { id: string }).id).toBe('acme/chat-small');
    const missing = await client('sk-good').models.retrieve('nobody/nothing').catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('lists startups by name, limits per tier, and serves icons at both paths', async () => {
    const startups = (await (await fetch(`${fixture.edge.url}/v1/startups`)).json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(startups.object).toBe('list');
    expect(startups.data.map((startup) => startup.id)).toEqual(['acme', 'zeta']);
    expect(startups.data[1]).toMatchObject({ object: 'startup', website_url: null, icon_url: '/static/startups/zeta.svg' });
    const all = (await (await fetch(`${fixture.edge.url}/v1/limits`)).json()) as { data: Array<{ tiers: Record<string, unknown> }> };
    expect(Object.keys(all.data[0]?.tiers ?? {})).toEqual(['free', 'tier-1']);
    const mine = (await (await fetch(`${fixture.edge.url}/v1/limits`, { headers: { authorization: 'Bearer sk-poor' } })).json()) as {
      data: Array<{ id: string; object: string; tiers: Record<string, unknown> }>;
    };
    expect(mine.data).toEqual([{ id: 'default', object: 'limit_group', tiers: { free: { minute: 20, day: 200 } } }]);
    for (const path of ['/v1/startups/acme/icon.svg', '/static/startups/acme.svg']) {
      const icon = await fetch(`${fixture.edge.url}${path}`);
      expect(icon.status).toBe(200);
      expect(icon.headers.get('content-type')).toBe('image/svg+xml');
      expect(await icon.text()).toContain('<title>acme</title>');
    }
    expect((await fetch(`${fixture.edge.url}/v1/startups/nobody/icon.svg`)).status).toBe(404);
  });

  it('picks up a new catalog version on a catalog.changed broadcast', async () => {
    fixture.fakes.catalog.snapshot = snapshot('v2', [model({ id: 'acme/brand-new', created: 1_768_000_000n })]);
    fixture.testBus.bus.broadcast(subjects.catalogChanged, CatalogChanged.encode({ version: 'v2' }).finish());
    await eventually(async () => {
      const page = (await (await fetch(`${fixture.edge.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
      expect(page.data[0]?.id).toBe('acme/brand-new');
    });
  });
});

describe('account routes', () => {
  it('answers the balance as a decimal string for a provisioning key; an API key there is 401', async () => {
    const ok = await fetch(`${fixture.edge.url}/v1/account/balance`, { headers: { authorization: 'Bearer pk-good' } });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ balance: '10.5' });
    const withApiKey = await fetch(`${fixture.edge.url}/v1/account/balance`, { headers: { authorization: 'Bearer sk-good' } });
    expect(withApiKey.status).toBe(401);
    expect(((await withApiKey.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
  });
});

describe('API key cache', () => {
  it('serves a verified key from cache and drops it on a keys.changed broadcast', async () => {
    const openai = client('sk-revocable');
    await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    const callsAfterFirst = fixture.fakes.auth.verifyCalls;
    // Revoked at Auth, but the edge still holds the answer: served without another Auth call.
    fixture.fakes.auth.apiKeys.delete('sk-revocable');
    await openai.chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(fixture.fakes.auth.verifyCalls).toBe(callsAfterFirst);
    fixture.testBus.bus.broadcast(subjects.keysChanged, KeysChanged.encode({ accountId: 'acct_1', keyIds: ['key_9'] }).finish());
    await eventually(async () => {
      const failure = await openai.chat.completions
        .create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] })
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.AuthenticationError);
    });
    // Other keys of the account stay cached.
    const before = fixture.fakes.auth.verifyCalls;
    await client('sk-good').chat.completions.create({ model: 'acme/chat-small', messages: [{ role: 'user', content: 'Hi' }] });
    expect(fixture.fakes.auth.verifyCalls).toBe(before);
  });
});
