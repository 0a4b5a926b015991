#!/usr/bin/env node
// Static checks for the chart, quick and without a template engine (apps/standalone/test/helm-chart.test.ts
// renders it with helm or chart-render and validates the output). Run from anywhere:
// node helm/gateway/ci/check-chart.mjs
//  1. Chart.yaml and values.yaml parse; Chart.yaml has the apiVersion v2 fields; catalogConfig parses.
//  2. Every `.Values.a.b` path a template names exists in values.yaml (a missing key renders as
//     nothing, which Kubernetes often accepts silently).
//  3. Every `include`/`template` names a defined template; `{{ }}` and if/range/with/define/end balance.
//  4. Every server app under apps/ has a Deployment (routing: a StatefulSet) and a Service running
//     `node apps/<app>/dist/main.js`, and an hpa and pdb section in values.yaml.
//  5. Every chart file a template reads (`.Files.Get "path"`) exists outside templates/ (a missing one reads
//     as ""), and every JSON file of the chart (the Grafana dashboard) parses.
// Values nobody references are listed as warnings. Exit code 1 on any error.
import { readdirSync, readFileSync, existsSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseDocument } from 'yaml';

const chartDir = dirname(dirname(fileURLToPath(import.meta.url)));
const repoRoot = join(chartDir, '..', '..');
const errors = [];
const warnings = [];
const where = (file) => relative(process.cwd(), file);

function parseYamlFile(file) {
  const document = parseDocument(readFileSync(file, 'utf8'), { merge: true });
  for (const problem of document.errors) errors.push(`${where(file)}: ${problem.message}`);
  return document.toJS();
}

// --- 1. Chart.yaml, values.yaml ---
const chart = parseYamlFile(join(chartDir, 'Chart.yaml')) ?? {};
if (chart.apiVersion !== 'v2') errors.push(`Chart.yaml: apiVersion must be v2, is ${chart.apiVersion}`);
for (const field of ['name', 'version', 'appVersion']) {
  if (typeof chart[field] !== 'string' || chart[field] === '') errors.push(`Chart.yaml: ${field} must be a non-empty string`);
}
if (typeof chart.version === 'string' && !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/.test(chart.version)) {
  errors.push(`Chart.yaml: version ${chart.version} is not SemVer 2`);
}
const values = parseYamlFile(join(chartDir, 'values.yaml')) ?? {};
if (typeof values.catalogConfig === 'string') {
  try {
    const catalog = parse(values.catalogConfig);
    for (const list of ['providers', 'models']) {
      if (!Array.isArray(catalog?.[list])) errors.push(`values.yaml: catalogConfig has no ${list} list`);
    }
  } catch (error) {
    errors.push(`values.yaml: catalogConfig is not YAML: ${error.message}`);
  }
} else {
  errors.push('values.yaml: catalogConfig must be a YAML string');
}
const SERVICES = ['edge', 'auth', 'catalog', 'ledger', 'routing', 'media'];
for (const app of SERVICES) {
  const hpa = values[app]?.hpa;
  if (!hpa || !(hpa.minReplicas >= 1 && hpa.minReplicas <= hpa.maxReplicas)) {
    errors.push(`values.yaml: ${app}.hpa needs 1 <= minReplicas <= maxReplicas`);
  }
  if (!values[app]?.pdb) errors.push(`values.yaml: ${app} has no pdb section`);
}

// --- 2./3. templates ---
const templatesDir = join(chartDir, 'templates');
const templateFiles = readdirSync(templatesDir)
  .map((name) => join(templatesDir, name))
  .filter((file) => statSync(file).isFile());
const sources = new Map(templateFiles.map((file) => [file, readFileSync(file, 'utf8')]));

const defined = new Set();
const referencedPaths = new Set();
const aliases = new Map();
for (const [file, text] of sources) {
  const withoutComments = text.replace(/\{\{-?\s*\/\*[\s\S]*?\*\/\s*-?\}\}/g, '');
  const opens = (withoutComments.match(/\{\{/g) ?? []).length;
  const closes = (withoutComments.match(/\}\}/g) ?? []).length;
  if (opens !== closes) errors.push(`${where(file)}: ${opens} '{{' but ${closes} '}}'`);

  let depth = 0;
  for (const action of withoutComments.matchAll(/\{\{-?\s*([\s\S]*?)\s*-?\}\}/g)) {
    const body = action[1];
    const keyword = body.match(/^(if|range|with|define|block|else|end)\b/)?.[1];
    if (keyword && ['if', 'range', 'with', 'define', 'block'].includes(keyword)) depth += 1;
    if (keyword === 'end') depth -= 1;
    if (depth < 0) { errors.push(`${where(file)}: {{ end }} without an opening block`); depth = 0; }
    const definition = body.match(/^define\s+"([^"]+)"/);
    if (definition) {
      if (defined.has(definition[1])) errors.push(`${where(file)}: template "${definition[1]}" defined twice`);
      defined.add(definition[1]);
    }
    for (const match of body.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
      referencedPaths.add(JSON.stringify({ path: match[1].slice(1), file }));
    }
    // Variables standing for a values subtree: `$x := .Values.a.b`, and `$x := index $.Values $component`
    // (or `(index $.Values $component).port`), which stands for every service's section at once.
    for (const match of body.matchAll(/\$([A-Za-z_]\w*)\s*:=\s*\$?\.Values((?:\.[A-Za-z_]\w*)+)\s*$/g)) {
      aliases.set(`${file}:${match[1]}`, [match[2].slice(1)]);
    }
    for (const match of body.matchAll(/\$([A-Za-z_]\w*)\s*:=\s*index\s+\$?\.Values\s+\$\w+\s*$/g)) {
      aliases.set(`${file}:${match[1]}`, SERVICES);
    }
    for (const match of body.matchAll(/\(index\s+\$?\.Values\s+\$\w+\)((?:\.[A-Za-z_]\w*)+)/g)) {
      for (const app of SERVICES) referencedPaths.add(JSON.stringify({ path: `${app}${match[1]}`, file }));
    }
    for (const match of body.matchAll(/\$([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)/g)) {
      for (const base of aliases.get(`${file}:${match[1]}`) ?? []) {
        referencedPaths.add(JSON.stringify({ path: `${base}${match[2]}`, file }));
      }
    }
  }
  if (depth !== 0) errors.push(`${where(file)}: ${depth} block(s) not closed with {{ end }}`);
}
for (const [file, text] of sources) {
  for (const match of text.matchAll(/\b(?:include|template)\s+"([^"]+)"/g)) {
    if (!defined.has(match[1])) errors.push(`${where(file)}: uses undefined template "${match[1]}"`);
  }
}

