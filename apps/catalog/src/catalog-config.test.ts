import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { buildCatalog, iconSourceFor } from './catalog-data.js';
import { validateCatalogText } from '@gateway/platform/catalog-document';

const examplePath = fileURLToPath(new URL('../../../deploy/config/gateway.example.yaml', import.meta.url));

const valid = `
startups:
  - { id: acme, display_name: Acme AI }
providers:
  - { id: sim, kind: simulated }
  - { id: cloud, kind: openai, base_url: "http://127.0.0.1:9000/v1", api_key_env: CLOUD_API_KEY }
limit_groups:
  - id: default
    tiers: { free: { minute: 20, day: 200 }, tier-1: { minute: 600 } }
models:
  - id: acme/chat-small
    owned_by: acme
    created: 1767225600
    aliases: [chat-small]
    pricing: { per_input_token: 0.0000005, per_output_token: 0.0000015, per_cached_input_token: "0.0000001", per_token: 1e-7 }
    offers:
      - { provider: sim, endpoints: [chat.completions] }
`;

const problemsOf = (text: string) => validateCatalogText(text).problems.map((problem) => `${problem.path}: ${problem.reason}`);

describe('validateCatalogText', () => {
  it('accepts a valid document and reads unquoted prices without float loss', () => {
    const { document, problems } = validateCatalogText(valid);
    expect(problems).toEqual([]);
    expect(document?.models[0]?.pricing).toEqual({
      per_input_token: '0.0000005',
      per_output_token: '0.0000015',
      per_cached_input_token: '0.0000001',
      per_token: '0.0000001',
    });
  });

  it('keeps prices exact where a float would not', () => {
    // As a float this is 12345678 (the fraction is lost); and 0.0000005 would print as "5e-7".
    const text = valid.replace('per_input_token: 0.0000005', 'per_input_token: 12345678.000000000001');
    expect(validateCatalogText(text).document?.models[0]?.pricing?.per_input_token).toBe('12345678.000000000001');
  });

  it('lists every problem of a document with its path', () => {
    const text = `
startups:
  - { id: acme, display_name: Acme AI, website_url: "not a url" }
  - { id: acme, display_name: Acme Again }
providers:
  - { id: sim, kind: simulated }
  - { id: remote, kind: openai }
  - { id: odd, kind: grpc }
limit_groups:
  - id: default
    tiers: { free: { minute: 0 }, tier-9: { minute: 1 } }
models:
  - id: acme/one
    owned_by: acme
    created: 1
    aliases: [one, acme/two]
    offers: [{ provider: sim, endpoints: [chat.completions] }]
  - id: acme/two
    owned_by: nobody
    created: 1.5
    aliases: [one]
    limit_group: premium
    pricing: { per_input_token: "0.0000000000001", per_output_token: -1, per_input_tokens: "1", per_token: "cheap" }
    offers: [{ provider: missing, endpoints: [chat, images.generations] }]
  - id: acme/two
    created: 3
    extra: true
    offers: []
  - id: orbit/speech
    created: 4
    reasoning_efforts: [high, low]
    offers: [{ provider: sim, endpoints: [audio.speech] }]
`;
    expect(problemsOf(text).sort()).toEqual(
      [
        'startups[0].website_url: must be an absolute URL or a path starting with /',
        'startups[1].id: duplicate id "acme" (also startups[0])',
        'providers[1].base_url: required for kind "openai"',
        'providers[2].kind: Invalid option: expected one of "openai"|"anthropic"|"gemini"|"vertex"|"bedrock"|"azure-openai"|"simulated"',
        'limit_groups[0].tiers.free.minute: Too small: expected number to be >=1',
        'limit_groups[0].tiers.tier-9: unknown field',
        'models[0].aliases[1]: alias "acme/two" is the id of models[1]',
        'models[1].owned_by: unknown startup "nobody"',
        'models[1].created: must be whole Unix seconds',
        'models[1].aliases[0]: alias "one" is also an alias of models[0]',
        'models[1].limit_group: unknown limit group "premium"',
        'models[1].pricing.per_input_token: has 13 decimals; at most 12 are allowed',
        'models[1].pricing.per_output_token: must be >= 0',
        'models[1].pricing.per_input_tokens: unknown field',
        'models[1].pricing.per_token: expected a decimal number such as "0.0000005", got "cheap"',
        'models[1].offers[0].endpoints[0]: Invalid option: expected one of "chat.completions"|"messages"|"responses"|"embeddings"|"moderations"|"images.generations"|"images.edits"|"audio.speech"|"audio.transcriptions"|"audio.translations"',
        'models[1].offers[0].provider: unknown provider "missing"',
        'models[1].max_images: required for a model served on an images endpoint',
        'models[2].id: duplicate id "acme/two" (also models[1])',
        'models[2].extra: unknown field',
        'models[2].offers: must list at least one provider offer',
        'models[3].voices: a model served on audio.speech must list its voices',
        'models[3].reasoning_efforts: must be distinct and lowest first (none, minimal, low, medium, high, xhigh)',
      ].sort(),
    );
  });

  it('reports YAML syntax errors with their line', () => {
    const problems = validateCatalogText('models:\n  - id: a\n   created: [1\n');
    expect(problems.problems.length).toBeGreaterThan(0);
    expect(problems.problems[0]?.path).toMatch(/^\(line \d+, column \d+\)$/);
    expect(problems.problems[0]?.reason).not.toMatch(/at line/);
  });

  it('refuses a document without models and one that is not a mapping', () => {
    expect(problemsOf('startups: []')).toEqual(['models: required']);
    expect(problemsOf('- a\n- b')[0]).toMatch(/^\(document\): expected a mapping/);
  });

  it('ignores unknown top-level sections but not unknown fields inside one', () => {
    expect(problemsOf(`${valid}\nrouting: { default: balanced }\n`)).toEqual([]);
    expect(problemsOf(valid.replace('kind: simulated', 'kind: simulated, weight: 3'))).toEqual(['providers[0].weight: unknown field']);
  });
});

