/**
 * Anthropic `stop_reason` onto the canonical finish reasons (stop | length | tool_calls | content_filter).
 * `tool_use` must stay tool_calls: an agent loop only runs its tools on that (field-failures: bifrost#3638).
 */
export function mapAnthropicFinishReason(reason: string | null | undefined): string {
  switch (reason) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'refusal':
      return 'content_filter';
    default:
      // end_turn, stop_sequence, pause_turn (a server-tool turn paused; what was said is complete) and
      // reasons a later API version adds: the answer ended normally.
      return 'stop';
  }
}