const used = [];
for (const entry of referencedPaths) {
  const { path, file } = JSON.parse(entry);
  const keys = path.split('.');
  used.push(keys);
  let node = values;
  for (let index = 0; index < keys.length; index += 1) {
    const isMap = node !== null && typeof node === 'object' && !Array.isArray(node);
    if (!isMap || !Object.hasOwn(node, keys[index])) {
      errors.push(`${where(file)}: .Values.${path} is not in values.yaml (no '${keys.slice(0, index + 1).join('.')}')`);
      break;
    }
    node = node[keys[index]];
  }
}

// Values leaves no template reaches (directly or through a referenced ancestor).
function leaves(node, prefix = []) {
  if (node === null || typeof node !== 'object' || Array.isArray(node) || Object.keys(node).length === 0) return [prefix];
  return Object.entries(node).flatMap(([key, child]) => leaves(child, [...prefix, key]));
}
for (const leaf of leaves(values)) {
  const reached = used.some((keys) => keys.length <= leaf.length && keys.every((key, index) => leaf[index] === key));
  if (!reached) warnings.push(`values.yaml: ${leaf.join('.')} is referenced by no template`);
}

// --- 4. one Deployment + Service per server app ---
const appsDir = join(repoRoot, 'apps');
const serverApps = existsSync(appsDir)
  // A server app has a main entry; apps/console is static files the edge serves, gatewayctl a CLI, and the
  // composition roots (nx tag type:composition: apps/standalone's `npm start`, apps/clients-test) are not deployed.
  ? readdirSync(appsDir).filter((name) => name !== 'gatewayctl' && statSync(join(appsDir, name)).isDirectory()
      && existsSync(join(appsDir, name, 'src/main.ts'))
      && !(JSON.parse(readFileSync(join(appsDir, name, 'package.json'), 'utf8')).nx?.tags ?? []).includes('type:composition'))
  : [];
for (const app of serverApps) {
  const owners = [...sources].filter(([, text]) => text.includes(`apps/${app}/dist/main.js`) && /kind:\s*(Deployment|StatefulSet)\b/.test(text));
  if (owners.length !== 1) { errors.push(`apps/${app}: expected one Deployment or StatefulSet template running it, found ${owners.length}`); continue; }
  if (!/kind:\s*Service\b/.test(owners[0][1])) errors.push(`${where(owners[0][0])}: no Service beside the ${app} Deployment`);
  if (!values[app]) errors.push(`values.yaml: no '${app}' section`);
}

// --- 5. chart files the templates read ---
for (const [file, text] of sources) {
  for (const match of text.matchAll(/\.Files\.Get(?:Bytes)?\s+"([^"]+)"/g)) {
    const target = join(chartDir, match[1]);
    if (match[1].startsWith('templates/') || !existsSync(target)) errors.push(`${where(file)}: .Files.Get "${match[1]}" names no file of the chart`);
  }
}
const jsonFiles = (directory) => readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
  const path = join(directory, entry.name);
  if (entry.isDirectory()) return entry.name === 'ci' || entry.name === 'templates' ? [] : jsonFiles(path);
  return entry.name.endsWith('.json') ? [path] : [];
});
for (const file of jsonFiles(chartDir)) {
  try {
    JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    errors.push(`${where(file)}: not JSON: ${error.message}`);
  }
}

for (const warning of warnings) console.log(`warning: ${warning}`);
for (const error of errors) console.log(`error: ${error}`);
console.log(
  `check-chart: ${sources.size} templates, ${defined.size} defined templates, ${new Set(used.map((keys) => keys.join('.'))).size} values paths, ` +
  `${serverApps.length} server apps; ${errors.length} error(s), ${warnings.length} warning(s)`,
);
process.exit(errors.length === 0 ? 0 : 1);
