import type { Migration } from 'kysely';
import { init } from './migrations/0001-init.js';
import { chargeUniquenessOnCharges } from './migrations/0002-charge-uniqueness-on-charges.js';
import { admitBigintLimits } from './migrations/0003-admit-bigint-limits-fewer-writes.js';
import { closedReservationIndex } from './migrations/0004-closed-reservation-index.js';
import { leases } from './migrations/0005-leases.js';
import { chargesAreJournalEntries } from './migrations/0006-charges-are-journal-entries.js';
import { leaseDraining } from './migrations/0007-lease-draining.js';
import { settleBatchFunction } from './migrations/0008-settle-batch-function.js';
import { keySpendWindows } from './migrations/0009-key-spend-windows.js';
import { generations } from './migrations/0010-generations.js';
import { generationProviderTotal } from './migrations/0011-generation-provider-total.js';
import { voidCharges } from './migrations/0012-void-charges.js';
import { budgets } from './migrations/0021-budgets.js';
import { webhooks } from './migrations/0022-webhooks.js';
import { lowBalance } from './migrations/0023-low-balance.js';
import { webhookSecretRotation } from './migrations/0024-webhook-secret-rotation.js';
import { oneSettlementTrigger } from './migrations/0025-one-settlement-trigger.js';
import { auditLogMigration } from '@gateway/platform/db';

export { LEDGER_SCHEMA, usageColumns, type LedgerTables } from './schema.js';

/**
 * The ledger's migrations in the order they apply. Each is applied once by its name (kysely's
 * migration table), so a name, its place in this list and the SQL it runs never change once
 * released: a change to the schema is a new migration at the end (one file in migrations/).
 */
export const ledgerMigrations: Record<string, Migration> = {
  '0001_init': init,
  '0002_charge_uniqueness_on_charges': chargeUniquenessOnCharges,
  '0003_admit_bigint_limits_fewer_writes': admitBigintLimits,
  '0004_closed_reservation_index': closedReservationIndex,
  '0005_leases': leases,
  '0006_charges_are_journal_entries': chargesAreJournalEntries,
  '0007_lease_draining': leaseDraining,
  '0008_settle_batch_function': settleBatchFunction,
  '0009_key_spend_windows': keySpendWindows,
  '0010_generations': generations,
  '0011_generation_provider_total': generationProviderTotal,
  '0012_void_charges': voidCharges,
  // The audit log's chain (docs/governance.md); this branch numbers its migrations 0020-0029.
  '0020_audit_log': auditLogMigration('ledger'),
  '0021_budgets': budgets,
  '0022_webhooks': webhooks,
  '0023_low_balance': lowBalance,
  '0024_webhook_secret_rotation': webhookSecretRotation,
  '0025_one_settlement_trigger': oneSettlementTrigger,
};
