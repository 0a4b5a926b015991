import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { CANCELLABLE_BATCH_STATUSES, errorText, jobsApi, type Batch, type FileObject } from '../api.js';
import { apiKey } from '../session.js';
import { utcTime } from './requests.js';
import { CredentialSignIn } from './sign-in.js';
import { Pager, useKeysetPages } from './pager.js';
import { TableWrap } from './table-wrap.js';
import { useLoad } from './use-load.js';

const PER_PAGE = 20;
/** What the page reads of a file to show it: the rest of the file is never fetched. */
const PREVIEW_BYTES = 64 * 1024;

/**
 * The Files and Batches views use an API key of the account: the OpenAI Files and Batch routes take no other
 * credential. It is kept like the provisioning key (memory, or this tab's sessionStorage when asked), apart from it.
 */
function JobsCredential({ children }: { children: (signOut: () => void) => ComponentChildren }) {
  const [signedIn, setSignedIn] = useState(apiKey.value() !== undefined);
  if (!signedIn) {
    return (
      <CredentialSignIn credential={apiKey} check={() => jobsApi.files(1)} onSignedIn={() => setSignedIn(true)}
        title="Files and batches sign in" fieldId="jobs-api-key" label="API key">
        Files and batches belong to the account, and the OpenAI Files and Batch routes take an API key of it
        (<code>gw-api-…</code>, from the Keys view); any of the account's keys lists them all.
      </CredentialSignIn>
    );
  }
  return <>{children(() => { apiKey.signOut(); setSignedIn(false); })}</>;
}

const size = (bytes: number) => bytes < 1024 ? `${bytes} B` : bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/** A file's first 64 KiB as text, in a named region, with how much of it that is. */
function FileContent({ file, onClose }: { file: { id: string; label: string }; onClose: () => void }) {
  const { data, error } = useLoad(() => jobsApi.fileContent(file.id, PREVIEW_BYTES), [file.id]);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => { heading.current?.focus(); }, [file.id]);
  return (
    <section aria-labelledby="content-title" class="card notice">
      <div class="row">
        <h2 id="content-title" ref={heading} tabIndex={-1}>{file.label} <code>{file.id}</code></h2>
        <button type="button" class="secondary" onClick={onClose}>Close</button>
      </div>
      {error && <p role="alert" class="error">{error}</p>}
      {data && (
        <>
          <p class="hint">{data.truncated ? `The first ${size(PREVIEW_BYTES)} of ${size(data.bytes)}.` : `${size(data.bytes)}.`}</p>
          <div class="table-wrap" role="region" aria-label="File content" tabIndex={0}>
            <pre class="json" data-testid="file-content">{data.text}</pre>
          </div>
        </>
      )}
    </section>
  );
}

export function FilesView() {
  return <JobsCredential>{(signOut) => <FilesPanel onSignOut={signOut} />}</JobsCredential>;
}

/** A jobs page's heading: its title, and the Refresh and Forget-API-key buttons both pages have. */
function PanelHeading({ title, onRefresh, onSignOut }: { title: string; onRefresh: () => void; onSignOut: () => void }) {
  return (
    <div class="row">
      <h1>{title}</h1>
      <div class="actions">
        <button type="button" class="secondary" onClick={onRefresh}>Refresh</button>
        <button type="button" class="secondary" onClick={onSignOut}>Forget API key</button>
      </div>
    </div>
  );
}

