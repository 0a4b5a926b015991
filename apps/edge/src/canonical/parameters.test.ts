import { describe, expect, it } from 'vitest';
import type { ChatRequest, Model } from '@gateway/proto';
import type { CatalogModel } from '../catalog-cache.js';
import type { ConvertedRequest } from '../inference/dialect.js';
import { convertChatRequest } from '../dialects/chat/convert-chat-request.js';
import { parseChatCompletionRequest } from '../dialects/chat/chat-schema.js';
import { convertMessagesRequest } from '../dialects/messages/convert-messages-request.js';
import { parseMessagesRequest } from '../dialects/messages/messages-schema.js';
import { convertResponsesRequest } from '../dialects/responses/convert-responses-request.js';
import { parseResponsesRequest } from '../dialects/responses/responses-schema.js';
import { DIALECT_FIELDS, FORWARDED_PARAMETERS, type CanonicalParameter, type Dialect } from './parameters.js';
import { ReasoningTags } from './reasoning-tags.js';

const tags = new ReasoningTags('parameter-table-test-key');

const EVERY_NAME = Object.values(FORWARDED_PARAMETERS).flatMap((row) => [...row.supportedNames]);

function catalogModel(supported: readonly string[], extra: readonly string[] = []): CatalogModel {
  return {
    model: { id: 'm', reasoningEfforts: ['low', 'medium', 'high'] } as unknown as Model,
    id: 'm',
    paid: true,
    endpoints: new Set(['chat.completions', 'responses', 'messages']),
    supportedParameters: new Set(supported),
    inputModalities: new Set(['text']),
    extraParameters: new Set(extra),
    allowedTiers: null,
    availableTiers: ['free'],
  };
}

const everything = catalogModel(EVERY_NAME);
const nothing = catalogModel([]);

const CONVERT: Record<Dialect, (body: Record<string, unknown>, model: CatalogModel) => ConvertedRequest> = {
  chat: (body, model) => convertChatRequest(parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }), model, tags),
  responses: (body, model) => convertResponsesRequest(parseResponsesRequest({ model: 'm', input: 'hi', ...body }), model, tags),
  messages: (body, model) =>
    convertMessagesRequest(parseMessagesRequest({ model: 'm', max_tokens: 4096, messages: [{ role: 'user', content: 'hi' }], ...body }), model, tags),
};

interface Sample {
  /** The request fields that ask for the parameter (with what it needs, e.g. tools for a tool choice). */
  body: Record<string, unknown>;
  /** What the canonical request then carries. */
  expected: Partial<ChatRequest>;
}

const schema = { type: 'object', properties: { a: { type: 'string' } } };
const chatTool = { type: 'function', function: { name: 'f', parameters: schema } };
const responsesTool = { type: 'function', name: 'f', parameters: schema, strict: null };
const messagesTool = { name: 'f', input_schema: schema };
const oneTool = [{ name: 'f', description: '', parameters: JSON.stringify(schema) }];

