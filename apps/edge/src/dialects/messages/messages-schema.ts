import { z } from 'zod';
import { cacheControlSchema } from '../../canonical/cache-control.js';
import { parseBody } from '../../canonical/validation.js';
import { routingStrategy } from '../../inference/strategy.js';
import { primaryModelFromModels, routingChoiceFields } from '../../inference/routing-choices.js';
import type { FreeFormField } from '../../json-depth.js';

/*
 * The messages request (spec §4.10, wire-formats.md "Anthropic Messages"). Objects inside the body drop
 * fields they do not know (zod's default): a newer client's extra block fields (`citations` settings,
 * `caller`, `transformations`) change nothing here. Unknown top-level fields are kept (`loose`): a
 * model's extra_parameters pass through, anything else is dropped and reported, as in chat completions.
 * Optional fields accept null as "absent".
 */

const cacheControl = cacheControlSchema;
export type { CacheControlInput } from '../../canonical/cache-control.js';

const textBlock = z.object({
  type: z.literal('text'),
  text: z.string(),
  cache_control: cacheControl.nullish(),
  // Citations of an earlier answer, replayed: the text itself is what a provider needs.
  citations: z.array(z.unknown()).nullish(),
});

const imageBlock = z.object({
  type: z.literal('image'),
  source: z.discriminatedUnion('type', [
    z.object({ type: z.literal('base64'), media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']), data: z.string().min(1) }),
    z.object({ type: z.literal('url'), url: z.string().min(1) }),
    z.object({ type: z.literal('file'), file_id: z.string() }),
  ]),
  cache_control: cacheControl.nullish(),
});

const documentBlock = z.object({
  type: z.literal('document'),
  source: z.discriminatedUnion('type', [
    z.object({ type: z.literal('base64'), media_type: z.literal('application/pdf'), data: z.string().min(1) }),
    z.object({ type: z.literal('text'), media_type: z.literal('text/plain'), data: z.string() }),
    z.object({ type: z.literal('url'), url: z.string().min(1) }),
    z.object({ type: z.literal('content'), content: z.union([z.string(), z.array(z.discriminatedUnion('type', [textBlock, imageBlock]))]) }),
    z.object({ type: z.literal('file'), file_id: z.string() }),
  ]),
  title: z.string().nullish(),
  context: z.string().nullish(),
  citations: z.object({ enabled: z.boolean().nullish() }).nullish(),
  cache_control: cacheControl.nullish(),
});

const toolUseBlock = z.object({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl.nullish(),
});

const toolResultBlock = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(z.discriminatedUnion('type', [textBlock, imageBlock, documentBlock]))]).nullish(),
  is_error: z.boolean().nullish(),
  cache_control: cacheControl.nullish(),
});

const thinkingBlock = z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() });
const redactedThinkingBlock = z.object({ type: z.literal('redacted_thinking'), data: z.string() });

const contentBlock = z.discriminatedUnion('type', [textBlock, imageBlock, documentBlock, toolUseBlock, toolResultBlock, thinkingBlock, redactedThinkingBlock]);
export type MessagesContentBlock = z.infer<typeof contentBlock>;
export type TextBlockInput = z.infer<typeof textBlock>;
export type ImageBlockInput = z.infer<typeof imageBlock>;
export type DocumentBlockInput = z.infer<typeof documentBlock>;
export type ToolResultBlockInput = z.infer<typeof toolResultBlock>;

/** `system` turns (spec §4.10: mid-conversation, text only) are checked by the converter, naming the block. */
const message = z.object({
  role: z.enum(['user', 'assistant', 'system']),
  // An empty block list says nothing a provider could answer (Anthropic refuses it too).
  content: z.union([z.string(), z.array(contentBlock).min(1)]),
});
export type MessagesMessageInput = z.infer<typeof message>;

/**
 * A client tool. Server tools (web search, code execution, … : a dated `type`) have no `input_schema`
 * and run at Anthropic; the converter refuses them by name rather than letting zod say "expected record".
 */
const tool = z.object({
  type: z.string().nullish(),
  name: z.string().min(1),
  description: z.string().nullish(),
  input_schema: z.record(z.string(), z.unknown()).nullish(),
  cache_control: cacheControl.nullish(),
  strict: z.boolean().nullish(),
});
export type MessagesToolInput = z.infer<typeof tool>;

