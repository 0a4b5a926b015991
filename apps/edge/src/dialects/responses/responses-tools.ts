import { createHash } from 'node:crypto';
import type { Tool } from '@gateway/proto';
import { cacheControlOf, type CacheControlInput } from '../../canonical/cache-control.js';
import { edgeErrors } from '../../errors.js';
import type { ResponsesRequest, ResponsesTool } from './responses-schema.js';

/*
 * The responses dialect's tool kinds over the canonical request's plain function tools (DESIGN §6: the
 * canonical request, routing and every provider know only functions):
 *
 * - `function`: as it is.
 * - `namespace` (a group of function / custom tools, as Codex sends its sub-agent and MCP tools): each
 *   member becomes one function named `<namespace>__<name>` (the flat name Codex itself uses where a
 *   boundary cannot keep the split: trailing `_` of the namespace and leading `_` of the name trimmed).
 *   A flat name outside what every upstream accepts (`^[a-zA-Z0-9_-]{1,64}$`, Anthropic's rule) has its
 *   other characters replaced by `_` and, when longer than 64, is cut to 55 characters plus `_` and 8
 *   hex digits of its SHA-256. The answer's calls carry `name` and `namespace` again, as OpenAI returns
 *   them.
 * - `custom` (free-form input, optionally a grammar): a function with one string parameter `input`;
 *   its calls come back as `custom_tool_call` items whose `input` is that string.
 * - hosted tools (web search, file search, code interpreter, …): no provider behind the gateway runs
 *   them, so they are dropped before any provider and named in `x-gateway-dropped-tools`.
 *
 * Two tools that end up under one flat name are refused (400), so every call maps back to one tool.
 */

const PROVIDER_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const NAMESPACE_DELIMITER = '__';

/** What a flat (canonical) tool name stands for in the dialect. */
export interface DialectTool {
  kind: 'function' | 'custom';
  name: string;
  /** The namespace the tool belongs to; '' for a top-level tool. */
  namespace: string;
}

/** The flat name of a namespace member: always the same for the same pair, so history replays match. */
export function flatToolName(namespace: string, name: string): string {
  if (namespace === '') return name;
  const joined = `${namespace.replace(/_+$/, '')}${NAMESPACE_DELIMITER}${name.replace(/^_+/, '')}`;
  if (PROVIDER_NAME.test(joined)) return joined;
  const cleaned = joined.replace(/[^a-zA-Z0-9_-]/g, '_');
  if (cleaned.length <= 64) return cleaned;
  const digest = createHash('sha256').update(joined).digest('hex').slice(0, 8);
  return `${cleaned.slice(0, 55)}_${digest}`;
}

export interface ResponsesToolSet {
  /** The canonical function tools, in the order the client listed them (namespace members in place). */
  tools: Tool[];
  /** Flat name -> the dialect's tool. */
  byFlatName: Map<string, DialectTool>;
  /** Hosted tool types dropped before the provider, deduplicated and sorted. */
  dropped: string[];
}

const EMPTY_TOOL_SET: ResponsesToolSet = { tools: [], byFlatName: new Map(), dropped: [] };

/** The tool set of a request, computed once per body (the converter and the renderer both need it). */
const toolSets = new WeakMap<ResponsesRequest, ResponsesToolSet>();

export function toolSetOf(body: ResponsesRequest): ResponsesToolSet {
  if (!body.tools || body.tools.length === 0) return EMPTY_TOOL_SET;
  let set = toolSets.get(body);
  if (set === undefined) {
    set = buildToolSet(body.tools);
    toolSets.set(body, set);
  }
  return set;
}

const EMPTY_OBJECT_SCHEMA = JSON.stringify({ type: 'object', properties: {} });

