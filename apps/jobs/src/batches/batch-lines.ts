import { z } from 'zod';
import type { ChatMessage, ContentPart, Tool, ToolChoice } from '@gateway/proto';

/**
 * One line of an OpenAI Batch input file (`{custom_id, method, url, body}`), validated before any line
 * runs, and the body of each supported endpoint turned into what the Router takes. A batch carries the
 * text subset of chat completions (text content, tools, response formats, sampling parameters) and
 * embeddings of text; anything else is refused by name at validation (docs/jobs.md "What a line may
 * carry"), so a batch never fails half way on a field it could never send.
 */

export const BATCH_ENDPOINTS = ['/v1/chat/completions', '/v1/embeddings', '/v1/moderations', '/v1/responses'] as const;
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number];
/** The catalog's endpoint name of each batch endpoint. */
export const CATALOG_ENDPOINT: Record<BatchEndpoint, string> = {
  '/v1/chat/completions': 'chat.completions',
  '/v1/embeddings': 'embeddings',
  '/v1/moderations': 'moderations',
  '/v1/responses': 'responses',
};

const CUSTOM_ID_MAX = 512;
const TEXT_MAX = 1_000_000;

const textPart = z.strictObject({ type: z.literal('text'), text: z.string().max(TEXT_MAX) });
const content = z.union([z.string().max(TEXT_MAX), z.array(textPart).max(256)]);
const toolCall = z.strictObject({
  id: z.string().min(1).max(256),
  type: z.literal('function'),
  function: z.strictObject({ name: z.string().min(1).max(256), arguments: z.string().max(TEXT_MAX) }),
});
const message = z.discriminatedUnion('role', [
  z.strictObject({ role: z.literal('system'), content, name: z.string().max(256).optional() }),
  z.strictObject({ role: z.literal('developer'), content, name: z.string().max(256).optional() }),
  z.strictObject({ role: z.literal('user'), content, name: z.string().max(256).optional() }),
  z.strictObject({
    role: z.literal('assistant'),
    content: content.nullish(),
    name: z.string().max(256).optional(),
    tool_calls: z.array(toolCall).max(128).optional(),
    refusal: z.string().nullish(),
  }),
  z.strictObject({ role: z.literal('tool'), content, tool_call_id: z.string().min(1).max(256) }),
]);
const tool = z.strictObject({
  type: z.literal('function'),
  function: z.strictObject({
    name: z.string().min(1).max(256),
    description: z.string().max(TEXT_MAX).optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});
const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: z.string().min(1).max(256) }) }),
]);
const responseFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    json_schema: z.strictObject({
      name: z.string().min(1).max(256),
      description: z.string().max(TEXT_MAX).optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

export const chatBody = z.strictObject({
  model: z.string().min(1).max(256),
  messages: z.array(message).min(1).max(2_048),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  max_tokens: z.number().int().min(1).max(4_294_967_295).nullish(),
  max_completion_tokens: z.number().int().min(1).max(4_294_967_295).nullish(),
  stop: z.union([z.string().max(256), z.array(z.string().max(256)).max(4)]).nullish(),
  seed: z.number().int().nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  tools: z.array(tool).max(128).optional(),
  tool_choice: toolChoice.optional(),
  parallel_tool_calls: z.boolean().optional(),
  response_format: responseFormat.optional(),
  reasoning_effort: z.enum(['minimal', 'low', 'medium', 'high']).nullish(),
  user: z.string().max(256).optional(),
  stream: z.literal(false).optional(),
});
export type ChatBody = z.output<typeof chatBody>;

export const embeddingsBody = z.strictObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string().min(1).max(TEXT_MAX), z.array(z.string().min(1).max(TEXT_MAX)).min(1).max(2_048)]),
  dimensions: z.number().int().min(1).max(65_536).optional(),
  encoding_format: z.literal('float').optional(),
  user: z.string().max(256).optional(),
});
export type EmbeddingsBody = z.output<typeof embeddingsBody>;

/**
 * A moderations line: text input (a string, or up to 1,000 strings each judged on its own). `model` is
 * required in a batch line (the interactive route's catalog default is the edge's to choose); image
 * inputs are refused by name.
 */
export const moderationsBody = z.strictObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string().min(1).max(TEXT_MAX), z.array(z.string().min(1).max(TEXT_MAX)).min(1).max(1_000)]),
});
export type ModerationsBody = z.output<typeof moderationsBody>;

