import { startFakeUpstream, type FakeBehaviour, type FakeUpstream } from '@gateway/testing';
import type { ContractRig, ContractSetup, ScriptedAnswer, WireReader } from '../contract-types.js';
import { fakeBackedRow, textAndToolCalls, parseDataUrl, parsedOrText, textOf } from './common.js';

/*
 * kind: openai against the OpenAI-compatible fake (startFakeUpstream). That fake checks no API key, so
 * bad credentials are its scripted 401; it has no knob for completion_tokens_details.reasoning_tokens,
 * so an answer that reports reasoning tokens is replayed as the bytes the API would send.
 */

const PROVIDER_ID = 'contract-openai';
const KEY_ENV = 'CONTRACT_OPENAI_API_KEY';
const MODEL = 'gpt-4.1-mini';

function errorBody(message: string, type: string, code: string | null) {
  return { error: { message, type, param: null, code } };
}

/** The answer as the bytes the API sends, for usage the fake cannot script (reasoning tokens). */
function replayed(answer: Extract<ScriptedAnswer, { type: 'answer' }>, stream: boolean): FakeBehaviour {
  const usage = answer.usage!;
  const wireUsage = {
    prompt_tokens: usage.input,
    completion_tokens: usage.wireOutput ?? usage.output,
    total_tokens: usage.input + (usage.wireOutput ?? usage.output),
    prompt_tokens_details: { cached_tokens: usage.cacheRead },
    completion_tokens_details: { reasoning_tokens: usage.reasoning },
  };
  const finish = answer.finish ?? 'stop';
  const content = answer.text ?? '';
  const base = { id: 'chatcmpl-contract', created: 1767225600, model: MODEL };
  if (!stream) {
    return {
      replay: {
        contentType: 'application/json',
        body: JSON.stringify({
          ...base, object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finish }],
          usage: wireUsage,
        }),
      },
    };
  }
  const chunk = (choices: unknown[], extra: object = {}) => `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices, ...extra })}\n\n`;
  return {
    replay: {
      contentType: 'text/event-stream',
      body:
        chunk([{ index: 0, delta: { role: 'assistant', content }, finish_reason: null }]) +
        chunk([{ index: 0, delta: {}, finish_reason: finish }]) +
        chunk([], { usage: wireUsage }) +
        'data: [DONE]\n\n',
    },
  };
}

function behaviourFor(answer: ScriptedAnswer, stream: boolean): FakeBehaviour {
  switch (answer.type) {
    case 'answer':
      if (answer.usage && answer.usage.reasoning > 0) return replayed(answer, stream);
      return {
        ...textAndToolCalls(answer),
        ...(answer.finish ? { finishReason: answer.finish } : {}),
        ...(answer.usage
          ? { usage: { prompt_tokens: answer.usage.input, completion_tokens: answer.usage.output, cached_tokens: answer.usage.cacheRead } }
          : {}),
      };
    case 'error':
      return {
        status: answer.status,
        errorBody: answer.status === 401
          ? errorBody(answer.message, 'invalid_request_error', 'invalid_api_key')
          : errorBody(answer.message, answer.status >= 500 ? 'server_error' : answer.status === 429 ? 'requests' : 'invalid_request_error', null),
      };
    case 'safety':
      // The API's (and Azure's) refusal of a prompt its content filter blocks.
      return {
        status: 400,
        errorBody: errorBody('The response was filtered due to the prompt triggering content management policy.', 'invalid_request_error', 'content_filter'),
      };
    default:
      return openAIWireFault(answer);
  }
}

/** A transport fault as the OpenAI-wire fakes script it (startFakeUpstream and the Azure fake take the same words). */
export function openAIWireFault(answer: Extract<ScriptedAnswer, { type: 'reset' | 'slow stream' | 'stall' | 'cut stream' | 'stream error' }>): Omit<FakeBehaviour, 'usage' | 'replay'> {
  switch (answer.type) {
    case 'reset': return { reset: true };
    case 'slow stream': return { text: answer.text, chunkCount: 40, chunkDelayMs: 150 };
    case 'stall': return { stall: true };
    case 'cut stream': return { text: answer.text, chunkCount: 6, cutAfterChunks: 2 };
    case 'stream error': return { text: answer.text, chunkCount: 6, streamErrorAfterChunks: 1 };
  }
}

