import { startFakeAnthropicUpstream, type FakeAnthropicBehaviour, type FakeAnthropicUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ReceivedRequest, ScriptedAnswer, WireReader } from '../contract-types.js';
import { fakeBackedRow, textAndToolCalls, textOf } from './common.js';

/*
 * kind: anthropic against the fake Messages API (startFakeAnthropicUpstream), which checks the key,
 * validates bodies the way the API does and signs the thinking it emits (refusing thinking it did not sign).
 */

const PROVIDER_ID = 'contract-anthropic';
const KEY_ENV = 'CONTRACT_ANTHROPIC_API_KEY';
const KEY = 'sk-ant-contract';
const MODEL = 'claude-sonnet-4-5';

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error', 401: 'authentication_error', 429: 'rate_limit_error', 500: 'api_error', 529: 'overloaded_error',
};

export function anthropicBehaviourFor(answer: ScriptedAnswer): FakeAnthropicBehaviour {
  switch (answer.type) {
    case 'answer':
      return {
        ...textAndToolCalls(answer),
        ...(answer.finish ? { finishReason: answer.finish } : {}),
        ...(answer.stopSequence !== undefined ? { stopSequence: answer.stopSequence } : {}),
        // Anthropic's input_tokens leaves out what was read from and written to the cache.
        ...(answer.usage
          ? {
              usage: {
                input_tokens: answer.usage.input - answer.usage.cacheRead - answer.usage.cacheWrite,
                output_tokens: answer.usage.wireOutput ?? answer.usage.output,
                cache_read_input_tokens: answer.usage.cacheRead,
                cache_creation_input_tokens: answer.usage.cacheWrite,
              },
            }
          : {}),
        thinking: answer.reasoning ?? false,
        ...(answer.redactedReasoning ? { redactedThinking: true } : {}),
      };
    case 'error': {
      const type = ERROR_TYPES[answer.status] ?? (answer.status >= 500 ? 'api_error' : 'invalid_request_error');
      return { status: answer.status, errorBody: { type: 'error', error: { type, message: answer.message }, request_id: 'req_contract' } };
    }
    case 'safety':
      // Claude declines in the answer itself: stop_reason refusal (no error status exists for it).
      return { text: 'I can’t help with that.', finishReason: 'content_filter', thinking: false };
    case 'reset':
      return { reset: true };
    case 'slow stream':
      return { text: answer.text, chunkCount: 40, chunkDelayMs: 150, thinking: false };
    case 'stall':
      return { stall: true };
    case 'cut stream':
      return { text: answer.text, chunkCount: 6, cutAfterChunks: 2, thinking: false };
    case 'stream error':
      return { text: answer.text, chunkCount: 6, streamErrorAfterChunks: 1, streamErrorType: 'overloaded_error', thinking: false };
  }
}

const blocks = (content: unknown): any[] => (Array.isArray(content) ? content : typeof content === 'string' ? [{ type: 'text', text: content }] : []);
const turns = (request: ReceivedRequest): any[] => request.body?.messages ?? [];

/** Reads a Messages API body. */
export const anthropicReader: WireReader = {
  model: (request) => request.body?.model,
  streamed: (request) => request.body?.stream === true,
  systemText: (request) => textOf(blocks(request.body?.system)),
  turns: (request) => turns(request).map((turn) => ({ role: turn.role, text: textOf(blocks(turn.content)) })),
  allText: (request) =>
    [textOf(blocks(request.body?.system)), ...turns(request).map((turn) => textOf(blocks(turn.content)))].join('\n'),
  tools: (request) => (request.body?.tools ?? []).map((tool: any) => ({ name: tool.name, parameters: tool.input_schema })),
  toolChoice: (request) => {
    const choice = request.body?.tool_choice;
    if (!choice) return undefined;
    if (choice.type === 'any') return 'required';
    if (choice.type === 'tool') return { name: choice.name };
    return choice.type;
  },
  toolCallsSentBack: (request) =>
    turns(request).flatMap((turn) =>
      blocks(turn.content).filter((block) => block.type === 'tool_use').map((block) => ({ ref: block.id, name: block.name, arguments: block.input })),
    ),
  toolResults: (request) =>
    turns(request).flatMap((turn) =>
      blocks(turn.content)
        .filter((block) => block.type === 'tool_result')
        .map((block) => ({ ref: block.tool_use_id, content: textOf(blocks(block.content)), isError: block.is_error === true })),
    ),
  inlineMedia: (request) =>
    turns(request).flatMap((turn) =>
      blocks(turn.content)
        .filter((block) => (block.type === 'image' || block.type === 'document') && block.source?.type === 'base64')
        .map((block) => ({ mediaType: block.source.media_type, base64: block.source.data })),
    ),
  imageUrls: (request) =>
    turns(request).flatMap((turn) =>
      blocks(turn.content).filter((block) => block.type === 'image' && block.source?.type === 'url').map((block) => block.source.url),
    ),
  nativeSchema: (request) => request.body?.output_config?.format?.schema,
  reasoningSent: (request) =>
    turns(request).flatMap((turn) =>
      blocks(turn.content).filter((block) => block.type === 'thinking').map((block) => ({ text: block.thinking, signature: block.signature })),
    ),
  redactedReasoningSent: (request) =>
    turns(request).flatMap((turn) => blocks(turn.content).filter((block) => block.type === 'redacted_thinking').map((block) => block.data)),
  generation: (request) => ({ temperature: request.body?.temperature, maxTokens: request.body?.max_tokens, stop: request.body?.stop_sequences }),
  cacheMarks: (request) =>
    [...blocks(request.body?.system), ...turns(request).flatMap((turn) => blocks(turn.content))]
      .filter((block) => block.cache_control)
      .map((block) => String(block.cache_control.ttl ?? '')),
};

export const anthropicSetup: ContractSetup = {
  kind: 'anthropic',
  unsupported: {
    embeddings: 'Anthropic has no embeddings endpoint',
  },
  jsonSchema: 'instructed',
  safety: 'finish',
  // The API does not say how many output tokens were thinking.
  usage: { cacheRead: true, cacheWrite: true, reasoning: false },
  async start(): Promise<ContractRig> {
    const fake: FakeAnthropicUpstream = await startFakeAnthropicUpstream({ apiKey: KEY });
    const config = { id: PROVIDER_ID, kind: 'anthropic', apiKeyEnv: KEY_ENV };
    return {
      ...(await fakeBackedRow({ fake, config, secrets: { [KEY_ENV]: KEY }, wrongSecrets: { [KEY_ENV]: 'sk-ant-wrong' } })),
      upstreamModel: MODEL,
      modelMaxOutputTokens: 8_192,
      script: (answer) => fake.script(anthropicBehaviourFor(answer)),
      reader: anthropicReader,
    };
  },
};