// A responses line: the text subset of the Responses API (text input and message items, function calls
// and their outputs, function tools, text formats, sampling), turned into the chat body above at
// validation, so it runs on the chat path and is stored as a chat body. `store` only as false (a batch
// line's response is not kept), `stream` only as false; `previous_response_id`, built-in tools, images
// and files are refused by name.
const responsesText = z.strictObject({ type: z.enum(['input_text', 'output_text']), text: z.string().max(TEXT_MAX), annotations: z.array(z.unknown()).max(0).optional() });
const responsesMessage = z.strictObject({
  type: z.literal('message').optional(),
  id: z.string().max(256).optional(),
  status: z.string().max(32).optional(),
  role: z.enum(['user', 'system', 'developer', 'assistant']),
  content: z.union([z.string().max(TEXT_MAX), z.array(responsesText).max(256)]),
});
const responsesFunctionCall = z.strictObject({
  type: z.literal('function_call'),
  id: z.string().max(256).optional(),
  status: z.string().max(32).optional(),
  call_id: z.string().min(1).max(256),
  name: z.string().min(1).max(256),
  arguments: z.string().max(TEXT_MAX),
});
const responsesFunctionOutput = z.strictObject({
  type: z.literal('function_call_output'),
  id: z.string().max(256).optional(),
  status: z.string().max(32).optional(),
  call_id: z.string().min(1).max(256),
  output: z.string().max(TEXT_MAX),
});
const responsesFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    name: z.string().min(1).max(256),
    description: z.string().max(TEXT_MAX).optional(),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
  }),
]);
export const responsesBody = z.strictObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string().min(1).max(TEXT_MAX), z.array(z.union([responsesMessage, responsesFunctionCall, responsesFunctionOutput])).min(1).max(2_048)]),
  instructions: z.string().max(TEXT_MAX).nullish(),
  max_output_tokens: z.number().int().min(1).max(4_294_967_295).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  tools: z.array(z.strictObject({
    type: z.literal('function'),
    name: z.string().min(1).max(256),
    description: z.string().max(TEXT_MAX).nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  })).max(128).optional(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.strictObject({ type: z.literal('function'), name: z.string().min(1).max(256) })]).optional(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.strictObject({ format: responsesFormat.optional() }).optional(),
  reasoning: z.strictObject({ effort: z.enum(['minimal', 'low', 'medium', 'high']).nullish() }).nullish(),
  user: z.string().max(256).optional(),
  store: z.literal(false).optional(),
  stream: z.literal(false).optional(),
});
export type ResponsesBody = z.output<typeof responsesBody>;

type ChatMessageInput = ChatBody['messages'][number];

/** A responses line as the chat body it runs as (the chat schema checks the result again). */
export function chatBodyOfResponses(body: ResponsesBody): unknown {
  const messages: ChatMessageInput[] = [];
  if (body.instructions) messages.push({ role: 'system', content: body.instructions });
  const items = typeof body.input === 'string' ? [{ role: 'user' as const, content: body.input }] : body.input;
  for (const item of items) {
    if ('role' in item) {
      const content = typeof item.content === 'string' ? item.content : item.content.map((part) => ({ type: 'text' as const, text: part.text }));
      messages.push({ role: item.role, content } as ChatMessageInput);
    } else if (item.type === 'function_call') {
      // Consecutive calls are one assistant turn with several tool calls.
      const last = messages.at(-1);
      const call = { id: item.call_id, type: 'function' as const, function: { name: item.name, arguments: item.arguments } };
      if (last?.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
      else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else {
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: item.output });
    }
  }
  const format = body.text?.format;
  const choice = body.tool_choice;
  const chat: Record<string, unknown> = {
    model: body.model,
    messages,
    max_completion_tokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    tools: body.tools?.map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description ?? undefined, parameters: tool.parameters ?? undefined, strict: tool.strict ?? undefined },
    })),
    tool_choice: choice === undefined ? undefined : typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } },
    parallel_tool_calls: body.parallel_tool_calls ?? undefined,
    response_format: format === undefined
      ? undefined
      : format.type === 'json_schema'
        ? { type: 'json_schema', json_schema: { name: format.name, description: format.description, schema: format.schema, strict: format.strict ?? undefined } }
        : format,
    reasoning_effort: body.reasoning?.effort ?? undefined,
    user: body.user,
  };
  return Object.fromEntries(Object.entries(chat).filter(([, value]) => value !== undefined));
}

const BODY_SCHEMA: Record<BatchEndpoint, z.ZodType<ChatBody | EmbeddingsBody | ModerationsBody>> = {
  '/v1/chat/completions': chatBody,
  '/v1/embeddings': embeddingsBody,
  '/v1/moderations': moderationsBody,
  '/v1/responses': responsesBody.transform((body, context) => {
    const chat = chatBody.safeParse(chatBodyOfResponses(body));
    if (chat.success) return chat.data;
    for (const issue of chat.error.issues) context.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  }),
};