const disableParallel = { disable_parallel_tool_use: z.boolean().nullish() };
const toolChoice = z.discriminatedUnion('type', [
  z.object({ type: z.literal('auto'), ...disableParallel }),
  z.object({ type: z.literal('any'), ...disableParallel }),
  z.object({ type: z.literal('tool'), name: z.string().min(1), ...disableParallel }),
  z.object({ type: z.literal('none') }),
]);
export type MessagesToolChoice = z.infer<typeof toolChoice>;

const thinking = z.discriminatedUnion('type', [
  z.object({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1024).max(4_294_967_295, 'must be at most 4294967295'), display: z.enum(['summarized', 'omitted']).nullish() }),
  z.object({ type: z.literal('disabled') }),
  z.object({ type: z.literal('adaptive'), display: z.enum(['summarized', 'omitted']).nullish() }),
  z.object({ type: z.literal('between_tools') }),
]);

const outputConfig = z.object({
  effort: z.enum(['low', 'medium', 'high', 'xhigh', 'max']).nullish(),
  format: z.object({ type: z.literal('json_schema'), schema: z.record(z.string(), z.unknown()) }).nullish(),
});

/** Body fields holding free-form JSON (src/json-depth.ts names them in nesting errors). */
export const MESSAGES_FREE_FORM_FIELDS: readonly FreeFormField[] = [
  ['tools', '*', 'input_schema'],
  ['output_config', 'format', 'schema'],
  ['messages', '*', 'content', '*', 'input'],
];

/** What both routes read: the conversation and everything that shapes the prompt. */
const promptFields = {
  model: z.string().min(1),
  messages: z.array(message).min(1),
  system: z.union([z.string(), z.array(textBlock)]).nullish(),
  tools: z.array(tool).nullish(),
  tool_choice: toolChoice.nullish(),
  thinking: thinking.nullish(),
  output_config: outputConfig.nullish(),
  cache_control: cacheControl.nullish(),
};

/**
 * Fields Anthropic's API has that change nothing at a gateway (where to run, which capacity, which
 * workspace, server-side containers and MCP servers): accepted in their shape, never forwarded, and
 * reported in `x-gateway-dropped-params`.
 */
const acceptedOnly = {
  service_tier: z.string().nullish(),
  container: z.unknown().optional(),
  inference_geo: z.string().nullish(),
  speed: z.string().nullish(),
  diagnostics: z.unknown().optional(),
  context_management: z.unknown().optional(),
  mcp_servers: z.array(z.unknown()).nullish(),
};

export const messagesRequest = z
  .object({
    ...promptFields,
    ...acceptedOnly,
    max_tokens: z.number().int().min(1).max(4_294_967_295, 'must be at most 4294967295'),
    temperature: z.number().min(0).max(1).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    top_k: z.number().int().min(0).max(0xffffffff).nullish(),
    stop_sequences: z.array(z.string()).nullish(),
    stream: z.boolean().nullish(),
    metadata: z.object({ user_id: z.string().nullish() }).nullish(),
    routing: routingStrategy.nullish(),
    // Model fallbacks and provider preferences (OpenRouter's `models` and `provider`).
    ...routingChoiceFields,
  })
  .loose()
  .superRefine((body, context) => {
    // Anthropic's own rule: thinking tokens count toward max_tokens, so the budget must leave room.
    if (body.thinking?.type === 'enabled' && body.thinking.budget_tokens >= body.max_tokens) {
      context.addIssue({ code: 'custom', path: ['thinking', 'budget_tokens'], message: `must be less than max_tokens (${body.max_tokens})` });
    }
  });

export type MessagesRequest = z.infer<typeof messagesRequest>;

/** POST /v1/messages/count_tokens: the prompt alone (no max_tokens, no sampling). */
export const countTokensRequest = z.object({ ...promptFields, ...acceptedOnly }).loose();
export type CountTokensRequest = z.infer<typeof countTokensRequest>;

/** Validates a parsed body; a failure is a 400 whose message names the field path (`body.messages.0.content: ...`). */
export function parseMessagesRequest(body: unknown): MessagesRequest {
  return parseBody(messagesRequest, primaryModelFromModels(body));
}

export function parseCountTokensRequest(body: unknown): CountTokensRequest {
  return parseBody(countTokensRequest, body);
}
