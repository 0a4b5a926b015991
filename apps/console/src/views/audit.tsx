import { useState } from 'preact/hooks';
import { adminApi, api, AUDIT_CHAINS, type AuditChain, type AuditEntry } from '../api.js';
import { checkLinks } from '../audit-links.js';
import { mayDo } from '../session.js';
import { Pager, useKeysetPages } from './pager.js';
import { TableWrap } from './table-wrap.js';
import { useLoad } from './use-load.js';

const ENTRIES_PER_PAGE = 25;
const ADMIN_ENTRIES_PER_PAGE = 50;

/** An audit entry's moment, to the second, in UTC. */
const when = (entry: AuditEntry) => `${entry.occurred_at.slice(0, 19).replace('T', ' ')} UTC`;

/** A record's settings before or after a change, collapsed until asked for. */
function Settings({ label, value }: { label: string; value: unknown }) {
  if (value === null || value === undefined || value === '') return <span class="hint">—</span>;
  return (
    <details>
      <summary>{label}</summary>
      <pre class="json">{typeof value === 'string' ? value : JSON.stringify(value, null, 2)}</pre>
    </details>
  );
}

function AuditRows({ entries }: { entries: AuditEntry[] }) {
  return (
    <>
      {entries.map((entry) => (
        <tr key={entry.id}>
          <td>{when(entry)}</td>
          <td>{entry.actor.type}{entry.actor.id && <><br /><code class="hint">{entry.actor.id}</code></>}</td>
          <td>{entry.action}</td>
          <td>{entry.target.type}<br /><code class="hint">{entry.target.id}</code></td>
          <td><Settings label="Before" value={entry.before} /></td>
          <td><Settings label="After" value={entry.after} /></td>
          <td><code>{entry.id}</code></td>
        </tr>
      ))}
    </>
  );
}

const HEADERS = (
  <tr><th scope="col">Time</th><th scope="col">Actor</th><th scope="col">Action</th><th scope="col">Target</th>
    <th scope="col">Before</th><th scope="col">After</th><th scope="col">Entry</th></tr>
);

/** The account's audit log (GET /v1/account/audit): its entries from every chain, newest first, paged. */
export function AuditView() {
  const allowed = mayDo('audit.read');
  const pages = useKeysetPages();
  const [generation, setGeneration] = useState(0);
  const { data: page, error } = useLoad(
    () => (allowed ? api.audit(ENTRIES_PER_PAGE, pages.cursor) : Promise.resolve(undefined)),
    [pages.cursor, pages.pageNumber, generation, allowed]);
  const entries = page?.data ?? [];

  return (
    <>
      <div class="row">
        <h1>Audit log</h1>
        <button type="button" class="secondary" onClick={() => setGeneration((count) => count + 1)}>Refresh</button>
      </div>
      {!allowed && <p role="status" class="card">Your role may not read the audit log; the account's owners and admins may.</p>}
      {error && <p role="alert" class="error">{error}</p>}
      {allowed && (
        <section aria-labelledby="audit-title" class="card">
          <h2 id="audit-title">Changes to this account</h2>
          <p class="hint">Every change to keys, credit limits, budgets and credits, newest first, as the services recorded it with the change.
            Each chain is tamper-evident; the operator's <code>gatewayctl audit verify</code> recomputes it.</p>
          <TableWrap label="Audit log table">
            <table aria-label="Audit log">
              <thead>{HEADERS}</thead>
              <tbody><AuditRows entries={entries} /></tbody>
            </table>
          </TableWrap>
          {page && entries.length === 0 && <p>{pages.pageNumber === 1 ? 'No changes recorded yet.' : 'No older changes.'}</p>}
          <Pager label="Audit log pages" previousText="Newer" nextText="Older" {...pages.pager(page?.next_cursor)} />
        </section>
      )}
    </>
  );
}

/**
 * The operator's audit view (GET /v1/admin/audit): one chain as stored, oldest first, with its head, and
 * what the page can check of the chain's links (not the hashes themselves: `gatewayctl audit verify`).
 */
export function AdminAudit({ generation }: { generation: number }) {
  const [chain, setChain] = useState<AuditChain>('auth');
  const [accountId, setAccountId] = useState('');
  const [filter, setFilter] = useState('');
  // The after_seq of every page from the first to the one shown, and the last entry of the page before.
  const [starts, setStarts] = useState<{ afterSeq: number | undefined; before: AuditEntry | undefined }[]>([{ afterSeq: undefined, before: undefined }]);
  const start = starts[starts.length - 1]!;
  const { data: page, error } = useLoad(() => adminApi.audit(chain, ADMIN_ENTRIES_PER_PAGE, start.afterSeq, filter || undefined),
    [chain, filter, start, generation]);
  const restart = () => setStarts([{ afterSeq: undefined, before: undefined }]);
  const entries = page?.chain === chain ? page.data : [];
  // Filtered by account, the page is not a run of the chain: its links cannot be followed.
  const links = page && page.chain === chain && filter === '' ? checkLinks(entries, page.head, start.before) : undefined;

  return (
    <section aria-labelledby="admin-audit-title" class="card">
      <h2 id="admin-audit-title">Audit log</h2>
      <form class="controls" onSubmit={(event) => { event.preventDefault(); setFilter(accountId.trim()); restart(); }}>
        <span class="pair">
          <label class="inline" for="audit-chain">Chain</label>
          <select id="audit-chain" value={chain} onChange={(event) => { setChain((event.target as HTMLSelectElement).value as AuditChain); restart(); }}>
            {AUDIT_CHAINS.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
          </select>
        </span>
        <span class="pair">
          <label class="inline" for="audit-account">Account id</label>
          <input id="audit-account" value={accountId} placeholder="every account" autocomplete="off" spellcheck={false}
            onInput={(event) => setAccountId((event.target as HTMLInputElement).value)} />
        </span>
        <button type="submit" class="secondary">Show</button>
      </form>
      {error && <p role="alert" class="error">{error}</p>}
      {page && page.chain === chain && (
        <p data-testid="audit-chain-status" class={links && !links.ok ? 'error' : undefined}>
          Head: seq {page.head.seq}, <code class="hash">{page.head.hash.slice(0, 16)}…</code>.{' '}
          {links === undefined ? 'Links are not checked on a page filtered by account.'
            : links.ok ? `Links on this page hold (${links.checked} entries: seqs follow, each names the hash before it${entries.at(-1)?.seq === page.head.seq ? ', the newest is the head' : ''}).`
            : `Links broken: ${links.problem}.`}
          {' '}<span class="hint">Hashes are recomputed by <code>gatewayctl audit verify</code>, not here.</span>
        </p>
      )}
      <TableWrap label="Operator audit log table">
        <table aria-label="Operator audit log">
          <thead>{HEADERS}</thead>
          <tbody><AuditRows entries={entries} /></tbody>
        </table>
      </TableWrap>
      {page && entries.length === 0 && <p>No entries.</p>}
      <Pager label="Operator audit pages" previousText="Previous" nextText="Next"
        pageNumber={starts.length} hasPrevious={starts.length > 1} hasNext={page?.next_after_seq != null}
        onPrevious={() => setStarts((stack) => stack.slice(0, -1))}
        onNext={() => { if (page?.next_after_seq != null) { const afterSeq = page.next_after_seq; const before = entries.at(-1); setStarts((stack) => [...stack, { afterSeq, before }]); } }} />
    </section>
  );
}
