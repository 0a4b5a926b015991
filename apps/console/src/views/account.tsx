import { useEffect, useState } from 'preact/hooks';
import { api, type KeyRecord } from '../api.js';
import { sum } from '../decimal.js';
import { SpendChart } from './spend-chart.js';
import { DaysInput } from './days-input.js';
import { TableWrap } from './table-wrap.js';
import { useLoad } from './use-load.js';

export function AccountView() {
  const [days, setDays] = useState(7);
  const [generation, setGeneration] = useState(0);
  const [keys, setKeys] = useState<KeyRecord[]>([]);
  const [keyId, setKeyId] = useState('');

  useEffect(() => {
    api.keys().then((answer) => setKeys(answer.data)).catch(() => undefined);
  }, [generation]);

  const { data, error } = useLoad(() => Promise.all([api.balance(), api.activity(days, keyId || undefined)]), [days, keyId, generation]);
  const balance = data?.[0].balance;
  const rows = data?.[1].data;

  const sorted = (rows ?? []).slice().sort((a, b) => b.date.localeCompare(a.date) || a.model.localeCompare(b.model));
  return (
    <>
      <div class="row">
        <h1>Account</h1>
        <button type="button" class="secondary" onClick={() => setGeneration((count) => count + 1)}>Refresh</button>
      </div>
      {error && <p role="alert" class="error">{error}</p>}
      <section aria-labelledby="balance-title" class="card">
        <h2 id="balance-title">Balance</h2>
        <p class="balance" data-testid="balance">{balance === undefined ? '…' : `${balance} credits`}</p>
      </section>
      <section aria-labelledby="spend-title" class="card">
        <div class="row">
          <h2 id="spend-title">Spend per day</h2>
          <div class="controls">
            <span class="pair">
            <label class="inline" for="activity-key">Key</label>
            <select id="activity-key" value={keyId} onChange={(event) => setKeyId((event.target as HTMLSelectElement).value)}>
              <option value="">all keys</option>
              {keys.map((record) => <option key={record.id} value={record.id}>{record.name}</option>)}
            </select>
            </span>
            <DaysInput id="activity-days" days={days} onDays={setDays} />
          </div>
        </div>
        {rows && <SpendChart rows={rows} days={days} />}
        {rows && (
          <p>{rows.length === 0 ? 'No spend in these days.' : `${sum(rows.map((row) => row.credits))} credits in ${rows.reduce((n, row) => n + row.requests, 0)} requests.`}</p>
        )}
      </section>
      <section aria-labelledby="activity-title" class="card">
        <h2 id="activity-title">Activity</h2>
        <p class="hint">Requests per day and model, from the ledger's charges; each request on its own is under Requests.</p>
        <TableWrap label="Activity table">
          <table aria-labelledby="activity-title">
            <thead>
              <tr><th scope="col">Date</th><th scope="col">Model</th><th scope="col" class="num">Requests</th><th scope="col" class="num">Prompt tokens</th>
                <th scope="col" class="num">Completion tokens</th><th scope="col" class="num">Reasoning tokens</th><th scope="col" class="num">Cached tokens</th><th scope="col" class="num">Credits</th></tr>
            </thead>
            <tbody>
              {sorted.map((row) => (
                <tr key={`${row.date} ${row.model}`}>
                  <td>{row.date}</td><td>{row.model}</td><td class="num">{row.requests}</td><td class="num">{row.prompt_tokens}</td>
                  <td class="num">{row.completion_tokens}</td><td class="num">{row.reasoning_tokens}</td><td class="num">{row.cached_prompt_tokens}</td><td class="num">{row.credits}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      </section>
    </>
  );
}
