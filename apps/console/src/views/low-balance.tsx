import { useState } from 'preact/hooks';
import { api, type LowBalance } from '../api.js';

/**
 * The account's low-balance threshold (docs/governance.md "Low balance"): a `balance.low` webhook event is
 * sent once each time charges take the balance below it. `act` runs a change with the Budgets view's
 * status and error lines.
 */
export function LowBalanceCard({ low, mayWrite, act }: {
  low: LowBalance | undefined;
  mayWrite: boolean;
  act: (change: () => Promise<unknown>, done: string) => Promise<boolean>;
}) {
  const [threshold, setThreshold] = useState('');
  const submit = (event: Event) => {
    event.preventDefault();
    const chosen = threshold.trim();
    void act(() => api.setLowBalance(chosen), `Saved the low-balance threshold of ${chosen} credits.`).then((ok) => { if (ok) setThreshold(''); });
  };
  return (
    <section aria-labelledby="low-balance-title" class="card">
      <h2 id="low-balance-title">Low balance</h2>
      <p class="hint">A balance.low webhook event is sent once when charges take the balance below this threshold, and again only after the balance is back at or above it.</p>
      {low && <p data-testid="low-balance">
        {low.threshold === null ? 'No low-balance threshold.' : `Threshold ${low.threshold} credits; balance ${low.balance} credits${low.below ? ', below it' : ''}.`}
      </p>}
      {mayWrite && (
        <form class="grid" onSubmit={submit}>
          <label>Low-balance threshold (credits)<input value={threshold} required inputMode="decimal" autocomplete="off" onInput={(event) => setThreshold((event.target as HTMLInputElement).value)} /></label>
          <div>
            <button type="submit">Save threshold</button>
            {low?.threshold != null && <>{' '}<button type="button" class="secondary" onClick={() => void act(() => api.setLowBalance(null), 'Cleared the low-balance threshold.')}>Clear threshold</button></>}
          </div>
        </form>
      )}
    </section>
  );
}
