import { mapAnthropicFinishReason } from '../anthropic/map-anthropic-finish-reason.js';

/**
 * Bedrock `stopReason` (enums.ts StopReason) onto the canonical finish reasons: Anthropic's map
 * (Converse's tool_use, max_tokens, model_context_window_exceeded, end_turn and stop_sequence are
 * Anthropic's words), plus Bedrock's two safety blocks. `guardrail_intervened` and `content_filtered`:
 * the adapters turn them into a `content_filter` ProviderError when nothing was said yet
 * (isBedrockSafetyStop), and into this finish reason otherwise.
 */
export function mapBedrockFinishReason(reason: string | null | undefined): string {
  return isBedrockSafetyStop(reason) ? 'content_filter' : mapAnthropicFinishReason(reason);
}

export function isBedrockSafetyStop(reason: string | null | undefined): boolean {
  return reason === 'guardrail_intervened' || reason === 'content_filtered';
}
