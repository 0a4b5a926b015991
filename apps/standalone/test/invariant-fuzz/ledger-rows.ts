import type { FuzzStack } from './fuzz-stack.js';

// The ledger's own rows for the invariant fuzzer's checks (invariant-fuzz.ts checkSequence): balances,
// key totals, standing charges with their generation records, the journal, open reservations and voided
// attempts of a sequence's accounts, read once the ledger stopped moving.

export interface Charge {
  requestId: string;
  accountId: string;
  keyId: string;
  modelId: string;
  providerId: string;
  costPico: bigint;
  generationCostPico: bigint | undefined;
  input: bigint;
  cached: bigint;
  output: bigint;
  reasoning: bigint;
  insured: string;
  estimated: boolean;
}

export async function ledgerOf(fuzz: FuzzStack, accountIds: string[]) {
  const [balances, keys, charges, journal, open, voided] = await Promise.all([
    fuzz.db.query<{ account_id: string; balance_pico: string; reserved_pico: string }>('select account_id, balance_pico, reserved_pico from ledger.balances where account_id = any($1)', [accountIds]),
    fuzz.db.query<{ key_id: string; spent_pico: string }>('select key_id, spent_pico from ledger.key_totals where account_id = any($1)', [accountIds]),
    fuzz.db.query<Record<string, string | null>>(
      `select c.request_id, c.account_id, c.key_id, c.model_id, c.provider_id, c.cost_pico, c.input_tokens, c.cached_input_tokens, c.output_tokens, c.reasoning_tokens, c.estimated,
              g.cost_input_pico + g.cost_output_pico + g.cost_cache_read_pico + g.cost_cache_write_pico + g.cost_reasoning_pico as generation_cost, g.insured_reason
         from ledger.charges c left join ledger.generations g on g.request_id = c.request_id where c.account_id = any($1) and not c.voided`, [accountIds]),
    // The journal (journal_entries: top-ups, adjustments and every charge) sums to the balance.
    fuzz.db.query<{ account_id: string; total: string }>('select account_id, sum(amount_pico)::text as total from ledger.journal_entries where account_id = any($1) group by account_id', [accountIds]),
    fuzz.db.query<{ request_id: string; amount_pico: string; age: string }>(
      `select request_id, amount_pico::text, extract(epoch from now() - created_at)::int::text as age from ledger.reservations where closed_at is null and account_id = any($1)`, [accountIds]),
    // A batch line's earlier attempts are voided before it runs again (docs/jobs.md, "Charged once"):
    // no charge stands for them (one settled before is refunded in the journal).
    fuzz.db.query<{ request_id: string }>('select request_id from ledger.charges where voided and account_id = any($1)', [accountIds]),
  ]);
  return {
    balances: new Map(balances.rows.map((row) => [row.account_id, { balance: BigInt(row.balance_pico), reserved: BigInt(row.reserved_pico) }])),
    keys: new Map(keys.rows.map((row) => [row.key_id, BigInt(row.spent_pico)])),
    charges: charges.rows.map((row): Charge => ({
      requestId: row.request_id!, accountId: row.account_id!, keyId: row.key_id!, modelId: row.model_id!, providerId: row.provider_id!,
      costPico: BigInt(row.cost_pico!), generationCostPico: row.generation_cost === null ? undefined : BigInt(row.generation_cost!),
      input: BigInt(row.input_tokens!), cached: BigInt(row.cached_input_tokens!), output: BigInt(row.output_tokens!), reasoning: BigInt(row.reasoning_tokens!),
      insured: row.insured_reason ?? '',
      estimated: row.estimated as unknown as boolean,
    })),
    journal: new Map(journal.rows.map((row) => [row.account_id, BigInt(row.total)])),
    openReservations: open.rows.length,
    voided: new Set(voided.rows.map((row) => row.request_id)),
    open: open.rows,
  };
}

export type Ledger = Awaited<ReturnType<typeof ledgerOf>>;

/** Polls until no reservation of these accounts is open and two reads 400 ms apart agree (usage settled). */
export async function settledLedger(fuzz: FuzzStack, accountIds: string[]): Promise<Ledger> {
  const deadline = Date.now() + 15_000;
  let previous = '';
  for (;;) {
    const ledger = await ledgerOf(fuzz, accountIds);
    const fingerprint = `${ledger.openReservations}|${ledger.charges.length}|${[...ledger.balances.values()].map((b) => `${b.balance}/${b.reserved}`).join(',')}|${ledger.charges.filter((c) => c.generationCostPico === undefined).length}`;
    if (ledger.openReservations === 0 && fingerprint === previous) return ledger;
    if (Date.now() > deadline) return ledger;
    previous = fingerprint;
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}
