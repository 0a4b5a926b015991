import type { UpstreamWire } from '@gateway/platform';
import { isClaudeModel as isBedrockClaude } from './bedrock/convert-to-bedrock-request.js';
import { isClaudeModel } from './vertex/vertex-paths.js';

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

/**
 * Most candidates one generateContent answer carries (Vertex AI documents candidateCount 1–8; the Gemini
 * API documents no bound and is held to the same).
 */
export const MAX_GEMINI_CANDIDATES = 8;

/**
 * Whether the adapter answers `n` choices (above 1) for the upstream model (PARAMETERS.n): OpenAI-wire
 * kinds always; Gemini-wire ones (gemini, Vertex's Gemini) as candidateCount, up to
 * MAX_GEMINI_CANDIDATES and not streamed (streamGenerateContent answers one candidate).
 */
export function answersChoices(kind: string, upstreamModel: string, n: number, streamed: boolean): boolean {
  switch (wireOf(kind, upstreamModel)) {
    case 'openai':
      return true;
    case 'gemini':
      return !streamed && n <= MAX_GEMINI_CANDIDATES;
    default:
      return false;
  }
}
