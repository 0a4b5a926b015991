import { createHash } from 'node:crypto';

/** What Gemini accepts as a function name (FunctionDeclaration.name). */
const VALID_NAME = /^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$/;
const MAX_NAME_LENGTH = 64;
const HASH_LENGTH = 8;

/**
 * Tool names of one request as Gemini must see them, and back. A name Gemini refuses (starting with a
 * digit or a dash, characters outside `a-zA-Z0-9_.:-`, over 64 characters; OpenAI and MCP clients send
 * such names) is rewritten: invalid characters become `_`, a leading `_` is added where needed, the name
 * is cut to fit and a short hash of the original keeps two originals apart. The rewrite is a pure
 * function of the name, so definitions, history calls and tool choice agree; answers map back through
 * the per-request map, made only when something was rewritten.
 */
export class GeminiToolNames {
  private toCaller: Map<string, string> | undefined;

  upstream(name: string): string {
    if (VALID_NAME.test(name)) return name;
    const hash = createHash('sha256').update(name).digest('hex').slice(0, HASH_LENGTH);
    const kept = `_${name.replace(/[^a-zA-Z0-9_.:-]/g, '_')}`.slice(0, MAX_NAME_LENGTH - HASH_LENGTH - 1);
    const rewritten = `${kept}_${hash}`;
    (this.toCaller ??= new Map()).set(rewritten, name);
    return rewritten;
  }

  caller(upstreamName: string): string {
    return this.toCaller?.get(upstreamName) ?? upstreamName;
  }
}
