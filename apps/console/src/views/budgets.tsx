import { useEffect, useRef, useState } from 'preact/hooks';
import { api, BUDGET_PERIODS, type Budget, type BudgetPeriod, type KeyRecord } from '../api.js';
import { DEFAULT_THRESHOLDS, parseLimit, parseThresholds, spentPercent } from '../budget-form.js';
import { mayDo } from '../session.js';
import { utcTime } from './requests.js';
import { TableWrap } from './table-wrap.js';
import { LowBalanceCard } from './low-balance.js';
import { Confirm, Outcome, useResource } from './use-resource.js';

const value = (event: Event) => (event.target as HTMLInputElement | HTMLSelectElement).value;
/** The scope field's value for the account's own budget (key ids never take this form). */
const ACCOUNT_SCOPE = ':account';

/**
 * The account's budgets and its keys' (docs/governance.md "Budgets"): period, limit, this period's spend,
 * thresholds with the fired ones marked, hard stop; set, change and delete them where the role allows.
 */
export function BudgetsView() {
  const { data, error, notice, reload, act } = useResource(() => Promise.all([api.budgets(), api.keys(), api.lowBalance()]), []);
  const [editing, setEditing] = useState<Budget>();
  const [deleting, setDeleting] = useState<Budget>();
  // A new form (its fields back to their defaults) after each save.
  const [forms, setForms] = useState(0);

  const mayWrite = mayDo('budgets.write');
  const budgets = data?.[0].data;
  const alerts = data?.[0].alerts ?? [];
  const keys = data?.[1].data ?? [];
  const keyName = (keyId: string | null) => keyId === null ? 'Account' : `Key ${keys.find((key) => key.id === keyId)?.name ?? keyId}`;

  return (
    <>
      <div class="row">
        <h1>Budgets</h1>
        <button type="button" class="secondary" onClick={reload}>Refresh</button>
      </div>
      <Outcome error={error} notice={notice} />
      {deleting && (
        <Confirm key={deleting.key_id ?? ACCOUNT_SCOPE} titleId="delete-budget-title" action="Delete budget" onCancel={() => setDeleting(undefined)} onConfirm={() => {
          const target = deleting;
          setDeleting(undefined);
          void act(() => api.deleteBudget(target.key_id ?? undefined), `Deleted the budget of ${keyName(target.key_id)}.`);
        }}>Delete the {deleting.period} budget of {keyName(deleting.key_id)}? Its spend stops being bounded at once.</Confirm>
      )}
      <section aria-labelledby="budgets-title" class="card">
        <h2 id="budgets-title">Budgets</h2>
        <p class="hint">Spend per UTC period (weeks from Monday). A fired threshold is marked ✓ fired; a hard stop refuses requests (402) that would pass the limit.</p>
        <TableWrap label="Budgets table">
          <table aria-label="Budgets">
            <thead>
              <tr><th scope="col">Scope</th><th scope="col">Period</th><th scope="col" class="num">Limit (credits)</th><th scope="col" class="num">Spent (credits)</th>
                <th scope="col" class="num">Used</th><th scope="col">Thresholds</th><th scope="col">Hard stop</th><th scope="col">Period start</th><th scope="col">Actions</th></tr>
            </thead>
            <tbody>
              {(budgets ?? []).map((budget) => (
                <tr key={budget.key_id ?? ACCOUNT_SCOPE}>
                  <td>{keyName(budget.key_id)}</td>
                  <td>{budget.period}</td>
                  <td class="num">{budget.limit}</td>
                  <td class="num">{budget.spent}</td>
                  <td class="num">{spentPercent(budget.spent, budget.limit)}</td>
                  <td><Thresholds budget={budget} /></td>
                  <td>{budget.hard_stop ? 'yes' : 'no'}</td>
                  <td>{budget.period_start}</td>
                  <td><div class="actions">
                    {mayWrite ? <>
                      <button type="button" class="secondary" aria-label={`Change the budget of ${keyName(budget.key_id)}`} onClick={() => setEditing(budget)}>Change</button>
                      <button type="button" class="danger" aria-label={`Delete the budget of ${keyName(budget.key_id)}`} onClick={() => setDeleting(budget)}>Delete</button>
                    </> : 'read only'}
                  </div></td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        {budgets?.length === 0 && <p>No budgets yet.</p>}
      </section>
      {mayWrite && (
        <BudgetForm key={editing ? `edit ${editing.key_id ?? ACCOUNT_SCOPE}` : `new ${forms}`} editing={editing} keys={keys}
          onCancel={() => setEditing(undefined)}
          onSave={(keyId, body) => {
            setEditing(undefined);
            setForms((count) => count + 1);
            void act(() => api.setBudget(keyId, body), `Saved the ${body.period} budget of ${keyName(keyId ?? null)}.`);
          }} />
      )}
      <LowBalanceCard low={data?.[2]} mayWrite={mayWrite} act={act} />
      <section aria-labelledby="alerts-title" class="card">
        <h2 id="alerts-title">Alerts</h2>
        <p class="hint">The thresholds that fired, newest first (the latest 100). Each fires once per period and scope.</p>
        <TableWrap label="Alerts table">
          <table aria-label="Budget alerts">
            <thead>
              <tr><th scope="col">Fired</th><th scope="col">Scope</th><th scope="col">Period</th><th scope="col" class="num">Threshold</th>
                <th scope="col" class="num">Spent (credits)</th><th scope="col" class="num">Limit (credits)</th><th scope="col">Delivery</th></tr>
            </thead>
            <tbody>
              {alerts.map((alert) => (
                <tr key={alert.id}>
                  <td>{utcTime(alert.fired_at)}</td><td>{keyName(alert.key_id)}</td><td>{alert.period} from {alert.period_start}</td>
                  <td class="num">{alert.threshold} %</td><td class="num">{alert.spent}</td><td class="num">{alert.limit}</td><td>{alert.delivery_state}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        {data && alerts.length === 0 && <p>No threshold has fired.</p>}
      </section>
    </>
  );
}

function Thresholds({ budget }: { budget: Budget }) {
  if (budget.thresholds.length === 0) return <>none</>;
  return (
    <ul class="thresholds">
      {budget.thresholds.map((threshold) => {
        const fired = budget.fired_thresholds.includes(threshold);
        return <li key={threshold} class={fired ? 'fired' : undefined}>{threshold} %{fired ? ' ✓ fired' : ''}</li>;
      })}
    </ul>
  );
}

/** Sets a budget: a new one (any scope without one), or changes the one being edited. */
function BudgetForm({ editing, keys, onSave, onCancel }: {
  editing: Budget | undefined;
  keys: KeyRecord[];
  onSave: (keyId: string | undefined, body: { period: BudgetPeriod; limit: string; thresholds: number[]; hard_stop: boolean }) => void;
  onCancel: () => void;
}) {
  const [scope, setScope] = useState(editing ? editing.key_id ?? ACCOUNT_SCOPE : ACCOUNT_SCOPE);
  const [period, setPeriod] = useState<BudgetPeriod>(editing?.period ?? 'monthly');
  const [limit, setLimit] = useState(editing?.limit ?? '');
  const [thresholds, setThresholds] = useState((editing?.thresholds ?? DEFAULT_THRESHOLDS).join(', '));
  const [hardStop, setHardStop] = useState(editing?.hard_stop ?? false);
  const [problem, setProblem] = useState<string>();
  const first = useRef<HTMLInputElement>(null);
  useEffect(() => { if (editing) first.current?.focus(); }, []);

  const submit = (event: Event) => {
    event.preventDefault();
    const parsedLimit = parseLimit(limit);
    const parsedThresholds = parseThresholds(thresholds);
    const wrong = 'problem' in parsedLimit ? parsedLimit.problem : 'problem' in parsedThresholds ? parsedThresholds.problem : undefined;
    setProblem(wrong);
    if (wrong !== undefined || !('limit' in parsedLimit) || !('thresholds' in parsedThresholds)) return;
    onSave(scope === ACCOUNT_SCOPE ? undefined : scope, { period, limit: parsedLimit.limit, thresholds: parsedThresholds.thresholds, hard_stop: hardStop });
  };

  const title = editing ? 'Change budget' : 'Set a budget';
  return (
    <section aria-labelledby="budget-form-title" class="card">
      <h2 id="budget-form-title">{title}</h2>
      <form class="grid" onSubmit={submit} aria-describedby={problem ? 'budget-problem' : undefined}>
        <label>Scope
          <select value={scope} disabled={editing !== undefined} onChange={(event) => setScope(value(event))}>
            <option value={ACCOUNT_SCOPE}>The whole account</option>
            {keys.map((key) => <option key={key.id} value={key.id}>Key {key.name}</option>)}
          </select>
        </label>
        <label>Period
          <select value={period} onChange={(event) => setPeriod(value(event) as BudgetPeriod)}>
            {BUDGET_PERIODS.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
          </select>
        </label>
        <label>Limit (credits)<input ref={first} value={limit} required inputMode="decimal" autocomplete="off" onInput={(event) => setLimit(value(event))} /></label>
        <label>Thresholds (%)<input value={thresholds} autocomplete="off" placeholder="none" onInput={(event) => setThresholds(value(event))} /></label>
        <label class="check"><input type="checkbox" checked={hardStop} onChange={(event) => setHardStop((event.target as HTMLInputElement).checked)} />Hard stop at the limit</label>
        <div>
          <button type="submit">{editing ? 'Save budget' : 'Set budget'}</button>
          {editing && <>{' '}<button type="button" class="secondary" onClick={onCancel}>Cancel</button></>}
        </div>
      </form>
      {problem && <p id="budget-problem" role="alert" class="error">{problem}</p>}
      <p class="hint">Setting a budget where the scope already has one replaces it; thresholds already fired this period stay fired.</p>
    </section>
  );
}
