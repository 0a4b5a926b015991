import type { ContractRig, ContractSetup, WireReader } from '../contract-types.js';
import { adapterFromConfig } from './common.js';

/*
 * kind: simulated has no upstream: its answers follow from the request (docs/dialects.md "Tools on
 * the `simulated` provider"), nothing can be scripted and nothing receives a wire request. The scenarios that apply check
 * what it promises instead (a forced tool is called with arguments satisfying its schema, text after a
 * tool result, a schema-valid JSON answer, length when max tokens cut it, honest usage, abort honoured).
 */

const NO_WIRE = 'no upstream: the simulated provider sends no request anyone could observe';
const NO_SCRIPT = 'no upstream: the simulated provider cannot be made to fail or to answer otherwise';

const unreadable = (): never => {
  throw new Error('the simulated provider has no wire to read');
};

const reader: WireReader = {
  model: unreadable, streamed: unreadable, systemText: unreadable, turns: unreadable, allText: unreadable, tools: unreadable, toolChoice: unreadable,
  toolCallsSentBack: unreadable, toolResults: unreadable, inlineMedia: unreadable, imageUrls: unreadable, nativeSchema: unreadable,
  reasoningSent: unreadable, redactedReasoningSent: unreadable, generation: unreadable, cacheMarks: unreadable,
};

export const simulatedSetup: ContractSetup = {
  kind: 'simulated',
  unsupported: {
    'static headers': NO_WIRE,
    'system prompt': NO_WIRE,
    'conversation history': NO_WIRE,
    'generation parameters': NO_WIRE,
    'tool definitions and choice': NO_WIRE,
    'parallel tool calls': 'the simulator calls one tool per answer',
    'image input': NO_WIRE,
    'image url input': NO_WIRE,
    'pdf input': NO_WIRE,
    'reasoning provenance': 'the simulator returns no reasoning',
    'reasoning with tool calls': 'the simulator returns no reasoning',
    'redacted reasoning': 'the simulator returns no reasoning',
    'tool error result': NO_WIRE,
    'stop sequence reported': 'the simulator honours no stop sequences',
    'safety block': NO_SCRIPT,
    'error 400': NO_SCRIPT,
    'bad credentials': 'no credentials: the simulated provider takes none',
    'error 429': NO_SCRIPT,
    'error 5xx': NO_SCRIPT,
    'connection reset': NO_SCRIPT,
    'timeout': NO_SCRIPT,
    'stream cut': NO_SCRIPT,
    'stream error event': NO_SCRIPT,
    'prompt cache marks': NO_WIRE,
  },
  jsonSchema: 'instructed',
  safety: 'error',
  usage: { cacheRead: false, cacheWrite: false, reasoning: false },
  async start(): Promise<ContractRig> {
    const adapter = adapterFromConfig({ id: 'contract-simulated', kind: 'simulated' }, {});
    return {
      adapter,
      scripted: false,
      providerId: 'contract-simulated',
      upstreamModel: 'simulated-model',
      embeddingModel: 'simulated-embedding',
      modelMaxOutputTokens: 4_096,
      script: () => undefined,
      received: () => [],
      reader,
      adapterWithWrongCredentials: () => undefined,
      watch: undefined,
      reset: () => undefined,
      close: () => adapter.close(),
    };
  },
};