describe('provider kinds (issue 26)', () => {
  const withProvider = (entry: string) => valid.replace(/providers:\n(  - .*\n)+/, `providers:\n  - { id: sim, kind: simulated }\n  - ${entry}\n`);

  it('accepts each kind configured as the README shows it', () => {
    for (const entry of [
      '{ id: gem, kind: gemini, base_url: "https://generativelanguage.googleapis.com/v1beta", api_key_env: GEMINI_API_KEY }',
      '{ id: gem2, kind: gemini, api_key_env: GEMINI_API_KEY, headers: { x-team: ml }, timeout_ms: 30000 }',
      '{ id: vtx, kind: vertex, base_url: "https://us-east5-aiplatform.googleapis.com", project: my-project, location: us-east5, credentials_file_env: GOOGLE_APPLICATION_CREDENTIALS }',
      '{ id: bdr, kind: bedrock, region: us-east-1, access_key_id_env: AWS_ACCESS_KEY_ID, secret_access_key_env: AWS_SECRET_ACCESS_KEY, session_token_env: AWS_SESSION_TOKEN }',
      '{ id: bdr2, kind: bedrock, region: eu-west-1 }',
      '{ id: az, kind: azure-openai, base_url: "https://my-resource.openai.azure.com", api_version: 2025-04-01-preview, api_key_env: AZURE_OPENAI_API_KEY }',
      '{ id: az1, kind: azure-openai, base_url: "https://my-resource.openai.azure.com", api_key_env: AZURE_OPENAI_API_KEY }',
    ]) expect(problemsOf(withProvider(entry)), entry).toEqual([]);
  });

  it('names the field a kind requires, one it does not take, and half a key pair', () => {
    expect(problemsOf(withProvider('{ id: vtx, kind: vertex, location: us-east5 }'))).toEqual(['providers[1].project: required for kind "vertex"']);
    expect(problemsOf(withProvider('{ id: bdr, kind: bedrock }'))).toEqual(['providers[1].region: required for kind "bedrock"']);
    expect(problemsOf(withProvider('{ id: az, kind: azure-openai, api_key_env: K }'))).toEqual(['providers[1].base_url: required for kind "azure-openai"']);
    expect(problemsOf(withProvider('{ id: gem, kind: gemini, region: us-east-1 }'))).toEqual([
      'providers[1].region: not a field of kind "gemini" (it takes base_url, api_key_env, headers, timeout_ms)',
    ]);
    expect(problemsOf(withProvider('{ id: bdr, kind: bedrock, region: us-east-1, access_key_id_env: AK }'))).toEqual([
      'providers[1].secret_access_key_env: access_key_id_env and secret_access_key_env go together (neither: the default AWS credential chain)',
    ]);
    expect(problemsOf(withProvider('{ id: gem, kind: gemini, headers: { "bad header": x } }'))[0]).toMatch(/^providers\[1\]\.headers/);
    expect(problemsOf(withProvider('{ id: gem, kind: gemini, timeout_ms: 0 }'))[0]).toMatch(/^providers\[1\]\.timeout_ms/);
  });

  it('carries the fields into the snapshot data only when set (a catalog without them keeps its version)', async () => {
    const { catalog } = await buildCatalog(withProvider('{ id: bdr, kind: bedrock, region: us-east-1, headers: { x-team: ml }, timeout_ms: 30000 }'), {});
    expect(catalog!.data.providers[1]).toEqual({ id: 'bdr', kind: 'bedrock', baseUrl: '', apiKeyEnv: '', region: 'us-east-1', headers: { 'x-team': 'ml' }, timeoutMs: 30000 });
    expect(catalog!.data.providers[0]).toEqual({ id: 'sim', kind: 'simulated', baseUrl: '', apiKeyEnv: '' });
  });
});

