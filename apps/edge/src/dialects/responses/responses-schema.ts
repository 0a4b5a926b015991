import { z } from 'zod';
import { cacheControlSchema } from '../../canonical/cache-control.js';
import { parseBody } from '../../canonical/validation.js';
import { routingStrategy } from '../../inference/strategy.js';
import { primaryModelFromModels, routingChoiceFields } from '../../inference/routing-choices.js';
import type { FreeFormField } from '../../json-depth.js';

/** The tool types OpenAI runs on its side: accepted in a request, never sent to a provider. */
export const HOSTED_TOOL_TYPES = [
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'web_search_2025_08_26',
  'file_search',
  'code_interpreter',
  'image_generation',
  'computer_use_preview',
  'computer_use',
  'local_shell',
  'mcp',
] as const;
export type HostedToolType = (typeof HOSTED_TOOL_TYPES)[number];

/*
 * The responses request (spec §4.9; wire-formats.md "OpenAI Responses"), as `client.responses.create`
 * sends it. Optional fields accept null as "absent". Unknown top-level fields are kept (`loose`): a
 * model's extra_parameters pass through, anything else is dropped later and reported.
 */

/** OpenRouter's convention, as in chat: a text, image or file part may end a cacheable prefix (canonical/cache-control.ts). */
const cacheControl = cacheControlSchema.nullish();
const inputText = z.object({ type: z.literal('input_text'), text: z.string(), cache_control: cacheControl });
/** What an assistant turn said, when a client replays the answer it got. */
const outputText = z.object({ type: z.literal('output_text'), text: z.string(), cache_control: cacheControl });
const refusal = z.object({ type: z.literal('refusal'), refusal: z.string() });
const inputImage = z
  .object({
    type: z.literal('input_image'),
    image_url: z.string().min(1).nullish(),
    file_id: z.string().nullish(),
    detail: z.enum(['low', 'high', 'auto', 'original']).nullish(),
    cache_control: cacheControl,
  })
  .refine((image) => image.image_url != null || image.file_id != null, { message: 'one of image_url or file_id is required' });
const inputFile = z
  .object({
    type: z.literal('input_file'),
    filename: z.string().nullish(),
    file_data: z.string().min(1).nullish(),
    file_url: z.string().min(1).nullish(),
    file_id: z.string().nullish(),
    cache_control: cacheControl,
  })
  .refine((file) => file.file_data != null || file.file_url != null || file.file_id != null, {
    message: 'one of file_data, file_url or file_id is required',
  });

const contentPart = z.discriminatedUnion('type', [inputText, outputText, refusal, inputImage, inputFile], {
  error: 'a content part is one of input_text, input_image, input_file (and output_text, refusal in assistant turns)',
});
export type ResponsesContentPart = z.infer<typeof contentPart>;

const message = z.object({
  type: z.literal('message'),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(contentPart)]),
  id: z.string().nullish(),
  status: z.string().nullish(),
  /** An assistant message's role in the turn (`commentary`, `final_answer`): accepted, not passed on. */
  phase: z.string().nullish(),
});

