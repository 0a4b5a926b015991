import { useEffect, useRef, useState } from 'preact/hooks';
import { adminApi, errorText, newIdempotencyKey, type AdminAccount } from '../api.js';
import { fromUnits, toUnits } from '../decimal.js';
import { adminToken } from '../session.js';
import { utcTime } from './requests.js';
import { Pager, useKeysetPages } from './pager.js';
import { useLoad } from './use-load.js';
import { TableWrap } from './table-wrap.js';
import { CredentialSignIn, IdentityProviderSignIn } from './sign-in.js';
import { DaysInput } from './days-input.js';
import { AdminAudit } from './audit.js';

const ACCOUNTS_PER_PAGE = 20;

/**
 * The operator's view: provider health, latency per model, accounts and their top-ups. It signs in on its
 * own, with the admin token (the one gatewayctl uses), kept like the provisioning key but apart from it.
 */
export function OperatorView({ signedInAsOperator = false }: { signedInAsOperator?: boolean }) {
  const [signedIn, setSignedIn] = useState(adminToken.value() !== undefined);
  // A person the identity provider signed in as an operator: the routes take their session cookie.
  if (signedInAsOperator && !signedIn) return <OperatorPanels onSignOut={undefined} />;
  if (!signedIn) return <AdminSignIn onSignedIn={() => setSignedIn(true)} />;
  return <OperatorPanels onSignOut={() => { adminToken.signOut(); setSignedIn(false); }} />;
}

function AdminSignIn({ onSignedIn }: { onSignedIn: () => void }) {
  return (
    <>
    <IdentityProviderSignIn account="operator" />
    <CredentialSignIn credential={adminToken} check={adminApi.providers} onSignedIn={onSignedIn} title="Operator sign in" fieldId="admin-token" label="Admin token">
      The Operator view uses the gateway's admin token (the one <code>gatewayctl</code> uses; under <code>npm start</code> it is
      in the data dir's <code>admin-token</code> file).
    </CredentialSignIn>
    </>
  );
}

const percent = (rate: number) => `${(rate * 100).toFixed(rate > 0 && rate < 0.001 ? 3 : 1)} %`;
const milliseconds = (value: number) => `${Math.round(value)} ms`;

function OperatorPanels({ onSignOut }: { onSignOut: (() => void) | undefined }) {
  const [generation, setGeneration] = useState(0);
  return (
    <>
      <div class="row">
        <h1>Operator</h1>
        <div class="actions">
          <button type="button" class="secondary" onClick={() => setGeneration((count) => count + 1)}>Refresh</button>
          {onSignOut && <button type="button" class="secondary" onClick={onSignOut}>Sign out of Operator</button>}
        </div>
      </div>
      <Providers generation={generation} />
      <Latency generation={generation} />
      <Accounts generation={generation} />
      <AdminAudit generation={generation} />
    </>
  );
}

