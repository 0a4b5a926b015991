import type { ContractSetup } from '../contract-types.js';
import { anthropicSetup } from './anthropic.js';
import { azureOpenAIDeploymentSetup, azureOpenAIV1Setup } from './azure-openai.js';
import { bedrockSetup } from './bedrock.js';
import { geminiSetup } from './gemini.js';
import { openaiSetup } from './openai.js';
import { simulatedSetup } from './simulated.js';
import { vertexClaudeSetup, vertexGeminiSetup } from './vertex.js';

/**
 * The contract table: one row per adapter configuration, each run through every scenario. A kind with two
 * wire paths has a row for each (Azure: deployment URLs and the v1 API; Vertex: Claude and Gemini).
 */
export const CONTRACT_SETUPS: readonly ContractSetup[] = [
  openaiSetup,
  anthropicSetup,
  geminiSetup,
  azureOpenAIDeploymentSetup,
  azureOpenAIV1Setup,
  bedrockSetup,
  vertexClaudeSetup,
  vertexGeminiSetup,
  simulatedSetup,
];