describe('moderation_model', () => {
  const withModeration = `${valid}
  - id: acme/mod
    created: 1767225602
    aliases: [mod]
    offers:
      - { provider: sim, endpoints: [moderations] }
  - id: acme/mod-b
    created: 1767225603
    offers:
      - { provider: sim, endpoints: [moderations] }
`;

  it('must name a model served on moderations, by id', () => {
    expect(problemsOf(`${withModeration}moderation_model: acme/mod-b\n`)).toEqual([]);
    expect(problemsOf(`${withModeration}moderation_model: mod\n`)).toEqual(['moderation_model: unknown model "mod" (give a model id, not an alias)']);
    expect(problemsOf(`${withModeration}moderation_model: acme/chat-small\n`)).toEqual([
      'moderation_model: models[0] ("acme/chat-small") is not served on the moderations endpoint',
    ]);
  });

  it('is served in the snapshot: the configured one, else the first by id that serves moderations', async () => {
    const { CatalogSnapshot } = await import('./catalog-snapshot.js');
    const snapshotOf = async (text: string) => new CatalogSnapshot('v', (await buildCatalog(text, {})).catalog!.data, new Map()).moderationModel;
    expect(await snapshotOf(`${withModeration}moderation_model: acme/mod-b\n`)).toBe('acme/mod-b');
    expect(await snapshotOf(withModeration)).toBe('acme/mod');
    expect(await snapshotOf(valid)).toBe('');
  });

  it('leaves the version of a catalog that does not set it unchanged by the field\'s existence', async () => {
    const { catalog } = await buildCatalog(valid, {});
    expect(catalog!.canonical).not.toContain('moderationModel');
  });
});

