import type { ChatMessage, ChatRequest, RequestContext } from '@gateway/proto';

/**
 * A canonical request with every field the pipeline fills in later already present, so filling them
 * changes no hidden class (not a spread copy with fields added: in V8 11 (Node 20) each field added to
 * a spread copy made fresh hidden classes per request, which kept request graphs alive through
 * young-generation GCs, docs/performance.md "What brought the figures here"). Optional fields are set by the dialect's converter.
 */
export function newChatRequest(modelId: string, endpoint: string, messages: ChatMessage[], includeUsage: boolean): ChatRequest {
  return {
    context: undefined,
    modelId,
    routingStrategy: '',
    endpoint,
    messages,
    tools: [],
    stop: [],
    includeUsage,
    timeoutMs: 0,
    seed: undefined,
    verbosity: undefined,
    thinkingMode: undefined,
    outputEffort: undefined,
    n: undefined,
    logprobs: undefined,
    topLogprobs: undefined,
    anthropicBeta: undefined,
  };
}

/** A canonical message literal (every field present). */
export function newChatMessage(role: string): ChatMessage {
  return { role, content: [], toolCalls: [], toolCallId: '', reasoning: [], isError: false };
}

/** The converted request made ready for the Router once admitted: filled in place. */
export function routerRequest(request: ChatRequest, context: RequestContext, routingStrategy: string): ChatRequest {
  request.context = context;
  request.routingStrategy = routingStrategy;
  return request;
}
