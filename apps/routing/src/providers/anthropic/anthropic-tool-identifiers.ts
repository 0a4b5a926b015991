import { createHash } from 'node:crypto';

/** What Anthropic accepts as a tool_use id (and tool_result tool_use_id). */
const VALID_ID = /^[a-zA-Z0-9_-]+$/;
/** What Anthropic accepts as a tool name. */
const VALID_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const MAX_NAME_LENGTH = 64;
/** Hex digits of the hash that keeps rewritten identifiers apart (and equal for equal originals). */
const HASH_LENGTH = 8;

function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, HASH_LENGTH);
}

/**
 * Tool ids and names of one request, as Anthropic must see them and as the caller must get them back.
 * Ids from other providers (`call.1:abc`, MCP-style names `server.tool`, names over 64 characters) are
 * rewritten to the allowed charset: invalid characters become `_`, a name is cut to fit, and a short
 * hash of the original is appended so two originals never meet in one rewrite. The rewrite is a pure
 * function of the original, so a tool_use and its tool_result always agree; the per-request map turns
 * what Anthropic answers back into the caller's originals. Valid identifiers pass untouched, and the
 * maps are only made when something was rewritten.
 */
export class ToolIdentifiers {
  private namesToCaller: Map<string, string> | undefined;
  private idsToCaller: Map<string, string> | undefined;

  upstreamName(name: string): string {
    if (VALID_NAME.test(name)) return name;
    const kept = name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, MAX_NAME_LENGTH - HASH_LENGTH - 1);
    const rewritten = `${kept}_${shortHash(name)}`;
    (this.namesToCaller ??= new Map()).set(rewritten, name);
    return rewritten;
  }

  upstreamId(id: string): string {
    if (VALID_ID.test(id)) return id;
    const rewritten = `${id.replace(/[^a-zA-Z0-9_-]/g, '_')}_${shortHash(id)}`;
    (this.idsToCaller ??= new Map()).set(rewritten, id);
    return rewritten;
  }

  callerName(upstreamName: string): string {
    return this.namesToCaller?.get(upstreamName) ?? upstreamName;
  }

  callerId(upstreamId: string): string {
    return this.idsToCaller?.get(upstreamId) ?? upstreamId;
  }
}
