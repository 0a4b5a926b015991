import type { ContractSetup } from '../contract-types.js';
import { anthropicSetup } from './anthropic.js';
import { geminiSetup } from './gemini.js';
import { openaiSetup } from './openai.js';
import { simulatedSetup } from './simulated.js';

/** The contract table: one row per adapter kind, each run through every scenario. */
export const CONTRACT_SETUPS: readonly ContractSetup[] = [openaiSetup, anthropicSetup, geminiSetup, simulatedSetup];