/** A call of a function tool; `namespace` names the namespace tool it belongs to. */
const functionCall = z.object({
  type: z.literal('function_call'),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: z.string().nullish(),
  arguments: z.string(),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/** A call of a custom (free-form) tool, its input raw text. */
const customToolCall = z.object({
  type: z.literal('custom_tool_call'),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: z.string().nullish(),
  input: z.string(),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/** A tool's result: text, or parts (text, images, files) as a function may return them. */
const functionCallOutput = z.object({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(z.discriminatedUnion('type', [inputText, inputImage, inputFile]))]),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/** A custom tool's result, as a function's. */
const customToolCallOutput = z.object({
  type: z.literal('custom_tool_call_output'),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(z.discriminatedUnion('type', [inputText, inputImage, inputFile]))]),
  id: z.string().nullish(),
});

const reasoning = z.object({
  type: z.literal('reasoning'),
  id: z.string().nullish(),
  summary: z.array(z.object({ type: z.literal('summary_text'), text: z.string() })).nullish(),
  encrypted_content: z.string().nullish(),
  status: z.string().nullish(),
});

/** An item /v1/responses/compact returned (compaction-item.ts): expanded into the summary it carries. */
const compaction = z.object({ type: z.literal('compaction'), encrypted_content: z.string(), id: z.string().nullish() });

/**
 * Codex's in-band compaction (`remote_compaction_v2`): the last input item of a request that asks for
 * the conversation before it to be compacted (compaction.ts) rather than answered.
 */
const compactionTrigger = z.object({ type: z.literal('compaction_trigger') });

/** Refused by the converter with its path: the gateway keeps no items to refer to. */
const itemReference = z.object({ type: z.literal('item_reference'), id: z.string() });

const INPUT_ITEM_TYPES = 'message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning, compaction, compaction_trigger';

const typedItem = z.discriminatedUnion('type', [message, functionCall, functionCallOutput, customToolCall, customToolCallOutput, reasoning, compaction, compactionTrigger, itemReference], {
  error: (issue) =>
    issue.code === 'invalid_union' && issue.input !== undefined
      ? `unsupported input item type; the gateway takes ${INPUT_ITEM_TYPES}`
      : undefined,
});

/*
 * Two item kinds may leave `type` out (the SDK's EasyInputMessage and ItemReference): a message has a
 * role, a reference only an id. The type is filled in before the union picks a branch, so errors name
 * the right fields.
 */
const inputItem = z.preprocess((item) => {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return item;
  const typed = item as Record<string, unknown>;
  if (typed.type != null) return item;
  if (typed.role !== undefined) return { ...typed, type: 'message' };
  if (typed.id !== undefined) return { ...typed, type: 'item_reference' };
  return item;
}, typedItem);
export type ResponsesInputItem = z.infer<typeof typedItem>;

const functionTool = z.object({
  type: z.literal('function'),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
  // OpenRouter's tool caching; taken on top-level tools (a namespace member's is ignored).
  cache_control: cacheControl,
});
export type ResponsesFunctionTool = z.infer<typeof functionTool>;

/** A free-form tool: the model writes its input as raw text, optionally matching a grammar. */
const customTool = z.object({
  type: z.literal('custom'),
  name: z.string().min(1),
  description: z.string().nullish(),
  format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('grammar'), syntax: z.enum(['lark', 'regex']), definition: z.string() }),
    ])
    .nullish(),
  cache_control: cacheControl,
});

/** Function and custom tools grouped under a name (Codex's sub-agent and MCP tools). */
const namespaceTool = z.object({
  type: z.literal('namespace'),
  name: z.string().min(1),
  description: z.string().nullish(),
  tools: z.array(z.discriminatedUnion('type', [functionTool, customTool], { error: 'a namespace holds function and custom tools' })).min(1),
});

/** Tools OpenAI runs itself: accepted with whatever settings they carry, dropped before any provider (responses-tools.ts). */
const hostedTool = z.object({ type: z.enum(HOSTED_TOOL_TYPES) }).loose();

const TOOL_TYPES = `function, custom, namespace, ${HOSTED_TOOL_TYPES.join(', ')}`;

const tool = z.discriminatedUnion('type', [functionTool, customTool, namespaceTool, hostedTool], {
  error: (issue) => (issue.code === 'invalid_union' ? `unsupported tool type; a tool is one of ${TOOL_TYPES}` : undefined),
});
export type ResponsesTool = z.infer<typeof tool>;

const toolChoice = z.union(
  [
    z.enum(['none', 'auto', 'required']),
    z.object({ type: z.literal('function'), name: z.string().min(1) }),
    z.object({ type: z.literal('custom'), name: z.string().min(1) }),
    z.object({ type: z.enum(HOSTED_TOOL_TYPES) }).loose(),
  ],
  { error: "tool_choice is 'none', 'auto', 'required', {type: 'function' | 'custom', name} or {type: <hosted tool>}" },
);
export type ResponsesToolChoice = z.infer<typeof toolChoice>;

const textFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    name: z.string().min(1),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
    description: z.string().nullish(),
  }),
]);

/**
 * The fields below that hold free-form JSON (records of unknown): a body nested too deep inside one is
 * refused naming the field (src/json-depth.ts).
 */
export const RESPONSES_FREE_FORM_FIELDS: readonly FreeFormField[] = [
  ['tools', '*', 'parameters'],
  ['tools', '*', 'tools', '*', 'parameters'],
  ['text', 'format', 'schema'],
  ['metadata'],
  ['client_metadata'],
];