function FilesPanel({ onSignOut }: { onSignOut: () => void }) {
  const [generation, setGeneration] = useState(0);
  // OpenAI's paging: the next page starts after the last id shown.
  const pages = useKeysetPages();
  const after = pages.cursor;
  const { data: page, error } = useLoad(() => jobsApi.files(PER_PAGE, after), [after, generation]);
  const [shown, setShown] = useState<FileObject>();
  const files = page?.data ?? [];

  return (
    <>
      <PanelHeading title="Files" onRefresh={() => setGeneration((count) => count + 1)} onSignOut={onSignOut} />
      {error && <p role="alert" class="error">{error}</p>}
      <section aria-labelledby="files-title" class="card">
        <h2 id="files-title">Uploaded and batch files</h2>
        <p class="hint">Newest first. Files expire at the time shown (uploads without one are kept 30 days by default; batch output files 30 days).</p>
        <TableWrap label="Files table">
          <table aria-label="Files">
            <thead>
              <tr><th scope="col">File</th><th scope="col">Name</th><th scope="col">Purpose</th><th scope="col" class="num">Size</th>
                <th scope="col">Created</th><th scope="col">Expires</th><th scope="col">Content</th></tr>
            </thead>
            <tbody>
              {files.map((file) => (
                <tr key={file.id}>
                  <td><code class="id">{file.id}</code></td><td>{file.filename}</td><td>{file.purpose}</td><td class="num">{size(file.bytes)}</td>
                  <td class="time">{utcTime(file.created_at)}</td><td class="time">{file.expires_at === null ? 'never' : utcTime(file.expires_at)}</td>
                  <td><button type="button" class="secondary" aria-label={`Show ${file.filename}`} onClick={() => setShown(file)}>Show</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        {page && files.length === 0 && <p>No files.</p>}
        <Pager label="File pages" previousText="Newer" nextText="Older" {...pages.pager(page?.has_more ? files.at(-1)?.id : undefined)} />
      </section>
      {shown && <FileContent file={{ id: shown.id, label: shown.filename }} onClose={() => setShown(undefined)} />}
    </>
  );
}

export function BatchesView() {
  return <JobsCredential>{(signOut) => <BatchesPanel onSignOut={signOut} />}</JobsCredential>;
}

/** When a batch ended, whichever way it did. */
const ended = (batch: Batch) => batch.completed_at ?? batch.failed_at ?? batch.cancelled_at ?? batch.expired_at;

function BatchesPanel({ onSignOut }: { onSignOut: () => void }) {
  const [generation, setGeneration] = useState(0);
  const pages = useKeysetPages();
  const after = pages.cursor;
  const { data: page, error: loadError } = useLoad(() => jobsApi.batches(PER_PAGE, after), [after, generation]);
  const [error, setError] = useState<string>();
  const [shown, setShown] = useState<{ id: string; label: string }>();
  const batches = page?.data ?? [];

  const cancel = async (batch: Batch) => {
    setError(undefined);
    try {
      await jobsApi.cancelBatch(batch.id);
    } catch (failure) {
      setError(errorText(failure));
    }
    setGeneration((count) => count + 1);
  };

  return (
    <>
      <PanelHeading title="Batches" onRefresh={() => setGeneration((count) => count + 1)} onSignOut={onSignOut} />
      {(error ?? loadError) && <p role="alert" class="error">{error ?? loadError}</p>}
      <section aria-labelledby="batches-title" class="card">
        <h2 id="batches-title">Batches</h2>
        <p class="hint">Newest first. Cost is the credits charged for the batch's lines so far, at the batch prices.</p>
        <TableWrap label="Batches table">
          <table aria-label="Batches">
            <thead>
              <tr><th scope="col">Batch</th><th scope="col">Endpoint</th><th scope="col">Status</th><th scope="col" class="num">Requests done / failed / total</th>
                <th scope="col" class="num">Cost (credits)</th><th scope="col">Created</th><th scope="col">Ended</th><th scope="col">Files</th><th scope="col">Actions</th></tr>
            </thead>
            <tbody>
              {batches.map((batch) => (
                <tr key={batch.id}>
                  <td><code class="id">{batch.id}</code></td>
                  <td>{batch.endpoint}</td>
                  <td>{batch.status}{batch.errors && batch.errors.data.length > 0 && (
                    <details><summary>{batch.errors.data.length} errors</summary>
                      <ul>{batch.errors.data.map((entry, index) => <li key={index}>{entry.line !== null && `line ${entry.line}: `}{entry.code}: {entry.message}</li>)}</ul>
                    </details>)}</td>
                  <td class="num">{batch.request_counts.completed} / {batch.request_counts.failed} / {batch.request_counts.total}</td>
                  <td class="num">{batch.usage?.cost ?? '—'}</td>
                  <td class="time">{utcTime(batch.created_at)}</td>
                  <td class="time">{ended(batch) == null ? '—' : utcTime(ended(batch)!)}</td>
                  <td><div class="actions">
                    {batch.output_file_id && <button type="button" class="secondary" aria-label={`Output of ${batch.id}`}
                      onClick={() => setShown({ id: batch.output_file_id!, label: `Output of ${batch.id}` })}>Output</button>}
                    {batch.error_file_id && <button type="button" class="secondary" aria-label={`Errors of ${batch.id}`}
                      onClick={() => setShown({ id: batch.error_file_id!, label: `Errors of ${batch.id}` })}>Errors</button>}
                    {!batch.output_file_id && !batch.error_file_id && '—'}
                  </div></td>
                  <td>
                    {CANCELLABLE_BATCH_STATUSES.includes(batch.status)
                      ? <button type="button" class="danger" aria-label={`Cancel ${batch.id}`} onClick={() => void cancel(batch)}>Cancel</button>
                      : '—'}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        {page && batches.length === 0 && <p>No batches.</p>}
        <Pager label="Batch pages" previousText="Newer" nextText="Older" {...pages.pager(page?.has_more ? batches.at(-1)?.id : undefined)} />
      </section>
      {shown && <FileContent file={shown} onClose={() => setShown(undefined)} />}
    </>
  );
}
