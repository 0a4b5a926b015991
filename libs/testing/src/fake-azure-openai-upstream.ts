import type { IncomingMessage, ServerResponse } from 'node:http';
import { azurePromptFilteredBody, fakeAzureChat, fakeAzureEmbeddings, type FakeAzureBehaviour } from './fake-azure-openai-upstream-chat.js';
import { fakeAudioSpeech, fakeImages, fakeTranscription } from './fake-upstream-media.js';
import { listenOnLoopback, receiveScripted, ScriptedBehaviours, sleep } from './fake-upstream-support.js';
import type { FakeUpstream, RecordedPart, RecordedRequest } from './fake-upstream-types.js';

export { azurePromptFilteredBody, type FakeAzureBehaviour, type FakeAzureUsage } from './fake-azure-openai-upstream-chat.js';

/** What a deployment's model can do; a route of another kind is refused with 400 OperationNotSupported. */
export type FakeAzureOperation = 'chat' | 'embeddings' | 'images' | 'speech' | 'transcription';

export type FakeAzureScript = FakeAzureBehaviour | ((request: RecordedRequest) => FakeAzureBehaviour);

export interface FakeAzureOpenAIOptions {
  /** The key the `api-key` header must carry. Default `azure-fake-key`. */
  apiKey?: string;
  /** Deployment name to what its model does. Default: DEFAULT_FAKE_AZURE_DEPLOYMENTS. */
  deployments?: Record<string, FakeAzureOperation>;
  /** Dated api-versions served on deployment URLs. Default: DEFAULT_FAKE_AZURE_API_VERSIONS. */
  apiVersions?: string[];
}

/** FakeUpstream's handle; `requests` holds the refused requests too. */
export interface FakeAzureOpenAIUpstream extends Omit<FakeUpstream, 'script' | 'setFallback'> {
  /** The resource endpoint (no path), as an azure-openai provider's base_url. */
  url: string;
  apiKey: string;
  /** Queues behaviours for the next requests (one each; a refused request uses one up too). */
  script(...behaviours: FakeAzureScript[]): void;
  setFallback(behaviour: FakeAzureScript): void;
}

export const DEFAULT_FAKE_AZURE_DEPLOYMENTS: Readonly<Record<string, FakeAzureOperation>> = {
  'gpt-4o': 'chat',
  'o4-mini': 'chat',
  'text-embedding-3-small': 'embeddings',
  'gpt-image-1': 'images',
  'gpt-4o-mini-tts': 'speech',
  whisper: 'transcription',
};

export const DEFAULT_FAKE_AZURE_API_VERSIONS: readonly string[] = ['2024-10-21', '2025-01-01-preview', '2025-03-01-preview', '2025-04-01-preview'];

/** The routes the fake serves (the ones the openai-node AzureOpenAI client sends to a deployment), by what they need. */
const ROUTES: Readonly<Record<string, FakeAzureOperation>> = {
  'chat/completions': 'chat',
  embeddings: 'embeddings',
  'images/generations': 'images',
  'images/edits': 'images',
  'audio/speech': 'speech',
  'audio/transcriptions': 'transcription',
  'audio/translations': 'transcription',
};

/** How Azure names an operation in OperationNotSupported. */
const OPERATION_NAMES: Readonly<Record<FakeAzureOperation, string>> = {
  chat: 'chatCompletion', embeddings: 'embeddings', images: 'imagesGeneration', speech: 'audioSpeech', transcription: 'audioTranscription',
};

/** The v1 API takes no dated version; `preview` and `latest` are the names it accepts for its own. */
const V1_VERSIONS = new Set(['v1', 'preview', 'latest']);

// Azure's error bodies, as Azure OpenAI sends them (a string `code`, no `type`).
const RESOURCE_NOT_FOUND = { error: { code: '404', message: 'Resource not found' } };
const ACCESS_DENIED = {
  error: {
    code: '401',
    message: 'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
  },
};
const DEPLOYMENT_NOT_FOUND = {
  error: { code: 'DeploymentNotFound', message: 'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.' },
};
const VERSION_NOT_SUPPORTED = { error: { code: 'BadRequest', message: 'API version not supported' } };

function fieldsOf(parts: RecordedPart[] | undefined): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const part of parts ?? []) if (part.filename === undefined) fields[part.name] = part.data.toString('utf8');
  return fields;
}

