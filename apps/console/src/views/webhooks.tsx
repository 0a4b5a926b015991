import { useEffect, useRef, useState } from 'preact/hooks';
import { api, errorText, WEBHOOK_EVENT_TYPES, type WebhookDelivery, type WebhookEndpoint } from '../api.js';
import { mayDo } from '../session.js';
import { Pager, useKeysetPages } from './pager.js';
import { utcTime } from './requests.js';
import { TableWrap } from './table-wrap.js';
import { useLoad } from './use-load.js';
import { Confirm, Outcome, useResource } from './use-resource.js';

const DELIVERIES_PER_PAGE = 20;
/** The route's bound on a receiver's URL (docs/governance.md "Webhooks"). */
const URL_MAX_LENGTH = 2_048;

const time = (seconds: number | null) => (seconds === null ? '—' : utcTime(seconds));

/**
 * The account's webhook endpoints (docs/governance.md "Webhooks"): list, create (the signing secret shown
 * once), rotate the secret after a confirmation (the new one shown once), enable/disable, delete after a confirmation; and per endpoint its recent deliveries, the
 * dead-lettered ones marked, with a Redeliver button for each of those.
 */
export function WebhooksView() {
  const allowed = mayDo('webhooks.read');
  const mayWrite = mayDo('webhooks.write');
  const { data, error, notice, generation, reload, act, setAlert } = useResource(() => (allowed ? api.webhooks() : Promise.resolve(undefined)), [allowed]);
  const [created, setCreated] = useState<WebhookEndpoint>();
  const [deleting, setDeleting] = useState<WebhookEndpoint>();
  const [rotating, setRotating] = useState<WebhookEndpoint>();
  const [rotated, setRotated] = useState<WebhookEndpoint>();
  const [shownId, setShownId] = useState<string>();
  const copyButton = useRef<HTMLButtonElement>(null);
  useEffect(() => { if (created || rotated) copyButton.current?.focus(); }, [created, rotated]);
  const rotate = async (target: WebhookEndpoint) => {
    setRotated(undefined);
    try {
      const answer = await api.rotateWebhookSecret(target.id);
      setAlert(undefined);
      setCreated(undefined);
      setRotated(answer);
    } catch (failure) {
      setAlert(errorText(failure));
    }
    reload();
  };

  const endpoints = data?.data;
  const shown = endpoints?.find((endpoint) => endpoint.id === shownId);

  return (
    <>
      <div class="row">
        <h1>Webhooks</h1>
        {allowed && <button type="button" class="secondary" onClick={reload}>Refresh</button>}
      </div>
      {!allowed && <p role="status" class="card">Your role may not read the webhook endpoints; the account's owners, admins and billing may.</p>}
      <Outcome error={error} notice={notice} />
      {created?.secret && (
        <div role="status" class="card notice">
          <p>Endpoint <code class="url">{created.url}</code> created. Copy its signing secret now: it is not shown again.
            Receivers check each request's <code>webhook-signature</code> with it (any Standard Webhooks library does).</p>
          <p class="secret"><code data-testid="webhook-secret">{created.secret}</code></p>
          <button type="button" ref={copyButton} onClick={() => void navigator.clipboard?.writeText(created.secret!)}>Copy secret</button>{' '}
          <button type="button" class="secondary" onClick={() => setCreated(undefined)}>Done</button>
        </div>
      )}
      {rotated?.secret && (
        <div role="status" class="card notice">
          <p>New signing secret for <code class="url">{rotated.url}</code>. Copy it now: it is not shown again.
            Until {time(rotated.previous_secret_expires_at ?? null)} each delivery is signed with the old secret too, so switch your receiver before then.</p>
          <p class="secret"><code data-testid="webhook-secret">{rotated.secret}</code></p>
          <button type="button" ref={copyButton} onClick={() => void navigator.clipboard?.writeText(rotated.secret!)}>Copy secret</button>{' '}
          <button type="button" class="secondary" onClick={() => setRotated(undefined)}>Done</button>
        </div>
      )}
      {rotating && (
        <Confirm key={rotating.id} titleId="rotate-webhook-title" action="Rotate secret" onCancel={() => setRotating(undefined)} onConfirm={() => {
          const target = rotating;
          setRotating(undefined);
          void rotate(target);
        }}>Give <code class="url">{rotating.url}</code> a new signing secret? For a day deliveries carry signatures with both the old and the new secret; after that only the new one.</Confirm>
      )}
      {deleting && (
        <Confirm key={deleting.id} titleId="delete-webhook-title" action="Delete endpoint" onCancel={() => setDeleting(undefined)} onConfirm={() => {
          const target = deleting;
          setDeleting(undefined);
          if (shownId === target.id) setShownId(undefined);
          void act(() => api.deleteWebhook(target.id), `Deleted the endpoint ${target.url}.`);
        }}>Delete the endpoint <code class="url">{deleting.url}</code>? Its deliveries, pending ones too, are deleted with it; this cannot be undone.</Confirm>
      )}
      {allowed && (
        <section aria-labelledby="webhooks-title" class="card">
          <h2 id="webhooks-title">Endpoints</h2>
          <p class="hint">Each event is signed and sent at least once, in order per endpoint, retried with backoff while the receiver fails; a disabled endpoint's deliveries wait.</p>
          <TableWrap label="Webhook endpoints table">
            <table aria-label="Webhook endpoints">
              <thead>
                <tr><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Enabled</th><th scope="col">Created</th><th scope="col">Actions</th></tr>
              </thead>
              <tbody>
                {(endpoints ?? []).map((endpoint) => (
                  <tr key={endpoint.id}>
                    <td><code class="url">{endpoint.url}</code></td>
                    <td><ul class="plain">{endpoint.event_types.map((type) => <li key={type}>{type}</li>)}</ul></td>
                    <td>{endpoint.enabled ? 'yes' : 'no'}</td>
                    <td class="time">{time(endpoint.created_at)}</td>
                    <td><div class="actions">
                      <button type="button" class="secondary" aria-label={`Deliveries of ${endpoint.url}`} aria-pressed={shownId === endpoint.id}
                        onClick={() => setShownId(shownId === endpoint.id ? undefined : endpoint.id)}>Deliveries</button>
                      {mayWrite && <>
                        <button type="button" class="secondary" aria-label={`${endpoint.enabled ? 'Disable' : 'Enable'} ${endpoint.url}`}
                          onClick={() => void act(() => api.updateWebhook(endpoint.id, { enabled: !endpoint.enabled }),
                            `${endpoint.enabled ? 'Disabled' : 'Enabled'} the endpoint ${endpoint.url}.`)}>{endpoint.enabled ? 'Disable' : 'Enable'}</button>
                        <button type="button" class="secondary" aria-label={`Rotate secret of ${endpoint.url}`} onClick={() => setRotating(endpoint)}>Rotate secret</button>
                        <button type="button" class="danger" aria-label={`Delete ${endpoint.url}`} onClick={() => setDeleting(endpoint)}>Delete</button>
                      </>}
                    </div></td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
          {endpoints?.length === 0 && <p>No endpoints yet.</p>}
          {!mayWrite && <p class="hint">Read only: the account's owners and admins add and change endpoints.</p>}
        </section>
      )}
      {allowed && shown && (
        <Deliveries key={shown.id} endpoint={shown} mayWrite={mayWrite} generation={generation}
          onRedeliver={(delivery) => void act(() => api.redeliverWebhook(shown.id, delivery.id),
            `Delivery ${delivery.id} is pending again, with a fresh set of attempts.`)} />
      )}
      {mayWrite && (
        <CreateWebhook onCreated={(endpoint) => { setAlert(undefined); setRotated(undefined); setCreated(endpoint); reload(); }} onError={setAlert} />
      )}
    </>
  );
}

/** One endpoint's deliveries, newest first, paged; a dead-lettered one is marked and may be sent again. */
function Deliveries({ endpoint, mayWrite, generation, onRedeliver }: {
  endpoint: WebhookEndpoint;
  mayWrite: boolean;
  generation: number;
  onRedeliver: (delivery: WebhookDelivery) => void;
}) {
  const pages = useKeysetPages();
  const { data: page, error } = useLoad(() => api.webhookDeliveries(endpoint.id, DELIVERIES_PER_PAGE, pages.cursor),
    [endpoint.id, pages.cursor, pages.pageNumber, generation]);
  const deliveries = page?.data ?? [];
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => { heading.current?.focus(); }, [endpoint.id]);

  return (
    <section aria-labelledby="deliveries-title" class="card">
      <h2 id="deliveries-title" ref={heading} tabIndex={-1}>Deliveries to <code class="url">{endpoint.url}</code></h2>
      <p class="hint">Newest first. Pending: waiting for its next attempt (or for an earlier event of this endpoint). Delivered: a 2xx answer.
        Dead-lettered: no 2xx after every attempt, or pending a day; Redeliver sends it again.</p>
      {error && <p role="alert" class="error">{error}</p>}
      <TableWrap label="Webhook deliveries table">
        <table aria-label="Webhook deliveries">
          <thead>
            <tr><th scope="col">Event</th><th scope="col">State</th><th scope="col">Actions</th><th scope="col" class="num">Attempts</th>
              <th scope="col" class="num">Last status</th><th scope="col">Last error</th><th scope="col">Created</th><th scope="col">Last attempt</th>
              <th scope="col">Next attempt</th><th scope="col">Finished</th></tr>
          </thead>
          <tbody>
            {deliveries.map((delivery) => (
              <tr key={delivery.id} class={delivery.dead_lettered ? 'dead' : undefined}>
                <td>{delivery.event_type}<br /><code class="id hint">{delivery.event_id}</code></td>
                <td class="time"><span class={`state ${delivery.state}`}>{delivery.dead_lettered ? '✗ dead-lettered' : delivery.state}</span></td>
                <td>{delivery.dead_lettered && mayWrite
                  ? <button type="button" class="secondary" aria-label={`Redeliver ${delivery.id}`} onClick={() => onRedeliver(delivery)}>Redeliver</button>
                  : '—'}</td>
                <td class="num">{delivery.attempts}</td>
                <td class="num">{delivery.last_status ?? '—'}</td>
                <td class="message">{delivery.last_error ?? '—'}</td>
                <td class="time">{time(delivery.created_at)}</td>
                <td class="time">{time(delivery.last_attempt_at)}</td>
                <td class="time">{time(delivery.next_attempt_at)}</td>
                <td class="time">{time(delivery.finished_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      {page && deliveries.length === 0 && <p>{pages.pageNumber === 1 ? 'No deliveries yet: an event this endpoint subscribes to has not happened since it was created.' : 'No older deliveries.'}</p>}
      <Pager label="Webhook delivery pages" previousText="Newer" nextText="Older" {...pages.pager(page?.next_cursor)} />
    </section>
  );
}

/** Registers an endpoint: its URL and the events it receives (every type ticked to begin with). */
function CreateWebhook({ onCreated, onError }: { onCreated: (endpoint: WebhookEndpoint) => void; onError: (message: string) => void }) {
  const [url, setUrl] = useState('');
  const [types, setTypes] = useState<string[]>([...WEBHOOK_EVENT_TYPES]);
  const [problem, setProblem] = useState<string>();

  const submit = async (event: Event) => {
    event.preventDefault();
    const chosen = WEBHOOK_EVENT_TYPES.filter((type) => types.includes(type));
    if (chosen.length === 0) {
      setProblem('Choose at least one event type.');
      return;
    }
    setProblem(undefined);
    try {
      const endpoint = await api.createWebhook({ url: url.trim(), event_types: chosen });
      setUrl('');
      setTypes([...WEBHOOK_EVENT_TYPES]);
      onCreated(endpoint);
    } catch (failure) {
      onError(errorText(failure));
    }
  };

  return (
    <section aria-labelledby="create-webhook-title" class="card">
      <h2 id="create-webhook-title">Add an endpoint</h2>
      <form onSubmit={submit} aria-describedby={problem ? 'webhook-problem' : undefined}>
        <label>URL<input type="url" value={url} required maxLength={URL_MAX_LENGTH} autocomplete="off" spellcheck={false} placeholder="https://hooks.example.com/gateway"
          onInput={(event) => setUrl((event.target as HTMLInputElement).value)} /></label>
        <fieldset class="events">
          <legend>Event types</legend>
          {WEBHOOK_EVENT_TYPES.map((type) => (
            <label class="check" key={type}>
              <input type="checkbox" checked={types.includes(type)}
                onChange={(event) => {
                  const checked = (event.target as HTMLInputElement).checked;
                  setTypes((current) => (checked ? [...current.filter((entry) => entry !== type), type] : current.filter((entry) => entry !== type)));
                }} />
              <code>{type}</code>
            </label>
          ))}
        </fieldset>
        <button type="submit">Create endpoint</button>
      </form>
      {problem && <p id="webhook-problem" role="alert" class="error">{problem}</p>}
      <p class="hint">The receiver must be a public <code>https</code> URL (the gateway refuses loopback, private and metadata addresses unless its operator allows them). At most 16 endpoints per account.</p>
    </section>
  );
}