const NOTHING_TO_SEND = 'is required when `instructions` is empty: the request has nothing to send the model.';

/** The request's fields, without the check that it has something to send (see below for who takes which). */
const responsesFields = z
  .object({
    // OpenAI's API takes the model from a stored prompt when `model` is absent; the gateway stores none.
    model: z.string({ error: (issue) => (issue.input === undefined ? 'is required: name the model (this gateway keeps no stored prompts to take it from).' : undefined) }).min(1),
    // Optional in OpenAI's API (a request may be its instructions alone): absent is an empty list, so every
    // reader sees a string or a list. The object's check below refuses a request with nothing to send.
    input: z.preprocess((input) => input ?? [], z.union([z.string(), z.array(inputItem)])),
    instructions: z.string().nullish(),
    tools: z.array(tool).nullish(),
    tool_choice: toolChoice.nullish(),
    text: z.object({ format: textFormat.nullish(), verbosity: z.enum(['low', 'medium', 'high']).nullish() }).nullish(),
    reasoning: z
      .object({
        effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']).nullish(),
        summary: z.enum(['auto', 'concise', 'detailed']).nullish(),
      })
      .nullish(),
    max_output_tokens: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295').nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    presence_penalty: z.number().min(-2).max(2).nullish(),
    frequency_penalty: z.number().min(-2).max(2).nullish(),
    top_logprobs: z.number().int().min(0).max(20).nullish(),
    max_tool_calls: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295').nullish(),
    service_tier: z.string().nullish(),
    // Cache affinity (routing/candidates.ts): same account and key, same provider while it is healthy.
    prompt_cache_key: z.string().nullish(),
    // Automatic caching, as in chat: the conversation's last block ends the cacheable prefix.
    cache_control: cacheControl,
    prompt_cache_retention: z.string().nullish(),
    safety_identifier: z.string().nullish(),
    // Codex's labels of the request (its installation, session): like metadata, never sent to a provider.
    client_metadata: z.record(z.string(), z.unknown()).nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    // OpenAI's bounds: at most 16 pairs, keys of 64 and values of 512 characters.
    metadata: z
      .record(z.string().max(64), z.string().max(512))
      .refine((metadata) => Object.keys(metadata).length <= 16, { message: 'at most 16 metadata pairs' })
      .nullish(),
    user: z.string().nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_obfuscation: z.boolean().nullish() }).nullish(),
    store: z.boolean().nullish(),
    previous_response_id: z.string().nullish(),
    include: z.array(z.string()).nullish(),
    truncation: z.enum(['auto', 'disabled']).nullish(),
    background: z.boolean().nullish(),
    routing: routingStrategy.nullish(),
    // Model fallbacks and provider preferences (OpenRouter's `models` and `provider`).
    ...routingChoiceFields,
  })
  .loose();

/** POST /v1/responses: a request with neither `input` nor `instructions` has nothing to send the model. */
export const responsesRequest = responsesFields.superRefine((body, context) => {
  if (body.input.length === 0 && !body.instructions) {
    context.addIssue({ code: 'custom', path: ['input'], message: NOTHING_TO_SEND });
  }
});

export type ResponsesRequest = z.infer<typeof responsesRequest>;

/** Validates a parsed body; a failure is a 400 whose message names the field path (`body.input.2.call_id: ...`). */
export function parseResponsesRequest(body: unknown): ResponsesRequest {
  return parseBody(responsesRequest, primaryModelFromModels(body));
}

/**
 * POST /v1/responses/compact: `model` is its only required field (OpenAI's API; the SDK's generated test
 * sends nothing else). An empty conversation still sends the model something, the gateway's summary prompt.
 */
export function parseCompactionRequest(body: unknown): ResponsesRequest {
  return parseBody(responsesFields, primaryModelFromModels(body));
}

/** POST /v1/responses/input_tokens: every field optional (OpenAI's API), `model` too: counting calls no model. */
const inputTokensRequest = responsesFields.extend({ model: z.string().min(1).nullish() }).loose();

export type InputTokensRequest = z.infer<typeof inputTokensRequest>;

export function parseInputTokensRequest(body: unknown): InputTokensRequest {
  return parseBody(inputTokensRequest, primaryModelFromModels(body));
}