/**
 * An Azure OpenAI resource on a real loopback HTTP server. It refuses what Azure refuses: a missing or
 * wrong `api-key` header (401; on deployment URLs a bearer token is not a key, the v1 API takes the key
 * as a bearer token too), a deployment URL without `api-version`
 * (404 Resource not found) or with one it does not serve (400 API version not supported), an unknown
 * deployment (404 DeploymentNotFound), a route the deployment's model cannot do (400
 * OperationNotSupported), and moderations or any other route Azure does not serve (404). It serves
 * `/openai/deployments/{deployment}/{route}?api-version=…` and the v1 API `/openai/v1/{route}` (the
 * deployment named by `model`). Chat answers carry Azure's content-filter annotations; streams begin with
 * Azure's `prompt_filter_results` chunk; `contentFilter` scripts Azure's refusals.
 */
export async function startFakeAzureOpenAIUpstream(options: FakeAzureOpenAIOptions = {}): Promise<FakeAzureOpenAIUpstream> {
  const apiKey = options.apiKey ?? 'azure-fake-key';
  const deployments = options.deployments ?? DEFAULT_FAKE_AZURE_DEPLOYMENTS;
  const apiVersions = new Set(options.apiVersions ?? DEFAULT_FAKE_AZURE_API_VERSIONS);
  const scripted = new ScriptedBehaviours<FakeAzureBehaviour>();
  let served = 0;

  const refuse = (response: ServerResponse, status: number, body: unknown) => {
    response.writeHead(status, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  };

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const { behaviour, body, recorded } = await receiveScripted(request, scripted);
    const url = new URL(request.url ?? '/', 'http://fake');
    const deploymentRoute = /^\/openai\/deployments\/([^/]+)\/(.+)$/.exec(url.pathname);
    const v1Route = /^\/openai\/v1\/(.+)$/.exec(url.pathname);
    // The v1 API also takes the key as a bearer token (the plain OpenAI client's way); dated versions
    // read a bearer token as a Microsoft Entra token, which a key is not.
    const bearer = v1Route ? /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1] : undefined;
    if ((request.headers['api-key'] ?? bearer) !== apiKey) return refuse(response, 401, ACCESS_DENIED);

    const route = deploymentRoute?.[2] ?? v1Route?.[1];
    const operation = route !== undefined && request.method === 'POST' ? ROUTES[route] : undefined;
    // Moderations, legacy completions and anything else Azure OpenAI does not serve.
    if (operation === undefined) return refuse(response, 404, RESOURCE_NOT_FOUND);

    const version = url.searchParams.get('api-version');
    let deployment: string;
    if (deploymentRoute) {
      if (version === null) return refuse(response, 404, RESOURCE_NOT_FOUND);
      if (!apiVersions.has(version)) return refuse(response, 400, VERSION_NOT_SUPPORTED);
      deployment = decodeURIComponent(deploymentRoute[1]!);
    } else {
      if (version !== null && !V1_VERSIONS.has(version)) return refuse(response, 400, VERSION_NOT_SUPPORTED);
      deployment = String((recorded.parts ? fieldsOf(recorded.parts).model : body?.model) ?? '');
    }
    const serves = Object.hasOwn(deployments, deployment) ? deployments[deployment] : undefined;
    if (serves === undefined) return refuse(response, 404, DEPLOYMENT_NOT_FOUND);
    if (serves !== operation) {
      return refuse(response, 400, {
        error: {
          code: 'OperationNotSupported',
          message: `The ${OPERATION_NAMES[operation]} operation does not work with the specified model, ${deployment}. Please choose different model and try again. You can learn more about which models can be used with each operation here: https://go.microsoft.com/fwlink/?linkid=2197993.`,
        },
      });
    }

    if (behaviour.latencyMs) await sleep(behaviour.latencyMs);
    if (behaviour.stall) return; // never answers; close() destroys the socket
    if (behaviour.reset) { request.socket.destroy(); return; }
    if (behaviour.status && behaviour.status >= 400) {
      return refuse(response, behaviour.status, behaviour.errorBody ?? { error: { code: String(behaviour.status), message: `fake Azure error ${behaviour.status}` } });
    }
    if (behaviour.contentFilter === 'prompt') return refuse(response, 400, azurePromptFilteredBody());
    switch (route) {
      case 'chat/completions':
        return fakeAzureChat(body, deployment, behaviour, response, request.socket, ++served);
      case 'embeddings':
        return fakeAzureEmbeddings(body, deployment, behaviour, response);
      case 'images/generations':
        return fakeImages(body, behaviour, response);
      case 'images/edits':
        return fakeImages(fieldsOf(recorded.parts), behaviour, response);
      case 'audio/speech':
        return fakeAudioSpeech(body, behaviour, response);
      default:
        return fakeTranscription(fieldsOf(recorded.parts), route === 'audio/translations', response);
    }
  }

  const server = await listenOnLoopback(handle);
  return {
    url: `http://127.0.0.1:${server.port}`,
    apiKey,
    ...scripted.controls(),
    close: () => server.close(),
  };
}
