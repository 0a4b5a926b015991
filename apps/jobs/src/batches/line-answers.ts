import { costJson, formatCredits, openAiModerationJson } from '@gateway/platform';
import type { ChatResponse, EmbedResponse, ModerateResponse, Usage } from '@gateway/proto';
import type { BatchesTable } from '../jobs-schema.js';
import type { RunFailure } from '../run-failure.js';
import type { LineBody } from './line-hold.js';

/**
 * A batch line's result as its output or error file carries it (docs/jobs.md "How a batch runs"):
 * OpenAI's batch line `{id, custom_id, response: {status_code, request_id, body}, error}`, its body the
 * endpoint's answer with `usage.cost`, or the OpenAI error body of a line that failed.
 */

export interface ClaimedLine {
  batch: BatchesTable;
  lineIndex: number;
  customId: string;
  body: LineBody;
  attempts: number;
}

export interface LineOutcome {
  /** The output or error file line. */
  result: Record<string, unknown>;
  isError: boolean;
  costPico: bigint;
}

/**
 * OpenAI's error line: the request's status and error body (`{message, type, param, code}`, as the edge
 * answers the same request) under `response`. The failure is decided by run-failure.ts.
 */
export function errorLine(line: Pick<ClaimedLine, 'customId'>, requestId: string, failure: Omit<RunFailure, 'transient'>): LineOutcome {
  const { status, type, code, message } = failure;
  return {
    result: {
      id: `batch_req_${requestId}`,
      custom_id: line.customId,
      response: { status_code: status, request_id: requestId, body: { error: { message, type, param: null, code } } },
      error: null,
    },
    isError: true,
    costPico: 0n,
  };
}

function usageJson(usage: Usage | undefined, costPico: bigint, breakdown: ReturnType<typeof costJson> | undefined) {
  return {
    prompt_tokens: usage?.inputTokens ?? 0,
    completion_tokens: usage?.outputTokens ?? 0,
    total_tokens: (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0),
    prompt_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
    cost: formatCredits(costPico),
    ...(breakdown ? { cost_details: breakdown.cost_details } : {}),
  };
}

export function chatCompletionJson(response: ChatResponse, costPico: bigint, breakdown: ReturnType<typeof costJson>): Record<string, unknown> {
  return {
    id: response.id,
    object: 'chat.completion',
    created: Number(response.created),
    model: response.modelId,
    choices: response.choices.map((choice) => ({
      index: choice.index,
      message: {
        role: 'assistant',
        content: choice.message?.content ?? null,
        refusal: choice.message?.refusal ?? null,
        ...(choice.message && choice.message.toolCalls.length > 0
          ? { tool_calls: choice.message.toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })) }
          : {}),
      },
      finish_reason: choice.finishReason || null,
      logprobs: null,
    })),
    usage: usageJson(response.usage, costPico, breakdown),
    provider: response.providerId,
  };
}

export function embeddingsJson(response: EmbedResponse, costPico: bigint): Record<string, unknown> {
  return {
    object: 'list',
    data: response.embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding: embedding.values })),
    model: response.modelId,
    usage: { prompt_tokens: response.usage?.inputTokens ?? 0, total_tokens: response.usage?.inputTokens ?? 0, cost: formatCredits(costPico) },
    provider: response.providerId,
  };
}

/** A responses line's answer: OpenAI's `response` object (text and function calls), with usage.cost. */
export function responseJson(response: ChatResponse, requestId: string, costPico: bigint): Record<string, unknown> {
  const choice = response.choices[0];
  const message = choice?.message;
  const output: Record<string, unknown>[] = [];
  if (message?.content || message?.refusal) {
    output.push({
      type: 'message',
      id: `msg_${requestId}`,
      status: 'completed',
      role: 'assistant',
      content: [message.content ? { type: 'output_text', text: message.content, annotations: [] } : { type: 'refusal', refusal: message.refusal }],
    });
  }
  for (const call of message?.toolCalls ?? []) {
    output.push({ type: 'function_call', id: `fc_${call.id}`, call_id: call.id, name: call.name, arguments: call.arguments, status: 'completed' });
  }
  const cutShort = choice?.finishReason === 'length';
  const usage = response.usage;
  return {
    id: `resp_${requestId}`,
    object: 'response',
    created_at: Number(response.created),
    status: cutShort ? 'incomplete' : 'completed',
    incomplete_details: cutShort ? { reason: 'max_output_tokens' } : null,
    error: null,
    model: response.modelId,
    output,
    usage: {
      input_tokens: usage?.inputTokens ?? 0,
      input_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0 },
      output_tokens: usage?.outputTokens ?? 0,
      output_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
      total_tokens: (usage?.inputTokens ?? 0) + (usage?.outputTokens ?? 0),
      cost: formatCredits(costPico),
    },
    provider: response.providerId,
  };
}

export function moderationJson(response: ModerateResponse, costPico: bigint): Record<string, unknown> {
  return {
    ...openAiModerationJson(response),
    usage: { prompt_tokens: response.usage?.inputTokens ?? 0, total_tokens: response.usage?.inputTokens ?? 0, cost: formatCredits(costPico) },
    provider: response.providerId,
  };
}
