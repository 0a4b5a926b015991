import type { ChatRequest } from '@gateway/proto';
import { isClaudeModel as isBedrockClaude } from './bedrock/convert-to-bedrock-request.js';
import { isClaudeModel } from './vertex/vertex-paths.js';

// What a provider kind cannot express of the canonical request (issue 37 item 6). The edge's table
// (apps/edge/src/canonical/parameters.ts) decides what a MODEL takes; a model can still be served by
// several kinds, and a kind with no field for a parameter goes without it. It is then named in the
// answer's dropped_params (x-gateway-dropped-params), never left out silently: docs/providers.md,
// "What each kind does with each parameter". Each converter simply never reads these fields.

const NONE: readonly string[] = [];
const NO_ROWS: readonly Row[] = [];

/** A parameter as the gateway names it (the learned map's vocabulary, learned-parameters.ts) and the field that carries it. */
type Row = readonly [name: string, field: keyof ChatRequest];

const SEED: Row = ['seed', 'seed'];
const PRESENCE: Row = ['presence_penalty', 'presencePenalty'];
const FREQUENCY: Row = ['frequency_penalty', 'frequencyPenalty'];
const IMAGE_CONFIG: Row = ['image_config', 'imageAspectRatio'];
const PARALLEL: Row = ['parallel_tool_calls', 'parallelToolCalls'];
const USER: Row = ['user', 'user'];
const TOP_K: Row = ['top_k', 'topK'];
const VERBOSITY: Row = ['verbosity', 'verbosity'];

/** Anthropic Messages (and Vertex's Claude): no seed, no penalties, no image output, no verbosity. */
const ANTHROPIC: readonly Row[] = [SEED, PRESENCE, FREQUENCY, IMAGE_CONFIG, VERBOSITY];
/** Gemini generateContent (and Vertex's Gemini): no parallel-call switch, no end-user field, no verbosity. */
const GEMINI: readonly Row[] = [PARALLEL, USER, VERBOSITY];
/** Bedrock Converse: none of those; top_k only for Claude (additionalModelRequestFields). */
const BEDROCK_CLAUDE: readonly Row[] = [SEED, PRESENCE, FREQUENCY, IMAGE_CONFIG, PARALLEL, USER, VERBOSITY];
const BEDROCK_OTHER: readonly Row[] = [...BEDROCK_CLAUDE, TOP_K];

/**
 * The kind's rows. openai and azure-openai send every canonical field; simulated takes every one and
 * its answer is a function of the request (the same request answers the same), so nothing goes without.
 */
function rowsOf(kind: string, upstreamModel: string): readonly Row[] {
  switch (kind) {
    case 'anthropic':
      return ANTHROPIC;
    case 'gemini':
      return GEMINI;
    case 'vertex':
      return isClaudeModel(upstreamModel) ? ANTHROPIC : GEMINI;
    case 'bedrock':
      return isBedrockClaude(upstreamModel) ? BEDROCK_CLAUDE : BEDROCK_OTHER;
    default:
      return NO_ROWS;
  }
}

/**
 * The parameters (gateway spelling) that `request` sets and the kind × upstream model cannot send.
 * Nothing is allocated when the request sets none of them (the common path).
 */
export function inexpressibleParameters(kind: string, upstreamModel: string, request: ChatRequest): readonly string[] {
  let names: string[] | undefined;
  for (const [name, field] of rowsOf(kind, upstreamModel)) if (request[field] !== undefined) (names ??= []).push(name);
  return names ?? NONE;
}
