import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Provider } from '@gateway/proto';
import { startFakeAzureOpenAIUpstream, type FakeAzureOpenAIUpstream } from '@gateway/testing';
import { createAdapter, providerEnvNames } from '../create-adapter.js';
import { canModerate } from '../../routing/candidates.js';
import type { ProviderAdapter } from '../provider-adapter.js';
import { chatRequest, collect, deltasOf, failureOf, signal, userText } from '../../../test/adapter-test-support.js';

describe('kind azure-openai through createAdapter (the catalog config path)', () => {
  let azure: FakeAzureOpenAIUpstream;
  const adapters: ProviderAdapter[] = [];
  const secrets: Record<string, string> = {};
  const build = (config: Partial<Provider>) => {
    const adapter = createAdapter(Provider.fromPartial({ id: 'az', kind: 'azure-openai', baseUrl: azure.url, apiKeyEnv: 'AZURE_OPENAI_API_KEY', ...config }), (name) => secrets[name]);
    expect(adapter).toBeDefined();
    adapters.push(adapter!);
    return adapter!;
  };

  beforeAll(async () => {
    azure = await startFakeAzureOpenAIUpstream();
    secrets.AZURE_OPENAI_API_KEY = azure.apiKey;
  });
  afterAll(async () => {
    await Promise.all(adapters.map((adapter) => adapter.close()));
    await azure.close();
  });

  it('with api_version: deployment URLs, the key from api_key_env in api-key, the static headers sent', async () => {
    azure.reset();
    const adapter = build({ apiVersion: '2025-04-01-preview', headers: { 'x-team': 'search', 'api-key': 'not-this-one' } });
    expect([adapter.kind, adapter.providerId]).toEqual(['azure-openai', 'az']);
    expect(providerEnvNames(Provider.fromPartial({ kind: 'azure-openai', apiKeyEnv: 'AZURE_OPENAI_API_KEY' }))).toEqual(['AZURE_OPENAI_API_KEY']);
    azure.script({ text: 'streamed answer', chunkCount: 2 });
    const parts = await collect(adapter.chatStream({ upstreamModel: 'gpt-4o', chat: chatRequest([userText('hi')]) }, signal()));
    expect(deltasOf(parts).map((delta) => delta.content).join('')).toBe('streamed answer');
    const sent = azure.requests[0]!;
    expect(sent.path).toBe('/openai/deployments/gpt-4o/chat/completions?api-version=2025-04-01-preview');
    // The adapter's own key wins over a static header of the same name.
    expect(sent.headers['api-key']).toBe(azure.apiKey);
    expect(sent.headers['x-team']).toBe('search');
    expect(canModerate(adapter)).toBe(false);
    expect(adapter.embed && adapter.generateImages && adapter.editImages && adapter.speak && adapter.transcribe).toBeTypeOf('function');
  });

  it('without api_version: the v1 API with the deployment as model', async () => {
    azure.reset();
    const adapter = build({});
    const result = await adapter.embed!({ upstreamModel: 'text-embedding-3-small', texts: ['a', 'b'], tokenInputs: [], dimensions: undefined }, signal());
    expect(result.embeddings).toHaveLength(2);
    expect(azure.requests[0]!.path).toBe('/openai/v1/embeddings');
    expect(azure.requests[0]!.body.model).toBe('text-embedding-3-small');
  });

  it('an unset key variable is a misconfigured provider (Azure answers 401), which the router fails over', async () => {
    const adapter = build({ apiKeyEnv: 'AZURE_KEY_NOT_SET', apiVersion: '2024-10-21' });
    const failure = await failureOf(adapter.chat({ upstreamModel: 'gpt-4o', chat: chatRequest([userText('hi')]) }, signal()));
    expect([failure.kind, failure.httpStatus, failure.retryable]).toEqual(['misconfigured', 401, true]);
  });
});
