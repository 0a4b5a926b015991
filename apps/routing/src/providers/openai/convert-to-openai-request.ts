import { unsentParameters } from '@gateway/platform';
import type { ChatMessage, ChatRequest, ContentPart } from '@gateway/proto';
import type { OpenAIChatRequestBody } from './openai-api-types.js';
import { structuredOutputInstruction, withInstruction } from '../structured-output.js';

function parseJson(text: string | undefined, field: string): unknown {
  if (text === undefined || text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${field} is not JSON`);
  }
}

function convertPart(part: ContentPart): unknown {
  const value = part.part;
  switch (value?.$case) {
    case 'text':
      return { type: 'text', text: value.value };
    case 'image':
      return { type: 'image_url', image_url: { url: value.value.url, ...(value.value.detail ? { detail: value.value.detail } : {}) } };
    case 'file': {
      const file = value.value;
      const mediaType = file.mediaType || 'application/pdf';
      return {
        type: 'file',
        file: {
          ...(file.filename ? { filename: file.filename } : {}),
          ...(file.data.length > 0
            ? { file_data: `data:${mediaType};base64,${Buffer.from(file.data).toString('base64')}` }
            : { file_url: file.url }),
        },
      };
    }
    case 'audio':
      return { type: 'input_audio', input_audio: { data: Buffer.from(value.value.data).toString('base64'), format: value.value.format } };
    default:
      return undefined;
  }
}

function convertContent(parts: readonly ContentPart[]): unknown {
  if (parts.length === 0) return '';
  // A single text part goes as a plain string: every OpenAI-compatible server reads that.
  if (parts.length === 1 && parts[0]?.part?.$case === 'text') return parts[0].part.value;
  return parts.map(convertPart).filter((part) => part !== undefined);
}

function convertMessage(message: ChatMessage): Record<string, unknown> {
  const converted: Record<string, unknown> = { role: message.role };
  if (message.role === 'assistant') {
    const text = message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).join('');
    converted.content = text.length > 0 || message.toolCalls.length === 0 ? text : null;
    if (message.toolCalls.length > 0) {
      converted.tool_calls = message.toolCalls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: call.arguments },
      }));
    }
  } else {
    converted.content = convertContent(message.content);
  }
  if (message.role === 'tool') converted.tool_call_id = message.toolCallId;
  if (message.name !== undefined) converted.name = message.name;
  // Reasoning parts are not sent: the chat-completions wire format has no input field for them.
  return converted;
}

export interface OpenAIConversionOptions {
  upstreamModel: string;
  stream: boolean;
}

export interface OpenAIConversion {
  body: OpenAIChatRequestBody;
  /**
   * The canonical parameters the request set that this body goes without (libs/platform PARAMETERS
   * names): what the wire has no field for, and what it takes only with certain values.
   */
  unsent: readonly string[];
}

/** Canonical request -> OpenAI chat-completions body. Only fields present on the request are sent. */
export function convertToOpenAIRequest(request: ChatRequest, { upstreamModel, stream }: OpenAIConversionOptions): OpenAIConversion {
  // json_object without the word "json" in the messages is refused by OpenAI: say it in a system message.
  const instruction = structuredOutputInstruction(request.responseFormat, request.messages, true);
  const body: OpenAIChatRequestBody = { model: upstreamModel, messages: withInstruction(request.messages, instruction).map(convertMessage) };
  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool) => ({
      type: 'function',
      function: {
        name: tool.name,
        ...(tool.description ? { description: tool.description } : {}),
        parameters: parseJson(tool.parameters, `tools.${tool.name}.parameters`) ?? { type: 'object', properties: {} },
        ...(tool.strict !== undefined ? { strict: tool.strict } : {}),
      },
    }));
  }
  if (request.toolChoice) {
    body.tool_choice =
      request.toolChoice.mode === 'tool'
        ? { type: 'function', function: { name: request.toolChoice.toolName } }
        : request.toolChoice.mode;
  }
  if (request.responseFormat) {
    const format = request.responseFormat;
    body.response_format =
      format.type === 'json_schema'
        ? {
            type: 'json_schema',
            json_schema: {
              name: format.schemaName || 'response',
              schema: parseJson(format.schema, 'response_format.schema') ?? {},
              ...(format.strict !== undefined ? { strict: format.strict } : {}),
            },
          }
        : { type: format.type };
  }
  if (request.temperature !== undefined) body.temperature = request.temperature;
  if (request.topP !== undefined) body.top_p = request.topP;
  if (request.topK !== undefined) body.top_k = request.topK;
  if (request.stop.length > 0) body.stop = request.stop;
  if (request.maxOutputTokens !== undefined) body.max_completion_tokens = request.maxOutputTokens;
  if (request.reasoningEffort !== undefined) body.reasoning_effort = request.reasoningEffort;
  if (request.presencePenalty !== undefined) body.presence_penalty = request.presencePenalty;
  if (request.frequencyPenalty !== undefined) body.frequency_penalty = request.frequencyPenalty;
  if (request.parallelToolCalls !== undefined) body.parallel_tool_calls = request.parallelToolCalls;
  if (request.prediction !== undefined) body.prediction = parseJson(request.prediction, 'prediction');
  if (request.webSearchOptions !== undefined) body.web_search_options = parseJson(request.webSearchOptions, 'web_search_options');
  if (request.imageAspectRatio !== undefined) body.image_config = { aspect_ratio: request.imageAspectRatio };
  if (request.user !== undefined) body.user = request.user;
  // The edge took only a JS safe integer, so the number is exact.
  if (request.seed !== undefined) body.seed = Number(request.seed);
  if (request.verbosity !== undefined) body.verbosity = request.verbosity;
  if (request.n !== undefined && request.n > 1) body.n = request.n;
  if (request.logprobs !== undefined) body.logprobs = request.logprobs;
  if (request.topLogprobs !== undefined) body.top_logprobs = request.topLogprobs;
  const extra = parseJson(request.extraBody, 'extra_body');
  if (extra && typeof extra === 'object' && !Array.isArray(extra)) {
    for (const [field, value] of Object.entries(extra)) if (!(field in body)) body[field] = value;
  }
  if (stream) {
    body.stream = true;
    // Always asked for, whatever the client wanted: it is what we bill from.
    body.stream_options = { include_usage: true };
  }
  return { body, unsent: unsentParameters('openai', request) };
}
