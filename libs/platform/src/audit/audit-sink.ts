import type { AuditRecord } from './audit-chain.js';

/*
 * Where committed audit entries go besides the database: the OTLP log export (audit-log-export.ts) when
 * it is configured. One per process (npm start runs every service in one process; each entry names its
 * chain). Told after the change's transaction committed (auditedTransaction, libs/platform db); a sink
 * must not block or throw: it is called on the write path's way out.
 */

export type AuditEntrySink = (entry: AuditRecord & { hash: string }) => void;

let sink: AuditEntrySink | undefined;

/** Installs the process's sink (undefined removes it); returns the one it replaced. */
export function setAuditEntrySink(next: AuditEntrySink | undefined): AuditEntrySink | undefined {
  const previous = sink;
  sink = next;
  return previous;
}

/** Hands committed entries to the sink, if any; a failing sink never fails the change that already committed. */
export function auditEntriesCommitted(entries: readonly (AuditRecord & { hash: string })[]): void {
  const current = sink;
  if (current === undefined) return;
  for (const entry of entries) {
    try {
      current(entry);
    } catch {
      // The export is best effort by design (docs/governance.md); the entry is in the database.
    }
  }
}
