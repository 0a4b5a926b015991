import { echoed } from '../echoed-value.js';
import { edgeErrors } from '../errors.js';

/**
 * Spec §4.8 / §4.9: every tool call in a conversation has its result and every result answers an
 * earlier call, checked before admission in every dialect. Paths are the client's field paths.
 */
export class ToolPairing {
  private readonly issued = new Map<string, string>();
  private readonly answered = new Set<string>();

  /**
   * An assistant turn issued the call `id` (`path`: where the client put it). An id used twice is a 400
   * `duplicate_tool_call_id`: a result could not say which call it answers (Anthropic refuses it too).
   */
  call(id: string, path: string): void {
    const earlier = this.issued.get(id);
    if (earlier !== undefined) {
      throw edgeErrors.invalidRequest(`${path}: tool call id \`${echoed(id)}\` is already used by ${earlier}; each tool call needs its own id.`, path, 'duplicate_tool_call_id');
    }
    this.issued.set(id, path);
  }

  /** A result for `id`: a 400 `tool_output_unmatched` unless an earlier call issued it. */
  result(id: string, path: string): void {
    if (!this.issued.has(id)) {
      throw edgeErrors.invalidRequest(`${path}: no earlier tool call has id \`${echoed(id)}\`.`, path, 'tool_output_unmatched');
    }
    this.answered.add(id);
  }

  /** After the whole conversation: a call without its result is a 400 `tool_output_unmatched`. */
  requireAllAnswered(): void {
    for (const [id, path] of this.issued) {
      if (!this.answered.has(id)) {
        throw edgeErrors.invalidRequest(`${path}: tool call \`${echoed(id)}\` has no tool result.`, path, 'tool_output_unmatched');
      }
    }
  }
}
