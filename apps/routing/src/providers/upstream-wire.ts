import type { UpstreamWire } from '@gateway/platform';
import { isClaudeModel as isBedrockClaude } from './bedrock/convert-to-bedrock-request.js';
import { isClaudeModel } from './vertex/vertex-paths.js';
import type { ProviderAdapter } from './provider-adapter.js';

/**
 * The wire a provider kind × upstream model speaks, as libs/platform's parameter table knows them
 * (PARAMETERS[..].wires): Azure OpenAI speaks OpenAI's, Vertex Anthropic's for Claude and Gemini's
 * otherwise, Bedrock Converse with Claude's own fields or without.
 */
export function wireOf(kind: string, upstreamModel: string): UpstreamWire {
  switch (kind) {
    case 'openai':
    case 'azure-openai':
      return 'openai';
    case 'anthropic':
      return 'anthropic';
    case 'gemini':
      return 'gemini';
    case 'vertex':
      return isClaudeModel(upstreamModel) ? 'anthropic' : 'gemini';
    case 'bedrock':
      return isBedrockClaude(upstreamModel) ? 'bedrock-claude' : 'bedrock';
    default:
      return 'simulated';
  }
}

/** Whether the adapter answers several choices (`n` above 1): only OpenAI-wire kinds (PARAMETERS.n). */
export function answersChoices(adapter: ProviderAdapter): boolean {
  return wireOf(adapter.kind, '') === 'openai';
}
