import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestServiceAccount, startFakeVertexUpstream, type FakeVertexUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ReceivedRequest, WireReader } from '../contract-types.js';
import { anthropicBehaviourFor, anthropicReader } from './anthropic.js';
import { fakeBackedRow } from './common.js';
import { geminiBehaviourFor, geminiReader } from './gemini.js';

/*
 * kind: vertex against the fake Vertex AI (startFakeVertexUpstream): the service-account file's
 * token_uri is the fake's token endpoint, which verifies the signed JWT grant; the model routes then
 * require its bearer token. Two rows, one per publisher the upstream model picks: Claude
 * (rawPredict / streamRawPredict, answered by the fake's Anthropic half) and Gemini (generateContent /
 * streamGenerateContent, its Gemini half). Bad credentials: a service account Google does not know.
 */

const PROJECT = 'contract-project';
const LOCATION = 'us-east5';
const CREDENTIALS_ENV = 'CONTRACT_VERTEX_CREDENTIALS';

/** The model named in a Vertex model route. */
const modelOfPath = (request: ReceivedRequest) => decodeURIComponent(/\/models\/([^/:]+):/.exec(request.path)?.[1] ?? '');

function vertexSetup(publisher: 'claude' | 'gemini'): ContractSetup {
  const label = `vertex ${publisher}`;
  const providerId = `contract-vertex-${publisher}`;
  const claude = publisher === 'claude';
  const reader: WireReader = claude
    ? { ...anthropicReader, model: modelOfPath }
    : { ...geminiReader, model: modelOfPath };
  return {
    kind: 'vertex',
    label,
    unsupported: claude
      ? { embeddings: 'Claude has no embeddings (a Vertex provider embeds with Google models only)' }
      : {
          'prompt cache marks': 'generateContent has no inline cache marks: caching is implicit or a cachedContent made beforehand',
          'redacted reasoning': 'Gemini returns no redacted reasoning (its thoughts are summaries; signatures ride on parts)',
          'stop sequence reported': 'Gemini finishes STOP without saying which stop sequence matched',
        },
    jsonSchema: claude ? 'instructed' : 'native',
    safety: claude ? 'finish' : 'error',
    usage: claude ? { cacheRead: true, cacheWrite: true, reasoning: false } : { cacheRead: true, cacheWrite: false, reasoning: true },
    async start(): Promise<ContractRig> {
      const account = createTestServiceAccount('contract@contract-project.iam.gserviceaccount.com');
      const stranger = createTestServiceAccount('stranger@contract-project.iam.gserviceaccount.com');
      const fake: FakeVertexUpstream = await startFakeVertexUpstream({
        project: PROJECT, location: LOCATION, serviceAccounts: [{ clientEmail: account.clientEmail, publicKey: account.publicKey }],
      });
      const directory = mkdtempSync(join(tmpdir(), 'contract-vertex-'));
      const keyFile = join(directory, 'service-account.json');
      const strangerFile = join(directory, 'stranger.json');
      writeFileSync(keyFile, account.keyFile(fake.tokenUri, PROJECT));
      writeFileSync(strangerFile, stranger.keyFile(fake.tokenUri, PROJECT));
      const config = { id: providerId, kind: 'vertex', project: PROJECT, location: LOCATION, credentialsFileEnv: CREDENTIALS_ENV };
      return {
        ...(await fakeBackedRow({
          fake,
          config,
          secrets: { [CREDENTIALS_ENV]: keyFile },
          wrongSecrets: { [CREDENTIALS_ENV]: strangerFile },
          cleanup: () => rmSync(directory, { recursive: true, force: true }),
        })),
        upstreamModel: claude ? 'claude-sonnet-4-5@20250929' : 'gemini-3-pro-preview',
        ...(claude ? {} : { embeddingModel: 'gemini-embedding-001' }),
        modelMaxOutputTokens: 8_192,
        script: (answer) => (claude ? fake.anthropic.script(anthropicBehaviourFor(answer)) : fake.gemini.script(geminiBehaviourFor(answer))),
        reader,
      };
    },
  };
}

export const vertexClaudeSetup = vertexSetup('claude');
export const vertexGeminiSetup = vertexSetup('gemini');