function Providers({ generation }: { generation: number }) {
  const { data, error } = useLoad(adminApi.providers, [generation]);
  const rows = data?.data;

  return (
    <section aria-labelledby="providers-title" class="card">
      <h2 id="providers-title">Providers</h2>
      <p class="hint">Health per provider and model from recent requests; an open circuit means routing skips the pair for now.</p>
      {error && <p role="alert" class="error">{error}</p>}
      <TableWrap label="Providers table">
        <table aria-labelledby="providers-title">
          <thead>
            <tr><th scope="col">Provider</th><th scope="col">Model</th><th scope="col">Circuit</th><th scope="col" class="num">Error rate</th>
              <th scope="col" class="num">Samples</th><th scope="col" class="num">Time to first token</th><th scope="col" class="num">Output tokens/s</th></tr>
          </thead>
          <tbody>
            {(rows ?? []).map((row) => (
              <tr key={`${row.provider} ${row.model}`}>
                <td>{row.provider_name}{row.provider_name !== row.provider && <> (<code>{row.provider}</code>)</>}</td>
                <td>{row.model}</td>
                <td class={row.circuit === 'open' ? 'error' : undefined}>{row.circuit}</td>
                <td class="num">{percent(row.error_rate)}</td>
                <td class="num">{row.samples}</td>
                <td class="num">{milliseconds(row.ttft_ms)}</td>
                <td class="num">{row.output_tokens_per_second.toFixed(1)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      {rows?.length === 0 && <p>No provider has served a request yet.</p>}
    </section>
  );
}

function Latency({ generation }: { generation: number }) {
  const [days, setDays] = useState(7);
  const { data, error } = useLoad(() => adminApi.latency(days), [days, generation]);
  const rows = data?.data;

  return (
    <section aria-labelledby="latency-title" class="card">
      <div class="row">
        <h2 id="latency-title">Latency per model</h2>
        <DaysInput id="latency-days" days={days} onDays={setDays} />
      </div>
      {error && <p role="alert" class="error">{error}</p>}
      <TableWrap label="Latency table">
        <table aria-labelledby="latency-title">
          <thead>
            <tr><th scope="col">Model</th><th scope="col">Provider</th><th scope="col" class="num">Requests</th><th scope="col" class="num">Latency p50</th>
              <th scope="col" class="num">Latency p95</th><th scope="col" class="num">Generation time p50</th></tr>
          </thead>
          <tbody>
            {(rows ?? []).map((row) => (
              <tr key={`${row.model} ${row.provider}`}>
                <td>{row.model}</td><td>{row.provider}</td><td class="num">{row.requests}</td>
                <td class="num">{milliseconds(row.latency_p50_ms)}</td><td class="num">{milliseconds(row.latency_p95_ms)}</td>
                <td class="num">{milliseconds(row.generation_time_p50_ms)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      {rows?.length === 0 && <p>No requests in these days.</p>}
    </section>
  );
}

function Accounts({ generation }: { generation: number }) {
  const pages = useKeysetPages();
  const [reloads, setReloads] = useState(0);
  const { data: page, error } = useLoad(() => adminApi.accounts(ACCOUNTS_PER_PAGE, pages.cursor),
    [pages.cursor, pages.pageNumber, generation, reloads]);
  const [topUp, setTopUp] = useState<AdminAccount>();
  // The account being topped up as the latest page shows it (its balance changes with the top-up).
  const topUpShown = topUp && (page?.data.find((account) => account.id === topUp.id) ?? topUp);

  const accounts = page?.data ?? [];
  return (
    <section aria-labelledby="accounts-title" class="card">
      <h2 id="accounts-title">Accounts</h2>
      {error && <p role="alert" class="error">{error}</p>}
      <TableWrap label="Accounts table">
        <table aria-labelledby="accounts-title">
          <thead>
            <tr><th scope="col">Name</th><th scope="col">Tier</th><th scope="col" class="num">Balance (credits)</th>
              <th scope="col" class="num">Available (credits)</th><th scope="col">Created</th><th scope="col">Actions</th></tr>
          </thead>
          <tbody>
            {accounts.map((account) => (
              <tr key={account.id}>
                <td>{account.name}<br /><code class="hint">{account.id}</code></td>
                <td>{account.tier}</td>
                <td class="num">{account.balance}</td>
                <td class="num">{account.available}</td>
                <td>{utcTime(account.created_at).slice(0, 10)}</td>
                <td><button type="button" class="secondary" aria-label={`Top up ${account.name}`} onClick={() => setTopUp(account)}>Top up</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      {page && accounts.length === 0 && <p>No accounts on this page.</p>}
      <Pager label="Account pages" previousText="Previous" nextText="Next" {...pages.pager(page?.next_cursor)} />
      {topUpShown && (
        <TopUp key={topUpShown.id} account={topUpShown} onDone={() => setReloads((count) => count + 1)} onClose={() => setTopUp(undefined)} />
      )}
    </section>
  );
}

/** One submission of the top-up form: its idempotency key stays with it, so a retry cannot add twice. */
interface Submission {
  amount: string;
  idempotencyKey: string;
}

type Outcome = { kind: 'done'; text: string } | { kind: 'failed'; text: string };

/** Credits as the ledger keeps them: a decimal with at most 12 decimals (pico-credits). */
const AMOUNT = /^\d+(\.\d{1,12})?$/;

/** Top up one account: amount, a confirmation, then the result or the API's refusal in words. */
function TopUp({ account, onDone, onClose }: { account: AdminAccount; onDone: () => void; onClose: () => void }) {
  const [amount, setAmount] = useState('');
  const [invalid, setInvalid] = useState<string>();
  const [submission, setSubmission] = useState<Submission>();
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [outcome, setOutcome] = useState<Outcome>();
  const amountInput = useRef<HTMLInputElement>(null);
  const cancelButton = useRef<HTMLButtonElement>(null);
  const result = useRef<HTMLParagraphElement>(null);

  useEffect(() => { amountInput.current?.focus(); }, []);
  useEffect(() => { if (confirming) cancelButton.current?.focus(); }, [confirming]);
  useEffect(() => { if (outcome) result.current?.focus(); }, [outcome]);

  const review = (event: Event) => {
    event.preventDefault();
    setOutcome(undefined);
    const text = amount.trim();
    if (!AMOUNT.test(text) || toUnits(text) <= 0n) {
      setInvalid('Enter a positive amount of credits with at most 12 decimals, such as 5 or 0.25.');
      return;
    }
    setInvalid(undefined);
    // The same amount reviewed again after a failure is the same submission; a new amount is a new one.
    const normalised = fromUnits(toUnits(text));
    if (submission?.amount !== normalised) setSubmission({ amount: normalised, idempotencyKey: newIdempotencyKey() });
    setConfirming(true);
  };

  const send = async () => {
    if (!submission) return;
    setBusy(true);
    try {
      const answer = await adminApi.addCredits(account.id, submission.amount, submission.idempotencyKey);
      setOutcome({ kind: 'done', text: `Added ${submission.amount} credits to ${account.name}. The balance is now ${answer.balance} credits.` });
      setSubmission(undefined);
      setAmount('');
      onDone();
    } catch (failure) {
      setOutcome({ kind: 'failed', text: `The top-up of ${submission.amount} credits to ${account.name} failed: ${errorText(failure)}` });
    } finally {
      setBusy(false);
      setConfirming(false);
    }
  };

  const titleId = `top-up-title-${account.id}`;
  return (
    <section aria-labelledby={titleId} class="card notice top-up">
      <h3 id={titleId}>Top up {account.name}</h3>
      <p>Balance {account.balance} credits. The amount is added to the account's balance.</p>
      <form class="row" onSubmit={review}>
        <label class="inline" for="top-up-amount">Amount (credits)</label>
        <input id="top-up-amount" ref={amountInput} value={amount} inputMode="decimal" required autocomplete="off"
          aria-describedby={invalid ? 'top-up-invalid' : undefined} aria-invalid={invalid ? true : undefined}
          onInput={(event) => { setAmount((event.target as HTMLInputElement).value); setConfirming(false); }} />
        <button type="submit" disabled={busy}>Review top-up</button>
        <button type="button" class="secondary" onClick={onClose}>Close</button>
      </form>
      {invalid && <p id="top-up-invalid" role="alert" class="error">{invalid}</p>}
      {confirming && submission && (
        <div role="alertdialog" aria-labelledby="top-up-question" class="confirm">
          <p id="top-up-question">Add <strong>{submission.amount}</strong> credits to <strong>{account.name}</strong>?</p>
          <button type="button" disabled={busy} onClick={() => void send()}>Confirm top-up</button>{' '}
          <button type="button" class="secondary" ref={cancelButton} onClick={() => setConfirming(false)}>Cancel</button>
        </div>
      )}
      {outcome && (
        <p ref={result} tabIndex={-1} role={outcome.kind === 'done' ? 'status' : 'alert'} class={outcome.kind === 'done' ? 'success' : 'error'}
          data-testid="top-up-result">{outcome.text}</p>
      )}
      {outcome?.kind === 'failed' && submission && (
        <button type="button" disabled={busy} onClick={() => void send()}>Try again</button>
      )}
    </section>
  );
}
