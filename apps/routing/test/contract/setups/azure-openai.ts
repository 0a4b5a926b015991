import { startFakeAzureOpenAIUpstream, type FakeAzureBehaviour, type FakeAzureOpenAIUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ScriptedAnswer, WireReader } from '../contract-types.js';
import { fakeBackedRow, textAndToolCalls } from './common.js';
import { chatCompletionsWire, openAIWireFault, openaiReader } from './openai.js';

/*
 * kind: azure-openai against the fake Azure OpenAI resource (startFakeAzureOpenAIUpstream), which
 * checks the api-key header, the api-version and the deployment. Two rows: deployment URLs with a dated
 * api_version, and the v1 API (no api_version, the deployment named by `model`). The wire is OpenAI's.
 */

const KEY_ENV = 'CONTRACT_AZURE_OPENAI_API_KEY';
const KEY = 'azure-contract-key';
const DEPLOYMENT = 'gpt-4o';

function behaviourFor(answer: ScriptedAnswer): FakeAzureBehaviour {
  switch (answer.type) {
    case 'answer':
      return {
        ...textAndToolCalls(answer),
        ...(answer.finish ? { finishReason: answer.finish } : {}),
        ...(answer.usage
          ? {
              usage: {
                prompt_tokens: answer.usage.input,
                completion_tokens: answer.usage.wireOutput ?? answer.usage.output,
                cached_tokens: answer.usage.cacheRead,
                reasoning_tokens: answer.usage.reasoning,
              },
            }
          : {}),
      };
    case 'error':
      return { status: answer.status, errorBody: { error: { code: String(answer.status), message: answer.message } } };
    case 'safety':
      return { contentFilter: 'prompt' };
    default:
      return openAIWireFault(answer);
  }
}

/** OpenAI's reader, with the model read from the deployment URL when the body names none. */
const azureReader: WireReader = {
  ...openaiReader,
  model: (request) => request.body?.model ?? decodeURIComponent(/\/openai\/deployments\/([^/]+)\//.exec(request.path)?.[1] ?? ''),
};

function azureSetup(label: string, apiVersion: string): ContractSetup {
  const providerId = `contract-${label.replace(/[^a-z0-9]+/g, '-')}`;
  return {
    kind: 'azure-openai',
    label,
    ...chatCompletionsWire('Azure OpenAI'),
    async start(): Promise<ContractRig> {
      const fake: FakeAzureOpenAIUpstream = await startFakeAzureOpenAIUpstream({ apiKey: KEY });
      const config = { id: providerId, kind: 'azure-openai', apiVersion, apiKeyEnv: KEY_ENV };
      return {
        ...(await fakeBackedRow({ fake, config, secrets: { [KEY_ENV]: KEY }, wrongSecrets: { [KEY_ENV]: 'azure-wrong-key' } })),
        upstreamModel: DEPLOYMENT,
        embeddingModel: 'text-embedding-3-small',
        modelMaxOutputTokens: 4_096,
        script: (answer) => fake.script(behaviourFor(answer)),
        reader: azureReader,
      };
    },
  };
}

export const azureOpenAIDeploymentSetup = azureSetup('azure-openai', '2025-04-01-preview');
export const azureOpenAIV1Setup = azureSetup('azure-openai v1 API', '');