/** One sample per dialect spelling in the table: a row added without one fails the coverage test below. */
const SAMPLES: Record<Dialect, Record<string, Sample>> = {
  chat: {
    tools: { body: { tools: [chatTool] }, expected: { tools: oneTool } },
    tool_choice: { body: { tools: [chatTool], tool_choice: 'required' }, expected: { toolChoice: { mode: 'required', toolName: '', disableParallel: false } } },
    response_format: { body: { response_format: { type: 'json_object' } }, expected: { responseFormat: { type: 'json_object', schemaName: '', schema: '' } } },
    temperature: { body: { temperature: 0.3 }, expected: { temperature: 0.3 } },
    top_p: { body: { top_p: 0.7 }, expected: { topP: 0.7 } },
    stop: { body: { stop: 'END' }, expected: { stop: ['END'] } },
    max_completion_tokens: { body: { max_completion_tokens: 77 }, expected: { maxOutputTokens: 77 } },
    max_tokens: { body: { max_tokens: 78 }, expected: { maxOutputTokens: 78 } },
    reasoning_effort: { body: { reasoning_effort: 'minimal' }, expected: { reasoningEffort: 'low' } },
    presence_penalty: { body: { presence_penalty: 0.5 }, expected: { presencePenalty: 0.5 } },
    frequency_penalty: { body: { frequency_penalty: -0.5 }, expected: { frequencyPenalty: -0.5 } },
    parallel_tool_calls: { body: { parallel_tool_calls: false }, expected: { parallelToolCalls: false } },
    image_config: { body: { image_config: { aspect_ratio: '16:9' } }, expected: { imageAspectRatio: '16:9' } },
    user: { body: { user: 'end-user-1' }, expected: { user: 'end-user-1' } },
    seed: { body: { seed: 42 }, expected: { seed: 42n } },
    verbosity: { body: { verbosity: 'low' }, expected: { verbosity: 'low' } },
    n: { body: { n: 2 }, expected: { n: 2 } },
    logprobs: { body: { logprobs: true }, expected: { logprobs: true } },
    top_logprobs: { body: { top_logprobs: 2 }, expected: { topLogprobs: 2 } },
  },
  responses: {
    tools: { body: { tools: [responsesTool] }, expected: { tools: oneTool } },
    tool_choice: { body: { tools: [responsesTool], tool_choice: 'required' }, expected: { toolChoice: { mode: 'required', toolName: '', disableParallel: false } } },
    'text.format': { body: { text: { format: { type: 'json_object' } } }, expected: { responseFormat: { type: 'json_object', schemaName: '', schema: '' } } },
    temperature: { body: { temperature: 0.3 }, expected: { temperature: 0.3 } },
    top_p: { body: { top_p: 0.7 }, expected: { topP: 0.7 } },
    max_output_tokens: { body: { max_output_tokens: 77 }, expected: { maxOutputTokens: 77 } },
    'reasoning.effort': { body: { reasoning: { effort: 'high' } }, expected: { reasoningEffort: 'high' } },
    'reasoning.summary': { body: { reasoning: { summary: 'concise' } }, expected: { reasoningSummary: 'concise' } },
    presence_penalty: { body: { presence_penalty: 0.5 }, expected: { presencePenalty: 0.5 } },
    frequency_penalty: { body: { frequency_penalty: -0.5 }, expected: { frequencyPenalty: -0.5 } },
    parallel_tool_calls: { body: { tools: [responsesTool], parallel_tool_calls: false }, expected: { parallelToolCalls: false } },
    user: { body: { user: 'end-user-1' }, expected: { user: 'end-user-1' } },
    'text.verbosity': { body: { text: { verbosity: 'high' } }, expected: { verbosity: 'high' } },
    include: { body: { include: ['message.output_text.logprobs'] }, expected: { logprobs: true } },
    // top_logprobs ranks the logprobs the include entry asks for (alone it is named: convert-responses-request.test.ts).
    top_logprobs: {
      body: { include: ['reasoning.encrypted_content', 'message.output_text.logprobs'], top_logprobs: 2 }, expected: { logprobs: true, topLogprobs: 2 },
    },
  },
  messages: {
    tools: { body: { tools: [messagesTool] }, expected: { tools: [{ ...oneTool[0]!, strict: undefined, cacheControl: undefined }] } },
    tool_choice: { body: { tools: [messagesTool], tool_choice: { type: 'any' } }, expected: { toolChoice: { mode: 'required', toolName: '', disableParallel: false } } },
    'output_config.format': {
      body: { output_config: { format: { type: 'json_schema', schema } } },
      expected: { responseFormat: { type: 'json_schema', schemaName: '', schema: JSON.stringify(schema), strict: undefined } },
    },
    temperature: { body: { temperature: 0.3 }, expected: { temperature: 0.3 } },
    top_p: { body: { top_p: 0.7 }, expected: { topP: 0.7 } },
    top_k: { body: { top_k: 5 }, expected: { topK: 5 } },
    stop_sequences: { body: { stop_sequences: ['END'] }, expected: { stop: ['END'] } },
    max_tokens: { body: { max_tokens: 4000 }, expected: { maxOutputTokens: 4000 } },
    thinking: { body: { thinking: { type: 'enabled', budget_tokens: 2048 } }, expected: { thinkingBudgetTokens: 2048, reasoningEffort: 'low' } },
    'output_config.effort': { body: { output_config: { effort: 'medium' } }, expected: { reasoningEffort: 'medium' } },
    'metadata.user_id': { body: { metadata: { user_id: 'end-user-1' } }, expected: { user: 'end-user-1' } },
  },
};

const DIALECTS: Dialect[] = ['chat', 'responses', 'messages'];

/** Spellings a model that lacks them refuses (400) rather than drops: several choices are never answered with one. */
const REFUSED_WHEN_UNLISTED = new Set(['n']);

function spellingsOf(dialect: Dialect): Array<[CanonicalParameter, string]> {
  return (Object.entries(FORWARDED_PARAMETERS) as Array<[CanonicalParameter, (typeof FORWARDED_PARAMETERS)[CanonicalParameter]]>).flatMap(([parameter, row]) =>
    ((row.spellings as Partial<Record<Dialect, readonly (string | { path: string })[]>>)[dialect] ?? []).map(
      (spelling) => [parameter, typeof spelling === 'string' ? spelling : spelling.path] as [CanonicalParameter, string],
    ),
  );
}

