import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { apiKey, identitySession, provisioningKey, type IdentitySession } from './session.js';
import { SignIn } from './views/sign-in.js';
import { AccountView } from './views/account.js';
import { KeysView } from './views/keys.js';
import { ModelsView } from './views/models.js';
import { RequestsView } from './views/requests.js';
import { OperatorView } from './views/operator.js';
import { BudgetsView } from './views/budgets.js';
import { AuditView } from './views/audit.js';
import { BatchesView, FilesView } from './views/jobs.js';
import { WebhooksView } from './views/webhooks.js';
import { MembersView } from './views/members.js';
import 'uplot/dist/uPlot.min.css';
import './styles.css';

const BASE = '/console/';
const VIEWS = [
  { path: 'account', title: 'Account' },
  { path: 'requests', title: 'Requests' },
  { path: 'keys', title: 'Keys' },
  { path: 'budgets', title: 'Budgets' },
  { path: 'audit', title: 'Audit log' },
  { path: 'webhooks', title: 'Webhooks' },
  { path: 'members', title: 'Members' },
  { path: 'files', title: 'Files' },
  { path: 'batches', title: 'Batches' },
  { path: 'models', title: 'Models' },
  { path: 'operator', title: 'Operator' },
] as const;
type ViewPath = (typeof VIEWS)[number]['path'];

function viewFromLocation(): ViewPath {
  const rest = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length).replace(/\/.*$/, '') : '';
  return VIEWS.find((view) => view.path === rest)?.path ?? 'account';
}

function App() {
  const [keySignedIn, setKeySignedIn] = useState(provisioningKey.value() !== undefined);
  const [identity, setIdentity] = useState<IdentitySession | undefined>();
  const [identityChecked, setIdentityChecked] = useState(false);
  const [view, setView] = useState<ViewPath>(viewFromLocation());
  const signedIn = keySignedIn || (identity !== undefined && identity.account_id !== null);

  useEffect(() => {
    void identitySession.load().then((loaded) => {
      setIdentity(loaded);
      setIdentityChecked(true);
    });
  }, []);
  const signOut = () => {
    // The Files and Batches views' API key belongs to the account being signed out of.
    apiKey.signOut();
    if (keySignedIn) {
      provisioningKey.signOut();
      setKeySignedIn(false);
    }
    if (identity !== undefined) void identitySession.signOut().then(() => setIdentity(undefined));
  };

  useEffect(() => {
    const onPop = () => setView(viewFromLocation());
    addEventListener('popstate', onPop);
    return () => removeEventListener('popstate', onPop);
  }, []);
  useEffect(() => {
    document.title = `${VIEWS.find((entry) => entry.path === view)!.title} · Gateway console`;
  }, [view]);

  const go = (path: ViewPath) => (event: MouseEvent) => {
    event.preventDefault();
    history.pushState(null, '', BASE + path);
    setView(path);
  };

  return (
    <>
      <header class="top">
        <span class="brand">Gateway console</span>
        <nav aria-label="Console">
          <ul>
            {VIEWS.map((entry) => (
              <li key={entry.path}>
                <a href={BASE + entry.path} aria-current={entry.path === view ? 'page' : undefined} onClick={go(entry.path)}>{entry.title}</a>
              </li>
            ))}
          </ul>
        </nav>
        {identity !== undefined && !keySignedIn && <span class="who">{identity.display_name} · {identity.role}</span>}
        {(signedIn || identity !== undefined) && (
          <button type="button" class="secondary" onClick={signOut}>Sign out</button>
        )}
      </header>
      <main id="main">
        {view === 'models' ? <ModelsView />
          : !identityChecked ? <p aria-busy="true">Loading…</p>
          : view === 'operator' ? <OperatorView signedInAsOperator={!keySignedIn && identity?.role === 'operator'} />
          : !signedIn ? <SignIn onSignedIn={() => setKeySignedIn(true)} />
          : view === 'keys' ? <KeysView /> : view === 'requests' ? <RequestsView />
          : view === 'budgets' ? <BudgetsView /> : view === 'audit' ? <AuditView />
          : view === 'webhooks' ? <WebhooksView /> : view === 'members' ? <MembersView />
          : view === 'files' ? <FilesView /> : view === 'batches' ? <BatchesView /> : <AccountView />}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
