import { useEffect, useState } from 'preact/hooks';
import { api, errorText, type Model, type Startup } from '../api.js';
import { perMillion } from '../decimal.js';
import { TableWrap } from './table-wrap.js';

const price = (model: Model, field: string) => {
  const perToken = model.pricing?.[field];
  return perToken === undefined ? '—' : perMillion(perToken);
};

export function ModelsView() {
  const [models, setModels] = useState<Model[]>();
  const [startups, setStartups] = useState<Startup[]>([]);
  const [error, setError] = useState<string>();
  const [search, setSearch] = useState('');
  const [modality, setModality] = useState('');
  const [endpoint, setEndpoint] = useState('');

  useEffect(() => {
    Promise.all([api.models(), api.startups()])
      .then(([list, owners]) => { setModels(list.data); setStartups(owners.data); })
      .catch((failure) => setError(errorText(failure)));
  }, []);

  const all = models ?? [];
  const modalities = [...new Set(all.flatMap((model) => model.architecture?.input_modalities ?? []))].sort();
  const endpoints = [...new Set(all.flatMap((model) => model.supported_endpoints ?? []))].sort();
  const needle = search.trim().toLowerCase();
  const shown = all.filter((model) =>
    (needle === '' || `${model.id} ${model.display_name ?? ''} ${model.owned_by}`.toLowerCase().includes(needle))
    && (modality === '' || (model.architecture?.input_modalities ?? []).includes(modality))
    && (endpoint === '' || (model.supported_endpoints ?? []).includes(endpoint)));
  const startupOf = new Map(startups.map((startup) => [startup.id, startup]));

  return (
    <>
      <h1>Models</h1>
      {error && <p role="alert" class="error">{error}</p>}
      <section aria-labelledby="models-title" class="card">
        <h2 id="models-title">Catalog</h2>
        <div class="grid" role="search">
          <label>Search models<input type="search" value={search} onInput={(event) => setSearch((event.target as HTMLInputElement).value)} /></label>
          <label>Input modality
            <select value={modality} onChange={(event) => setModality((event.target as HTMLSelectElement).value)}>
              <option value="">any</option>
              {modalities.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
            </select>
          </label>
          <label>Endpoint
            <select value={endpoint} onChange={(event) => setEndpoint((event.target as HTMLSelectElement).value)}>
              <option value="">any</option>
              {endpoints.map((entry) => <option key={entry} value={entry}>{entry}</option>)}
            </select>
          </label>
        </div>
        <p aria-live="polite">{shown.length} of {all.length} models</p>
        <TableWrap label="Models table">
          <table aria-label="Models">
            <thead>
              <tr><th scope="col">Model</th><th scope="col">Startup</th><th scope="col" class="num">Context window</th>
                <th scope="col" class="num">Input per 1M tokens</th><th scope="col" class="num">Output per 1M tokens</th>
                <th scope="col">Modalities</th><th scope="col">Endpoints</th></tr>
            </thead>
            <tbody>
              {shown.map((model) => {
                const owner = startupOf.get(model.owned_by);
                return (
                  <tr key={model.id}>
                    <td><strong>{model.display_name ?? model.id}</strong><br /><code>{model.id}</code></td>
                    <td><span class="owner">{owner && <img src={owner.icon_url} alt="" width={20} height={20} />}{owner?.display_name ?? model.owned_by}</span></td>
                    <td class="num">{model.context_window ? model.context_window.toLocaleString('en') : '—'}</td>
                    <td class="num">{price(model, 'per_input_token')}</td>
                    <td class="num">{price(model, 'per_output_token')}</td>
                    <td>{(model.architecture?.input_modalities ?? []).join(', ')} → {(model.architecture?.output_modalities ?? []).join(', ')}</td>
                    <td>{(model.supported_endpoints ?? []).join(', ')}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </TableWrap>
        <p class="hint">Prices in credits per 1M tokens.</p>
      </section>
      <section aria-labelledby="startups-title" class="card">
        <h2 id="startups-title">Startups</h2>
        <ul class="startups">
          {startups.map((startup) => (
            <li key={startup.id}>
              <img src={startup.icon_url} alt={`${startup.display_name} logo`} width={40} height={40} />
              <span>{startup.display_name}</span>
            </li>
          ))}
        </ul>
      </section>
    </>
  );
}
