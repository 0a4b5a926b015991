import type { RecordedRequest } from '@gateway/testing';
import type { ClientStack } from './client-stack.js';

/*
 * A fake upstream's side of one tool round trip, decided by the request (so it holds whatever other
 * requests a client makes): a request that carries a result for a call the fake made gets the final
 * text; one that offers the tool gets a call of it; anything else gets plain text. Every answer reports
 * usage through `fixture.reported`, so the charge can be checked exactly.
 */

export interface ToolLoop {
  /** Ids of the calls the fake made, in order. */
  calls: string[];
  /** The results the client sent back for them, as the upstream received them (text). */
  results: string[];
}

/** The call the fake makes: which tool, with which arguments. */
export interface ToolCall {
  name: string;
  input: Record<string, unknown>;
}

export interface ToolLoopScript {
  /** The call to make given the names of the tools a request offers; undefined: no call (plain text). */
  call: (offered: readonly string[]) => ToolCall | undefined;
  finalText: string;
}

/** A script's `call` for one named tool, made when the request offers it. */
export function callTool(name: string, input: Record<string, unknown>): ToolLoopScript['call'] {
  return (offered) => (offered.includes(name) ? { name, input } : undefined);
}

export type UpstreamKind = 'openai' | 'anthropic';

/** Scripts the fake of `kind` for one round trip. */
export function toolLoop(fixture: ClientStack, kind: UpstreamKind, script: ToolLoopScript): ToolLoop {
  return kind === 'openai' ? openAIToolLoop(fixture, script) : anthropicToolLoop(fixture, script);
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((part: any) => (typeof part === 'string' ? part : (part?.text ?? JSON.stringify(part)))).join('');
  return JSON.stringify(content ?? '');
}

/** Scripts the OpenAI-compatible fake (chat completions) for one round trip. */
export function openAIToolLoop(fixture: ClientStack, script: ToolLoopScript): ToolLoop {
  const loop: ToolLoop = { calls: [], results: [] };
  fixture.openai.setFallback((request: RecordedRequest) => {
    const usage = fixture.reported(request);
    const messages: any[] = request.body?.messages ?? [];
    const answered = messages.filter((message) => message.role === 'tool' && loop.calls.includes(message.tool_call_id));
    if (answered.length > 0) {
      loop.results.push(...answered.map((message) => textOf(message.content)));
      return { text: script.finalText, usage };
    }
    const call = script.call((request.body?.tools ?? []).map((tool: any) => String(tool.function?.name)));
    if (!call) return { text: 'no tool offered', usage };
    const id = `call_fake${loop.calls.length + 1}`;
    loop.calls.push(id);
    return { toolCalls: [{ id, name: call.name, arguments: JSON.stringify(call.input) }], usage };
  });
  return loop;
}

/** Scripts the Anthropic-wire fake (Messages API) for one round trip. */
export function anthropicToolLoop(fixture: ClientStack, script: ToolLoopScript): ToolLoop {
  const loop: ToolLoop = { calls: [], results: [] };
  fixture.anthropic.setFallback((request: RecordedRequest) => {
    const usage = fixture.reported(request);
    const last = (request.body?.messages ?? []).at(-1);
    const blocks: any[] = last?.role === 'user' && Array.isArray(last.content) ? last.content : [];
    const answered = blocks.filter((block) => block.type === 'tool_result' && loop.calls.includes(block.tool_use_id));
    if (answered.length > 0) {
      loop.results.push(...answered.map((block) => textOf(block.content)));
      return { text: script.finalText, usage, thinking: false };
    }
    const call = script.call((request.body?.tools ?? []).map((tool: any) => String(tool.name)));
    if (!call) return { text: 'no tool offered', usage, thinking: false };
    const id = `toolu_fake${loop.calls.length + 1}`;
    loop.calls.push(id);
    return { toolCalls: [{ id, name: call.name, input: call.input }], usage, thinking: false };
  });
  return loop;
}
