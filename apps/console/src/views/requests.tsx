import { useEffect, useState } from 'preact/hooks';
import { api, errorText, type Generation, type KeyRecord, type Page } from '../api.js';
import { Pager, useKeysetPages } from './pager.js';
import { TableWrap } from './table-wrap.js';

const DEFAULT_PAGE_SIZE = 20;

/** Unix seconds as a UTC date and time ("2026-11-26 14:05:09 UTC"). */
export function utcTime(seconds: number): string {
  return `${new Date(seconds * 1000).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** What became of a request: the provider's finish reason, or that it was cancelled. */
function status(entry: Generation): string {
  if (entry.finish_reason) return entry.finish_reason;
  return entry.cancelled ? 'cancelled' : '—';
}

function GenerationRows({ entries }: { entries: Generation[] }) {
  return (
    <>
      {entries.map((entry) => (
        <tr key={entry.id}>
          <td><code>{entry.id}</code></td>
          <td>{utcTime(entry.created_at)}</td><td>{entry.model}</td><td>{entry.provider_name}</td>
          <td class="num">{entry.tokens_prompt} / {entry.tokens_completion}</td><td class="num">{entry.total_cost}</td>
          <td class="num">{entry.latency} ms</td><td>{status(entry)}</td>
        </tr>
      ))}
    </>
  );
}

const HEADERS = (
  <>
    <th scope="col">Request</th><th scope="col">Time</th><th scope="col">Model</th><th scope="col">Provider</th><th scope="col" class="num">Tokens in / out</th>
    <th scope="col" class="num">Cost (credits)</th><th scope="col" class="num">Latency</th><th scope="col">Status</th>
  </>
);

export function RequestsView() {
  const [keys, setKeys] = useState<KeyRecord[]>([]);
  const [keyId, setKeyId] = useState('');
  const [pageSize, setPageSize] = useState(DEFAULT_PAGE_SIZE);
  // Keyset paging from the newest page.
  const pages = useKeysetPages();
  const [page, setPage] = useState<Page<Generation>>();
  const [error, setError] = useState<string>();
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    api.keys().then((answer) => setKeys(answer.data)).catch(() => undefined);
  }, []);

  const { cursor, pageNumber } = pages;
  useEffect(() => {
    let live = true;
    setError(undefined);
    api.generations(pageSize, cursor, keyId || undefined)
      .then((answer) => live && setPage(answer))
      .catch((failure) => live && setError(errorText(failure)));
    return () => { live = false; };
  }, [cursor, pageNumber, pageSize, keyId, generation]);

  // Unlike useLoad, a new query drops the page shown at once rather than keeping it until the answer.
  const restart = () => { pages.restart(); setPage(undefined); };
  const entries = page?.data ?? [];

  return (
    <>
      <div class="row">
        <h1>Requests</h1>
        <button type="button" class="secondary" onClick={() => setGeneration((count) => count + 1)}>Refresh</button>
      </div>
      {error && <p role="alert" class="error">{error}</p>}
      <section aria-labelledby="recent-title" class="card">
        <div class="row">
          <h2 id="recent-title">Recent requests</h2>
          <div class="controls">
            <span class="pair">
              <label class="inline" for="requests-key">Key</label>
              <select id="requests-key" value={keyId} onChange={(event) => { setKeyId((event.target as HTMLSelectElement).value); restart(); }}>
                <option value="">all keys</option>
                {keys.map((record) => <option key={record.id} value={record.id}>{record.name}</option>)}
              </select>
            </span>
            <span class="pair">
              <label class="inline" for="requests-limit">Per page</label>
              <input id="requests-limit" type="number" min={1} max={100} value={pageSize}
                onChange={(event) => {
                  const value = Number((event.target as HTMLInputElement).value);
                  if (Number.isInteger(value) && value >= 1 && value <= 100) { setPageSize(value); restart(); }
                }} />
            </span>
          </div>
        </div>
        <p class="hint">Newest first, one row per request as the ledger settled it.</p>
        <TableWrap label="Recent requests table">
          <table aria-labelledby="recent-title">
            <thead><tr>{HEADERS}</tr></thead>
            <tbody><GenerationRows entries={entries} /></tbody>
          </table>
        </TableWrap>
        {page && entries.length === 0 && <p>{pageNumber === 1 ? 'No requests yet.' : 'No more requests.'}</p>}
        <Pager label="Request pages" previousText="Newer" nextText="Older" {...pages.pager(page?.next_cursor)} />
      </section>
      <GenerationLookup />
    </>
  );
}

/** One request by its gateway request id (x-gateway-request-id): model, provider, tokens, cost, latency. */
function GenerationLookup() {
  const [id, setId] = useState('');
  const [found, setFound] = useState<Generation[]>([]);
  const [error, setError] = useState<string>();

  const submit = async (event: Event) => {
    event.preventDefault();
    setError(undefined);
    try {
      const answer = await api.generation(id.trim());
      setFound((list) => [answer.data, ...list.filter((entry) => entry.id !== answer.data.id)].slice(0, 20));
    } catch (failure) {
      setError(errorText(failure));
    }
  };

  return (
    <section aria-labelledby="lookup-title" class="card">
      <h2 id="lookup-title">Look up a request</h2>
      <form class="row lookup" onSubmit={submit}>
        <label class="inline">Request id
          <input value={id} required spellcheck={false} onInput={(event) => setId((event.target as HTMLInputElement).value)} />
        </label>
        <button type="submit">Look up</button>
      </form>
      {error && <p role="alert" class="error">{error}</p>}
      {found.length > 0 && (
        <TableWrap label="Looked-up requests table">
          <table aria-label="Looked-up requests">
            <thead><tr>{HEADERS}</tr></thead>
            <tbody><GenerationRows entries={found} /></tbody>
          </table>
        </TableWrap>
      )}
    </section>
  );
}
