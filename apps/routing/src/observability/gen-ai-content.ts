import type { OtelAttributes } from '@gateway/platform';
import type { ChatChoice, ChatMessage, ChatRequest, ContentPart, Tool, ToolCall } from '@gateway/proto';
import { CAPTURE_MESSAGE_CONTENT_ENV, GEN_AI } from './gen-ai-conventions.js';

/*
 * Message content on an attempt span, in the GenAI conventions' message schema (gen-ai-input-messages.json,
 * gen-ai-output-messages.json, gen-ai-system-instructions.json): a message is a role and a list of parts,
 * a text part `{type: "text", content}`, a tool call `{type: "tool_call", id, name, arguments}`, a tool's
 * result `{type: "tool_call_response", id, response}`, reasoning `{type: "reasoning", content}`; an output
 * message adds its finish_reason. Images, files and audio are named by a part of their type only (never
 * their bytes or URL). Recorded only when the operator opted in (CAPTURE_MESSAGE_CONTENT_ENV) and tracing is
 * on; each attribute is cut to MAX_CONTENT_ATTRIBUTE_LENGTH characters.
 */

/** Each content attribute's bound, in UTF-16 code units (64 Ki): a longer JSON value is cut there (then no longer parseable JSON). */
export const MAX_CONTENT_ATTRIBUTE_LENGTH = 64 * 1024;

/** The operator's opt-in as the OpenTelemetry GenAI instrumentations read it: `true` (any case) turns it on. */
export function captureMessageContentFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return env[CAPTURE_MESSAGE_CONTENT_ENV]?.trim().toLowerCase() === 'true';
}

type Part = Record<string, unknown> & { type: string };
interface Message { role: string; parts: Part[] }

/** A tool call's arguments as the object they encode when they are JSON, else as sent. */
function argumentsOf(text: string): unknown {
  if (text === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function toolCallPart(call: Pick<ToolCall, 'id' | 'name' | 'arguments'>): Part {
  return { type: 'tool_call', id: call.id, name: call.name, arguments: argumentsOf(call.arguments) };
}

function contentPart(part: ContentPart): Part | undefined {
  switch (part.part?.$case) {
    case 'text': return { type: 'text', content: part.part.value };
    case 'image': return { type: 'image' };
    case 'file': return { type: 'file' };
    case 'audio': return { type: 'audio' };
    default: return undefined;
  }
}

function textOf(parts: readonly ContentPart[]): string {
  return parts.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).join('');
}

function inputMessage(message: ChatMessage): Message {
  if (message.role === 'tool') {
    return { role: 'tool', parts: [{ type: 'tool_call_response', id: message.toolCallId, response: textOf(message.content) }] };
  }
  const parts: Part[] = [];
  for (const reasoning of message.reasoning) if (reasoning.text !== '') parts.push({ type: 'reasoning', content: reasoning.text });
  for (const part of message.content) {
    const converted = contentPart(part);
    if (converted !== undefined) parts.push(converted);
  }
  for (const call of message.toolCalls) parts.push(toolCallPart(call));
  return { role: message.role, parts };
}

/** The conventions' finish reason of a gateway one (`tool_calls` is `tool_call` there; the others as they are). */
function finishReasonOf(reason: string): string {
  return reason === 'tool_calls' ? 'tool_call' : reason;
}

function bounded(value: unknown): string {
  const json = JSON.stringify(value);
  return json.length <= MAX_CONTENT_ATTRIBUTE_LENGTH ? json : json.slice(0, MAX_CONTENT_ATTRIBUTE_LENGTH);
}

/**
 * The request's content attributes: its system and developer messages as gen_ai.system_instructions (the
 * parts of all of them, in order), the other messages as gen_ai.input.messages, its tools as
 * gen_ai.tool.definitions.
 */
export function inputContentAttributes(request: ChatRequest, attributes: OtelAttributes): void {
  const instructions: Part[] = [];
  const messages: Message[] = [];
  for (const message of request.messages) {
    if (message.role === 'system' || message.role === 'developer') {
      for (const part of message.content) {
        const converted = contentPart(part);
        if (converted !== undefined) instructions.push(converted);
      }
    } else {
      messages.push(inputMessage(message));
    }
  }
  if (instructions.length > 0) attributes[GEN_AI.systemInstructions] = bounded(instructions);
  attributes[GEN_AI.inputMessages] = bounded(messages);
  if (request.tools.length > 0) attributes[GEN_AI.toolDefinitions] = bounded(request.tools.map(toolDefinition));
}

function toolDefinition(tool: Tool): Record<string, unknown> {
  return { type: 'function', name: tool.name, description: tool.description, parameters: argumentsOf(tool.parameters) };
}

/** What one choice of an answer said, whichever way it came (a unary answer, or a stream's deltas gathered). */
export interface AnswerChoice {
  content: string;
  reasoning: string;
  toolCalls: readonly Pick<ToolCall, 'id' | 'name' | 'arguments'>[];
  finishReason: string;
}

/** gen_ai.output.messages of an answer: one assistant message per choice. */
export function outputMessagesAttribute(choices: readonly AnswerChoice[]): string {
  return bounded(choices.map((choice) => {
    const parts: Part[] = [];
    if (choice.reasoning !== '') parts.push({ type: 'reasoning', content: choice.reasoning });
    if (choice.content !== '') parts.push({ type: 'text', content: choice.content });
    for (const call of choice.toolCalls) parts.push(toolCallPart(call));
    return { role: 'assistant', parts, finish_reason: finishReasonOf(choice.finishReason) };
  }));
}

/** A unary answer's choices as AnswerChoice. */
export function answerChoices(choices: readonly ChatChoice[]): AnswerChoice[] {
  return choices.map((choice) => ({
    content: choice.message?.content ?? '',
    reasoning: (choice.message?.reasoning ?? []).map((part) => part.text).join(''),
    toolCalls: choice.message?.toolCalls ?? [],
    finishReason: choice.finishReason,
  }));
}