describe('default_models (issue 37: the model of a request that names none)', () => {
  const withMedia = `${valid}
  - id: acme/mod
    created: 1767225602
    offers:
      - { provider: sim, endpoints: [moderations] }
  - id: acme/img-b
    created: 1767225603
    max_images: 1
    offers:
      - { provider: sim, endpoints: [images.generations, images.edits] }
  - id: acme/img-a
    created: 1767225604
    max_images: 1
    offers:
      - { provider: sim, endpoints: [images.generations] }
`;

  it('maps an endpoint to a model served on it, by id', () => {
    expect(problemsOf(`${withMedia}default_models: { images.generations: acme/img-b, images.edits: acme/img-b }\n`)).toEqual([]);
    expect(problemsOf(`${withMedia}default_models: { images.edits: acme/img-a }\n`)).toEqual([
      'default_models.images.edits: models[3] ("acme/img-a") is not served on the images.edits endpoint',
    ]);
    expect(problemsOf(`${withMedia}default_models: { images.generations: img }\n`)).toEqual([
      'default_models.images.generations: unknown model "img" (give a model id, not an alias)',
    ]);
    expect(problemsOf(`${withMedia}default_models: { teleport: acme/img-a }\n`)[0]).toMatch(/^default_models\.teleport/);
  });

  it('is served in the snapshot: the configured one, else moderation_model for moderations, else the first by id served there', async () => {
    const { CatalogSnapshot } = await import('./catalog-snapshot.js');
    const defaultsOf = async (text: string) => new CatalogSnapshot('v', (await buildCatalog(text, {})).catalog!.data, new Map()).defaultModels;
    expect(await defaultsOf(withMedia)).toEqual({ moderations: 'acme/mod', 'images.generations': 'acme/img-a', 'images.edits': 'acme/img-b' });
    expect(await defaultsOf(`${withMedia}default_models: { images.generations: acme/img-b }\n`)).toEqual({
      moderations: 'acme/mod',
      'images.generations': 'acme/img-b',
      'images.edits': 'acme/img-b',
    });
    expect(await defaultsOf(valid)).toEqual({});
  });

  it('gives responses a default too (only POST /v1/responses/input_tokens, which calls no model, may leave `model` out): the configured one, else the first by id', async () => {
    const { CatalogSnapshot } = await import('./catalog-snapshot.js');
    const defaultsOf = async (text: string) => new CatalogSnapshot('v', (await buildCatalog(text, {})).catalog!.data, new Map()).defaultModels;
    const withChat = `${withMedia}  - id: acme/chat-z
    created: 1767225605
    offers:
      - { provider: sim, endpoints: [responses] }
  - id: acme/chat-y
    created: 1767225606
    offers:
      - { provider: sim, endpoints: [chat.completions, responses] }
`;
    expect((await defaultsOf(withChat))['responses']).toBe('acme/chat-y');
    expect((await defaultsOf(`${withChat}default_models: { responses: acme/chat-z }\n`))['responses']).toBe('acme/chat-z');
    expect(problemsOf(`${withChat}default_models: { responses: acme/img-a }\n`)).toEqual([
      'default_models.responses: models[3] ("acme/img-a") is not served on the responses endpoint',
    ]);
  });

  it('leaves the version of a catalog that does not set it unchanged', async () => {
    const { catalog } = await buildCatalog(valid, {});
    expect(catalog!.canonical).not.toContain('defaultModels');
  });
});

describe('every unit a paid model is metered in has a price (issue 29)', () => {
  const withModel = (pricing: string, endpoints: string, extra = '') => `${valid}
  - id: acme/other
    created: 1767225609
    pricing: ${pricing}${extra}
    offers:
      - { provider: sim, endpoints: [${endpoints}] }
`;
  const imageExtra = '\n    max_images: 2';

  it('refuses an image model priced per input/output token, naming per_output_image_token', () => {
    expect(problemsOf(withModel('{ per_input_token: "0.000001", per_output_token: "0.000002" }', 'images.generations', imageExtra))).toEqual([
      'models[1].pricing.per_output_image_token: required: the model is paid and served on images.generations, which meters generated image tokens (per_output_image_token; "0" to serve them free)',
    ]);
    const edits = problemsOf(withModel('{ per_input_token: "0.000001", per_output_token: "0.000002" }', 'images.generations, images.edits', imageExtra));
    expect(edits).toEqual([
      expect.stringMatching(/^models\[1\]\.pricing\.per_output_image_token: required: .*images\.generations, images\.edits/),
      expect.stringMatching(/^models\[1\]\.pricing\.per_input_image_token: required: .*images\.edits/),
    ]);
    expect(problemsOf(withModel('{ per_output_image_token: "0.00004", per_input_image_token: "0" }', 'images.generations, images.edits', imageExtra))).toEqual([]);
  });

  it('refuses each family whose metered unit is unpriced, and accepts the price that covers it', () => {
    const cases: Array<[string, string, string, string]> = [
      ['embeddings', '{ per_output_token: "0.1" }', 'per_input_token', '{ per_token: "0.1" }'],
      ['moderations', '{ per_output_image_token: "0.1" }', 'per_input_token', '{ per_input_token: "0.1" }'],
      ['chat.completions', '{ per_input_token: "0.1" }', 'per_output_token', '{ per_input_token: "0.1", per_output_token: "0" }'],
      ['audio.speech', '{ per_input_token: "0.1" }', 'per_input_text_character', '{ per_input_text_character: "0.1" }'],
      ['audio.transcriptions', '{ per_input_audio_token: "0.1" }', 'per_input_audio_hour', '{ per_input_audio_hour: "0.36" }'],
      ['audio.translations', '{ per_input_token: "0.1" }', 'per_input_audio_hour', '{ per_input_audio_hour: "0.36" }'],
    ];
    for (const [endpoint, unpriced, field, priced] of cases) {
      const extra = endpoint === 'audio.speech' ? '\n    voices: [alloy]' : '';
      expect(problemsOf(withModel(unpriced, endpoint, extra)), endpoint).toEqual([expect.stringMatching(new RegExp(`^models\\[1\\]\\.pricing\\.${field}: required: .*${endpoint.replace('.', '\\.')}`))]);
      expect(problemsOf(withModel(priced, endpoint, extra)), endpoint).toEqual([]);
    }
  });

  it('leaves a free model free on every family (no price, or only zero prices)', () => {
    expect(problemsOf(withModel('{}', 'images.generations, embeddings, moderations', imageExtra))).toEqual([]);
    expect(problemsOf(withModel('{ per_input_token: "0", per_output_token: "0.000" }', 'images.generations, audio.transcriptions', imageExtra))).toEqual([]);
  });
});

