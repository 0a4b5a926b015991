export const LEDGER_SCHEMA = 'ledger';

/** Table shapes as kysely sees them (int8 columns arrive as bigint, see createDatabase). */
export interface LedgerTables {
  balances: { account_id: string; balance_pico: bigint; reserved_pico: bigint; updated_at: Date; low_balance_threshold_pico: bigint | null };
  key_totals: { key_id: string; account_id: string; spent_pico: bigint; reserved_pico: bigint };
  journal: {
    id: bigint; account_id: string; kind: 'topup' | 'charge' | 'adjustment' | 'refund'; amount_pico: bigint;
    request_id: string | null; idempotency_key: string | null; note: string; created_at: Date;
  };
  reservations: {
    request_id: string; account_id: string; key_id: string; amount_pico: bigint; created_at: Date;
    expires_at: Date; closed_at: Date | null; close_reason: 'settled' | 'failed' | 'released' | 'expired' | null;
  };
  charges: {
    request_id: string; account_id: string; key_id: string; model_id: string; provider_id: string; endpoint: string;
    input_tokens: bigint; cached_input_tokens: bigint; output_tokens: bigint; reasoning_tokens: bigint;
    input_audio_tokens: bigint; output_audio_tokens: bigint; input_audio_ms: bigint; output_audio_ms: bigint;
    output_text_tokens: bigint; input_text_characters: bigint; output_text_characters: bigint;
    output_image_tokens: bigint; input_image_tokens: bigint; input_text_tokens: bigint; estimated: boolean;
    cost_pico: bigint; streamed: boolean; occurred_at: Date; created_at: Date;
    /** A request voided before its charge settled (migration 0012): cost 0, and no charge is applied after it. */
    voided: boolean;
  };
  generations: {
    request_id: string; finish_reason: string; latency_ms: number; generation_time_ms: number;
    cancelled: boolean; insured_reason: string; cache_write_tokens: bigint; native_input_tokens: bigint | null;
    native_output_tokens: bigint | null; native_reasoning_tokens: bigint | null; native_cached_input_tokens: bigint | null;
    native_cache_write_tokens: bigint | null; native_total_tokens: bigint | null; cost_input_pico: bigint; cost_output_pico: bigint; cost_cache_read_pico: bigint;
    cost_cache_write_pico: bigint; cost_reasoning_pico: bigint; created_at: Date;
  };
  rate_windows: { account_id: string; limit_group: string; window_kind: 'minute' | 'day'; window_start: Date; request_count: number };
  leases: {
    lease_id: string; account_id: string; key_id: string; holder: string; limit_group: string; granted_requests: number;
    minute_window: Date | null; day_window: Date | null; granted_pico: bigint; settled_pico: bigint;
    created_at: Date; expires_at: Date; closed_at: Date | null; close_reason: 'returned' | 'expired' | null;
    returned_at: Date | null;
  };
  rejected_events: { id: bigint; msg_id: string; request_id: string; reason: string; payload: Buffer; created_at: Date };
}

/** Usage counters stored on a charge, in proto field order; the settlement and activity code iterate this list. */
export const usageColumns = [
  'input_tokens', 'cached_input_tokens', 'output_tokens', 'reasoning_tokens', 'input_audio_tokens',
  'output_audio_tokens', 'input_audio_ms', 'output_audio_ms', 'output_text_tokens', 'input_text_characters',
  'output_text_characters', 'output_image_tokens', 'input_image_tokens', 'input_text_tokens',
] as const;
