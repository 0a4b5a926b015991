import { useEffect, useRef, useState } from 'preact/hooks';
import { api, errorText, ROUTING_STRATEGIES, type KeyRecord } from '../api.js';
import { TableWrap } from './table-wrap.js';
import { mayDo } from '../session.js';
import { Confirm } from './use-resource.js';

const value = (event: Event) => (event.target as HTMLInputElement | HTMLSelectElement).value;

export function KeysView() {
  const [keys, setKeys] = useState<KeyRecord[]>();
  const [error, setError] = useState<string>();
  const [created, setCreated] = useState<KeyRecord>();
  const [editing, setEditing] = useState<KeyRecord>();
  const [deleting, setDeleting] = useState<KeyRecord>();

  const copyButton = useRef<HTMLButtonElement>(null);
  // Keyboard users land where the next step is: the copy button (the confirmation's Cancel focuses itself).
  useEffect(() => { if (created) copyButton.current?.focus(); }, [created]);

  // The role table's answer for this person (the routes check it again): viewers and billing see no write controls.
  const mayWrite = mayDo('keys.write');
  const reload = () => api.keys().then((answer) => setKeys(answer.data)).catch((failure) => setError(errorText(failure)));
  useEffect(() => { void reload(); }, []);

  /** Runs one change, shows the API's refusal in words, and reloads the table. */
  const act = async (change: () => Promise<unknown>) => {
    setError(undefined);
    try {
      await change();
    } catch (failure) {
      setError(errorText(failure));
    }
    await reload();
  };

  return (
    <>
      <h1>Keys</h1>
      {error && <p role="alert" class="error">{error}</p>}
      {mayWrite && <CreateKey onCreated={(record) => { setCreated(record); void reload(); }} onError={setError} />}
      {created?.key && (
        <div role="status" class="card notice">
          <p>Key <strong>{created.name}</strong> created. Copy it now: it is not shown again.</p>
          <p class="secret"><code data-testid="new-key">{created.key}</code></p>
          <button type="button" ref={copyButton} onClick={() => void navigator.clipboard?.writeText(created.key!)}>Copy key</button>{' '}
          <button type="button" class="secondary" onClick={() => setCreated(undefined)}>Done</button>
        </div>
      )}
      {deleting && (
        <Confirm key={deleting.id} titleId="delete-title" action="Delete key" onCancel={() => setDeleting(undefined)}
          onConfirm={() => { const target = deleting; setDeleting(undefined); void act(() => api.deleteKey(target.id)); }}>
          Delete key <strong>{deleting.name}</strong> ({deleting.label})? Requests with it stop at once; this cannot be undone.</Confirm>
      )}
      {editing && (
        <EditKey record={editing} onCancel={() => setEditing(undefined)}
          onSave={(body) => { const target = editing; setEditing(undefined); void act(() => api.updateKey(target.id, body)); }} />
      )}
      <section aria-labelledby="keys-title" class="card">
        <h2 id="keys-title">API keys</h2>
        <TableWrap label="Keys table">
          <table aria-label="Keys">
            <thead>
              <tr><th scope="col">Name</th><th scope="col">Prefix</th><th scope="col" class="num">Credit limit</th><th scope="col" class="num">Usage</th>
                <th scope="col">Disabled</th><th scope="col">Default routing strategy</th><th scope="col">Actions</th></tr>
            </thead>
            <tbody>
              {(keys ?? []).map((record) => (
                <tr key={record.id}>
                  <td>{record.name}</td>
                  <td><code>{record.label}</code></td>
                  <td class="num">{record.credit_limit ?? 'none'}</td>
                  <td class="num">{record.usage}</td>
                  <td>{record.disabled ? 'yes' : 'no'}</td>
                  <td>{record.default_routing_strategy ?? 'balanced (default)'}</td>
                  <td class="actions">
                    {mayWrite ? <>
                    <button type="button" class="secondary" aria-label={`Edit ${record.name}`} onClick={() => setEditing(record)}>Edit</button>
                    <button type="button" class="secondary" aria-label={`${record.disabled ? 'Enable' : 'Disable'} ${record.name}`}
                      onClick={() => void act(() => api.updateKey(record.id, { disabled: !record.disabled }))}>{record.disabled ? 'Enable' : 'Disable'}</button>
                    <button type="button" class="danger" aria-label={`Delete ${record.name}`} onClick={() => setDeleting(record)}>Delete</button>
                    </> : 'read only'}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        {keys?.length === 0 && <p>No keys yet.</p>}
      </section>
    </>
  );
}

function CreateKey({ onCreated, onError }: { onCreated: (record: KeyRecord) => void; onError: (message: string) => void }) {
  const [name, setName] = useState('');
  const [limit, setLimit] = useState('');
  const [strategy, setStrategy] = useState('');

  const submit = async (event: Event) => {
    event.preventDefault();
    try {
      const record = await api.createKey({
        name: name.trim(),
        credit_limit: limit.trim() === '' ? null : limit.trim(),
        ...(strategy ? { default_routing_strategy: strategy } : {}),
      });
      setName('');
      setLimit('');
      onCreated(record);
    } catch (failure) {
      onError(errorText(failure));
    }
  };

  return (
    <section aria-labelledby="create-title" class="card">
      <h2 id="create-title">Create key</h2>
      <form class="grid" onSubmit={submit}>
        <label>Name<input value={name} required maxLength={200} onInput={(event) => setName(value(event))} /></label>
        <label>Credit limit<input value={limit} inputMode="decimal" placeholder="no limit" onInput={(event) => setLimit(value(event))} /></label>
        <label>Default routing strategy
          <select value={strategy} onChange={(event) => setStrategy(value(event))}>
            <option value="">balanced (default)</option>
            {ROUTING_STRATEGIES.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
          </select>
        </label>
        <button type="submit">Create key</button>
      </form>
    </section>
  );
}

function EditKey({ record, onSave, onCancel }: { record: KeyRecord; onSave: (body: Record<string, unknown>) => void; onCancel: () => void }) {
  const first = useRef<HTMLInputElement>(null);
  useEffect(() => { first.current?.focus(); }, [record.id]);
  const [name, setName] = useState(record.name);
  const [limit, setLimit] = useState(record.credit_limit === null ? '' : String(record.credit_limit));
  const [strategy, setStrategy] = useState(record.default_routing_strategy ?? '');

  return (
    <section aria-labelledby="edit-title" class="card">
      <h2 id="edit-title">Edit key {record.label}</h2>
      <form class="grid" onSubmit={(event) => {
        event.preventDefault();
        onSave({ name: name.trim(), credit_limit: limit.trim() === '' ? null : limit.trim(), default_routing_strategy: strategy === '' ? null : strategy });
      }}>
        <label>New name<input ref={first} value={name} required maxLength={200} onInput={(event) => setName(value(event))} /></label>
        <label>New credit limit<input value={limit} inputMode="decimal" placeholder="no limit" onInput={(event) => setLimit(value(event))} /></label>
        <label>New default routing strategy
          <select value={strategy} onChange={(event) => setStrategy(value(event))}>
            <option value="">balanced (default)</option>
            {ROUTING_STRATEGIES.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
          </select>
        </label>
        <div><button type="submit">Save</button>{' '}<button type="button" class="secondary" onClick={onCancel}>Cancel</button></div>
      </form>
    </section>
  );
}