describe('buildCatalog', () => {
  it('loads the SDK-tests catalog (docs/testing.md) with no problem, with a model for every name those tests send', async () => {
    const path = fileURLToPath(new URL('../../../deploy/config/sdk-tests.yaml', import.meta.url));
    const { catalog, problems } = await buildCatalog(await readFile(path, 'utf8'), iconSourceFor(path));
    expect(problems).toEqual([]);
    const ids = catalog!.data.models.map((model) => model.id);
    for (const name of ['gpt-5.4', 'gpt-5.6-sol', 'claude-opus-5', 'text-embedding-3-small', 'omni-moderation-latest', 'gpt-image-2', 'tts-1', 'whisper-1', 'gpt-4o-transcribe']) {
      expect(ids).toContain(name);
    }
  });

  it('loads the example config with no problem and the documented chat-small prices', async () => {
    const text = await readFile(examplePath, 'utf8');
    const { catalog, problems } = await buildCatalog(text, iconSourceFor(examplePath));
    expect(problems).toEqual([]);
    const chatSmall = catalog!.data.models.find((model) => model.id === 'acme/chat-small');
    expect(chatSmall?.aliases).toEqual(['chat-small']);
    expect(chatSmall?.pricing).toEqual({
      per_input_token: '0.0000005',
      per_output_token: '0.0000015',
      per_cached_input_token: '0.0000001',
    });
    expect(catalog!.data.providers).toEqual([{ id: 'simulated', kind: 'simulated', baseUrl: '', apiKeyEnv: '' }]);
    const endpoints = new Set(catalog!.data.models.flatMap((model) => model.offers.flatMap((offer) => offer.endpoints)));
    expect([...endpoints].sort()).toEqual(
      ['chat.completions', 'messages', 'responses', 'embeddings', 'moderations', 'images.generations', 'images.edits',
        'audio.speech', 'audio.transcriptions', 'audio.translations'].sort(),
    );
    for (const startup of catalog!.data.startups) expect(startup.iconSvg).toMatch(/^<svg/);
    expect(new Set(catalog!.data.models.map((model) => model.created)).size).toBe(catalog!.data.models.length);
  });

  it('gives the same version to the same catalog written differently', async () => {
    const first = await buildCatalog(valid, {});
    const reordered = valid.replace('per_input_token: 0.0000005', 'per_input_token: "0.00000050"');
    const second = await buildCatalog(`# a comment\n${reordered}`, {});
    expect(second.catalog!.version).toBe(first.catalog!.version);
    const third = await buildCatalog(valid.replace('created: 1767225600', 'created: 1767225601'), {});
    expect(third.catalog!.version).not.toBe(first.catalog!.version);
  });

  it('reports an unreadable icon together with the other problems', async () => {
    const text = valid
      .replace('{ id: acme, display_name: Acme AI }', '{ id: acme, display_name: Acme AI, icon_svg: missing.svg }')
      .replace('owned_by: acme', 'owned_by: nobody');
    const { problems } = await buildCatalog(text, { baseDirectory: '/nonexistent-dir' });
    expect(problems.map((problem) => problem.path)).toEqual(['models[0].owned_by', 'startups[0].icon_svg']);
    expect(problems[1]?.reason).toMatch(/cannot read \/nonexistent-dir\/missing\.svg: ENOENT/);
  });
});