function buildToolSet(tools: readonly ResponsesTool[]): ResponsesToolSet {
  const canonical: Tool[] = [];
  const byFlatName = new Map<string, DialectTool>();
  const firstPath = new Map<string, string>();
  const dropped = new Set<string>();

  const add = (tool: Tool, dialect: DialectTool, path: string) => {
    const earlier = firstPath.get(tool.name);
    if (earlier !== undefined) {
      throw edgeErrors.invalidRequest(
        `${path}: tool name '${tool.name}' (as providers see it) is also the name of ${earlier}; tool names must be unique.`,
        path,
        'duplicate_tool_name',
      );
    }
    firstPath.set(tool.name, path);
    byFlatName.set(tool.name, dialect);
    canonical.push(tool);
  };

  tools.forEach((tool, index) => {
    const path = `body.tools.${index}`;
    switch (tool.type) {
      case 'function':
        add(withCacheControl(functionTool(tool.name, tool.description, tool.parameters, tool.strict), tool.cache_control), { kind: 'function', name: tool.name, namespace: '' }, path);
        return;
      case 'custom':
        add(withCacheControl(customTool(tool.name, tool.description, tool.format), tool.cache_control), { kind: 'custom', name: tool.name, namespace: '' }, path);
        return;
      case 'namespace':
        tool.tools.forEach((member, memberIndex) => {
          const flat = flatToolName(tool.name, member.name);
          const description = joinDescriptions(tool.description, member.description);
          const memberPath = `${path}.tools.${memberIndex}`;
          if (member.type === 'function') {
            add({ ...functionTool(flat, description, member.parameters, member.strict) }, { kind: 'function', name: member.name, namespace: tool.name }, memberPath);
          } else {
            add(customTool(flat, description, member.format), { kind: 'custom', name: member.name, namespace: tool.name }, memberPath);
          }
        });
        return;
      default:
        dropped.add(tool.type);
    }
  });
  return { tools: canonical, byFlatName, dropped: [...dropped].sort() };
}

function joinDescriptions(namespaceDescription: string | null | undefined, toolDescription: string | null | undefined): string {
  const parts = [namespaceDescription, toolDescription].filter((part): part is string => part != null && part !== '');
  return parts.join('\n\n');
}

/** A tool's `cache_control` (OpenRouter's tool caching): the tool list up to it is a cacheable prefix. */
function withCacheControl(tool: Tool, mark: CacheControlInput | null | undefined): Tool {
  if (mark) tool.cacheControl = cacheControlOf(mark);
  return tool;
}

function functionTool(name: string, description: string | null | undefined, parameters: unknown, strict: boolean | null | undefined): Tool {
  return {
    name,
    description: description ?? '',
    parameters: parameters == null ? EMPTY_OBJECT_SCHEMA : JSON.stringify(parameters),
    ...(strict != null ? { strict } : {}),
  } as Tool;
}

type CustomFormat = Extract<ResponsesTool, { type: 'custom' }>['format'];

/** A free-form tool as a function of one string: the format (a grammar) is told to the model in the parameter's description. */
function customTool(name: string, description: string | null | undefined, format: CustomFormat): Tool {
  const inputDescription =
    format?.type === 'grammar'
      ? `The tool's input, as raw text matching this ${format.syntax} grammar:\n${format.definition}`
      : "The tool's free-form input, as raw text.";
  const parameters = {
    type: 'object',
    properties: { input: { type: 'string', description: inputDescription } },
    required: ['input'],
    additionalProperties: false,
  };
  return { name, description: description ?? '', parameters: JSON.stringify(parameters) } as Tool;
}

/** The `input` string of a custom tool's call from the function arguments a provider produced (raw text when they are not `{"input": "…"}`). */
export function customInputOf(argumentsJson: string): string {
  try {
    const parsed: unknown = JSON.parse(argumentsJson);
    if (typeof parsed === 'object' && parsed !== null && typeof (parsed as { input?: unknown }).input === 'string') {
      return (parsed as { input: string }).input;
    }
  } catch {
    // Not JSON: a provider that wrote the raw input; it is the input.
  }
  return argumentsJson;
}

/** A custom tool call's input as the arguments of its function. */
export function customArguments(input: string): string {
  return JSON.stringify({ input });
}

/** The dialect's tool behind a call's flat name; a name the client never offered is a plain function. */
export function dialectToolOf(set: ResponsesToolSet, flatName: string): DialectTool {
  return set.byFlatName.get(flatName) ?? { kind: 'function', name: flatName, namespace: '' };
}

/** The tools as the response object repeats them: the client's own tools, hosted tools that were dropped left out. */
export function echoedTools(body: ResponsesRequest): unknown[] {
  const echoed: unknown[] = [];
  for (const tool of body.tools ?? []) {
    if (tool.type === 'function') {
      echoed.push({ type: 'function', name: tool.name, description: tool.description ?? null, parameters: tool.parameters ?? null, strict: tool.strict ?? null });
    } else if (tool.type === 'custom' || tool.type === 'namespace') {
      echoed.push(tool);
    }
  }
  return echoed;
}