const envelope = z.strictObject({
  custom_id: z.string().min(1).max(CUSTOM_ID_MAX),
  method: z.literal('POST'),
  url: z.string(),
  body: z.record(z.string(), z.unknown()),
});

/** A validation problem of one line, as OpenAI's batch `errors.data` entries name it. */
export interface LineProblem {
  code: string;
  message: string;
  param: string;
}

export type ParsedLine = { customId: string; body: ChatBody | EmbeddingsBody | ModerationsBody };

/** One line of the input file (its JSON text), checked against the batch's endpoint. */
export function parseLine(text: string, endpoint: BatchEndpoint): ParsedLine | LineProblem {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { code: 'invalid_json_line', message: 'This line is not parseable as valid JSON.', param: '' };
  }
  const parsed = envelope.safeParse(value);
  if (!parsed.success) return fromIssues('invalid_request', parsed.error.issues, '');
  if (parsed.data.url !== endpoint) {
    return { code: 'mismatched_endpoint', message: `The line's url ${JSON.stringify(parsed.data.url.slice(0, 100))} is not the batch's endpoint ${endpoint}.`, param: 'url' };
  }
  const body = BODY_SCHEMA[endpoint].safeParse(parsed.data.body);
  if (!body.success) return fromIssues('invalid_request', body.error.issues, 'body');
  return { customId: parsed.data.custom_id, body: body.data };
}

function fromIssues(code: string, issues: readonly z.core.$ZodIssue[], prefix: string): LineProblem {
  const issue = issues[0]!;
  const path = [prefix, ...issue.path.map(String)].filter((segment) => segment !== '').join('.');
  const message = issue.code === 'unrecognized_keys' ? `unsupported in a batch line: ${issue.keys.join(', ')}` : issue.message;
  return { code, message: `${path || 'line'}: ${message}`, param: issue.code === 'unrecognized_keys' ? [path, issue.keys[0]].filter(Boolean).join('.') : path };
}

function parts(value: string | { text: string }[] | null | undefined): ContentPart[] {
  if (value === null || value === undefined) return [];
  if (typeof value === 'string') return [{ part: { $case: 'text', value } }];
  return value.map((part) => ({ part: { $case: 'text', value: part.text } }));
}

/** The chat body's messages, tools and choices in the Router's terms. */
export function chatMessages(body: ChatBody): { messages: ChatMessage[]; tools: Tool[]; toolChoice: ToolChoice | undefined } {
  const messages = body.messages.map((entry): ChatMessage => ({
    role: entry.role,
    content: parts(entry.content),
    toolCalls: entry.role === 'assistant' ? (entry.tool_calls ?? []).map((call) => ({ id: call.id, name: call.function.name, arguments: call.function.arguments })) : [],
    toolCallId: entry.role === 'tool' ? entry.tool_call_id : '',
    name: 'name' in entry ? entry.name : undefined,
    reasoning: [],
    isError: false,
  }));
  const tools = (body.tools ?? []).map((entry): Tool => ({
    name: entry.function.name,
    description: entry.function.description ?? '',
    parameters: JSON.stringify(entry.function.parameters ?? { type: 'object', properties: {} }),
    strict: entry.function.strict ?? undefined,
  }));
  const choice = body.tool_choice;
  const toolChoice: ToolChoice | undefined = choice === undefined
    ? undefined
    : typeof choice === 'string'
      ? { mode: choice, toolName: '', disableParallel: body.parallel_tool_calls === false }
      : { mode: 'tool', toolName: choice.function.name, disableParallel: body.parallel_tool_calls === false };
  return { messages, tools, toolChoice };
}

/** Bytes of the prompt's text: an upper bound of its tokens (a byte-level BPE token covers at least one byte). */
export function promptBytes(body: ChatBody | EmbeddingsBody | ModerationsBody): number {
  if ('input' in body) return typeof body.input === 'string' ? Buffer.byteLength(body.input) : body.input.reduce((sum, text) => sum + Buffer.byteLength(text), 0);
  // The whole messages JSON: its framing bounds the per-message overhead as well.
  return Buffer.byteLength(JSON.stringify(body.messages)) + (body.tools ? Buffer.byteLength(JSON.stringify(body.tools)) : 0) +
    (body.response_format ? Buffer.byteLength(JSON.stringify(body.response_format)) : 0) + 16;
}