/** Reads an OpenAI chat-completions body (Azure's too: the same wire format). */
export const openaiReader: WireReader = {
  model: (request) => request.body?.model,
  streamed: (request) => request.body?.stream === true,
  systemText: (request) =>
    (request.body?.messages ?? [])
      .filter((message: any) => message.role === 'system' || message.role === 'developer')
      .map((message: any) => textOf(message.content))
      .join('\n'),
  turns: (request) =>
    (request.body?.messages ?? [])
      .filter((message: any) => message.role !== 'system' && message.role !== 'developer')
      .map((message: any) => ({ role: message.role, text: textOf(message.content) })),
  allText: (request) => (request.body?.messages ?? []).map((message: any) => textOf(message.content)).join('\n'),
  tools: (request) => (request.body?.tools ?? []).map((tool: any) => ({ name: tool.function?.name, parameters: tool.function?.parameters })),
  toolChoice: (request) => {
    const choice = request.body?.tool_choice;
    if (choice === undefined) return undefined;
    if (typeof choice === 'string') return choice as 'auto' | 'none' | 'required';
    return { name: choice.function?.name };
  },
  toolCallsSentBack: (request) =>
    (request.body?.messages ?? []).flatMap((message: any) =>
      (message.tool_calls ?? []).map((call: any) => ({ ref: call.id, name: call.function?.name, arguments: parsedOrText(call.function?.arguments) })),
    ),
  toolResults: (request) =>
    (request.body?.messages ?? [])
      .filter((message: any) => message.role === 'tool')
      .map((message: any) => ({ ref: message.tool_call_id, content: textOf(message.content) })),
  inlineMedia: (request) =>
    (request.body?.messages ?? []).flatMap((message: any) =>
      (Array.isArray(message.content) ? message.content : []).flatMap((part: any) => {
        const parsed = part.type === 'image_url' ? parseDataUrl(part.image_url?.url) : part.type === 'file' ? parseDataUrl(part.file?.file_data) : undefined;
        return parsed ? [parsed] : [];
      }),
    ),
  imageUrls: (request) =>
    (request.body?.messages ?? []).flatMap((message: any) =>
      (Array.isArray(message.content) ? message.content : [])
        .filter((part: any) => part.type === 'image_url' && !String(part.image_url?.url).startsWith('data:'))
        .map((part: any) => part.image_url.url),
    ),
  nativeSchema: (request) => request.body?.response_format?.json_schema?.schema,
  // Chat completions has no input field for reasoning: nothing is ever sent back.
  reasoningSent: () => [],
  redactedReasoningSent: () => [],
  generation: (request) => ({ temperature: request.body?.temperature, maxTokens: request.body?.max_completion_tokens, stop: request.body?.stop }),
  // Chat completions has no cache marks: OpenAI caches prompt prefixes by itself.
  cacheMarks: () => [],
};

/** What every row speaking the chat-completions wire declares (openai, azure-openai): `provider` caches by itself. */
export function chatCompletionsWire(provider: string): Pick<ContractSetup, 'unsupported' | 'jsonSchema' | 'safety' | 'usage'> {
  return {
    unsupported: {
      'reasoning provenance': 'chat completions returns no reasoning signature and takes no reasoning back',
      'reasoning with tool calls': 'chat completions returns no reasoning signature and takes no reasoning back',
      'redacted reasoning': 'chat completions returns no encrypted reasoning and takes no reasoning back',
      'tool error result': 'chat completions has no error flag on a tool message (the failure is in its text)',
      'stop sequence reported': 'chat completions finishes stop without saying which stop sequence matched',
      'prompt cache marks': `chat completions has no cache marks: ${provider} caches prompt prefixes by itself`,
    },
    jsonSchema: 'native',
    safety: 'error',
    usage: { cacheRead: true, cacheWrite: false, reasoning: true },
  };
}

export const openaiSetup: ContractSetup = {
  kind: 'openai',
  ...chatCompletionsWire('OpenAI'),
  async start(): Promise<ContractRig> {
    const fake: FakeUpstream = await startFakeUpstream();
    // The fake checks no key: the scenario scripts OpenAI's own 401 instead of a wrong-key adapter.
    const config = { id: PROVIDER_ID, kind: 'openai', apiKeyEnv: KEY_ENV };
    return {
      ...(await fakeBackedRow({ fake, config, path: '/v1', secrets: { [KEY_ENV]: 'sk-contract-openai' } })),
      upstreamModel: MODEL,
      embeddingModel: 'text-embedding-3-small',
      modelMaxOutputTokens: 4_096,
      // The wire format (stream or not) is only known once the request arrives.
      script: (answer) => fake.script((request) => behaviourFor(answer, request.body?.stream === true)),
      reader: openaiReader,
    };
  },
};
