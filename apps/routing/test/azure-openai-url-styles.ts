// The two URL styles an azure-openai provider can use, and the rig on a fake, shared by the Azure OpenAI adapter tests.
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { startFakeAzureOpenAIUpstream, type FakeAzureOpenAIUpstream } from '@gateway/testing';
import { AzureOpenAIAdapter } from '../src/providers/azure-openai/azure-openai-adapter.js';

export const API_VERSION = '2025-04-01-preview';

/** The two URL styles an azure-openai provider can use, and the path each sends a route to. */
export const URL_STYLES = [
  { style: 'deployment URLs (api_version set)', apiVersion: API_VERSION as string | undefined, pathOf: (route: string, deployment: string) => `/openai/deployments/${deployment}/${route}?api-version=${API_VERSION}` },
  { style: 'v1 API (no api_version)', apiVersion: undefined as string | undefined, pathOf: (route: string, _deployment: string) => `/openai/v1/${route}` },
];

/**
 * A fake Azure OpenAI and an adapter on it in one URL style, for the enclosing describe: started
 * before its tests, reset before each, closed after them. Read the fields inside the tests.
 */
export function azureRig(apiVersion: string | undefined): { readonly azure: FakeAzureOpenAIUpstream; readonly adapter: AzureOpenAIAdapter } {
  const rig = {} as { azure: FakeAzureOpenAIUpstream; adapter: AzureOpenAIAdapter };
  beforeAll(async () => {
    rig.azure = await startFakeAzureOpenAIUpstream();
    rig.adapter = new AzureOpenAIAdapter({ providerId: 'az', baseUrl: rig.azure.url, apiKey: rig.azure.apiKey, apiVersion });
  });
  afterAll(async () => {
    await rig.adapter.close();
    await rig.azure.close();
  });
  beforeEach(() => rig.azure.reset());
  return rig;
}