for (const dialect of DIALECTS) {
  describe(`the parameter table, ${dialect} dialect`, () => {
    it('has a sample for each of its spellings, and no sample for a spelling it lacks', () => {
      expect(Object.keys(SAMPLES[dialect]).sort()).toEqual(spellingsOf(dialect).map(([, spelling]) => spelling).sort());
    });

    for (const [parameter, spelling] of spellingsOf(dialect)) {
      const sample = () => SAMPLES[dialect][spelling]!;

      it(`${spelling} reaches the canonical request on a model that lists ${FORWARDED_PARAMETERS[parameter].supportedNames.join(' or ')}`, () => {
        for (const name of FORWARDED_PARAMETERS[parameter].supportedNames) {
          // Each name alone is enough (plus what the sample needs besides, e.g. tools for a tool choice).
          const model = catalogModel([...EVERY_NAME.filter((other) => !FORWARDED_PARAMETERS[parameter].supportedNames.includes(other as never)), name]);
          const converted = CONVERT[dialect](sample().body, model);
          expect(converted.request).toMatchObject(sample().expected);
          expect(converted.droppedParams).toEqual([]);
        }
      });

      if (REFUSED_WHEN_UNLISTED.has(spelling)) {
        it(`${spelling} is refused (400 naming it) on a model that lists none of its names`, () => {
          const others = EVERY_NAME.filter((name) => !FORWARDED_PARAMETERS[parameter].supportedNames.includes(name as never));
          expect(() => CONVERT[dialect](sample().body, catalogModel(others))).toThrow(/body\.n: m answers one choice per request: n must be 1/);
        });
        continue;
      }

      it(`${spelling} is dropped and named on a model that lists none of its names`, () => {
        const others = EVERY_NAME.filter((name) => !FORWARDED_PARAMETERS[parameter].supportedNames.includes(name as never));
        const converted = CONVERT[dialect](sample().body, catalogModel(others));
        for (const field of FORWARDED_PARAMETERS[parameter].fields) {
          const value = converted.request[field];
          expect(Array.isArray(value) ? value : value === undefined ? undefined : value, `${String(field)} after dropping ${spelling}`).toEqual(
            Array.isArray(value) ? [] : undefined,
          );
        }
        expect(converted.droppedParams).toContain(spelling);
        // Nothing it needed besides (tools for a tool choice) was dropped with it.
        expect(converted.droppedParams).toEqual([spelling]);
      });
    }

    it('a model that lists nothing gets none of them, every one named in the spelling the client sent', () => {
      const body = Object.assign(
        {}, ...Object.entries(SAMPLES[dialect]).filter(([spelling]) => !REFUSED_WHEN_UNLISTED.has(spelling)).map(([, sample]) => sample.body),
      ) as Record<string, unknown>;
      // The samples of one field overwrite each other (reasoning.effort / reasoning.summary): put them together.
      if (dialect === 'responses') {
        body.reasoning = { effort: 'high', summary: 'concise' };
        body.text = { format: { type: 'json_object' }, verbosity: 'high' };
      }
      if (dialect === 'messages') body.output_config = { format: { type: 'json_schema', schema }, effort: 'medium' };
      const converted = CONVERT[dialect](body, nothing);
      expect(converted.droppedParams).toEqual(spellingsOf(dialect).map(([, spelling]) => spelling).filter((spelling) => !REFUSED_WHEN_UNLISTED.has(spelling)).sort());
      const all = CONVERT[dialect](body, everything);
      expect(all.droppedParams).toEqual([]);
    });

    it('accepts its request fields, never forwards its accepted-only fields, and passes only listed extra parameters', () => {
      const neverForwarded = DIALECT_FIELDS[dialect].neverForwarded;
      const body: Record<string, unknown> = { safe_prompt: true, top_logprobs: 2 };
      const values: Record<string, unknown> = {
        logit_bias: { '1': 2 }, store: true, logprobs: true, top_logprobs: 2, prediction: { type: 'content', content: 'x' }, web_search_options: {}, metadata: { team: 'a' }, 'text.verbosity': 'low', service_tier: 'auto', container: 'c', inference_geo: 'us',
        speed: 'fast', diagnostics: {}, context_management: {}, mcp_servers: [{ type: 'url', url: 'https://example.com', name: 'm' }],
      };
      for (const name of neverForwarded) {
        if (name === 'text.verbosity') body.text = { verbosity: 'low' };
        // The model lists no reasoning, so the thinking itself is named beside its display.
        else if (name === 'thinking.display') body.thinking = { type: 'adaptive', display: 'omitted' };
        else body[name] = values[name];
      }
      // Listed as extra parameters, the accepted-only fields still go nowhere; `safe_prompt` goes in extra_body.
      const model = catalogModel(['max_tokens', 'max_completion_tokens'], ['safe_prompt', ...neverForwarded]);
      const converted = CONVERT[dialect](body, model);
      const alsoDropped = dialect === 'messages' ? ['thinking'] : [];
      expect(converted.droppedParams).toEqual([...new Set([...neverForwarded, 'top_logprobs', ...alsoDropped])].sort());
      expect(JSON.parse(converted.request.extraBody ?? '{}')).toEqual({ safe_prompt: true });
    });
  });
}
