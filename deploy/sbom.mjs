#!/usr/bin/env node
// Run in the Dockerfile's runtime stage: the image's CycloneDX SBOM, from what the image holds — every npm
// package under /app/node_modules (nested copies too; workspace links resolved to the workspace), the Node
// runtime, and every installed Debian package (ffmpeg and its libraries in the media and routing images).
// `npm sbom` cannot make it: it refuses a tree whose dev dependencies were left out (ESBOMPROBLEMS on each
// missing one, also with --omit dev), and the images hold production dependencies only
// (docs/design-departures.md).
//   node deploy/sbom.mjs <app> > /app/sbom.cdx.json          (from /app)
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';

const app = process.argv[2] ?? 'app';
const root = process.cwd();
const components = new Map();

function addNpm(dir) {
  const real = realpathSync(dir);
  let manifest;
  try { manifest = JSON.parse(readFileSync(join(real, 'package.json'), 'utf8')); } catch { return; }
  if (!manifest.name || !manifest.version) return;
  const purl = `pkg:npm/${manifest.name.replace(/^@/, '%40')}@${manifest.version}`;
  if (!components.has(purl)) {
    const license = typeof manifest.license === 'string' ? manifest.license : manifest.license?.type;
    components.set(purl, {
      type: 'library', 'bom-ref': purl, name: manifest.name, version: manifest.version, purl,
      ...(license ? { licenses: [{ expression: license }] } : {}),
    });
  }
  const nested = join(real, 'node_modules');
  if (existsSync(nested)) walk(nested);
}

function walk(modules) {
  for (const entry of readdirSync(modules, { withFileTypes: true })) {
    if (entry.name.startsWith('.')) continue;
    const path = join(modules, entry.name);
    if (entry.name.startsWith('@')) {
      for (const scoped of readdirSync(path)) addNpm(join(path, scoped));
    } else {
      addNpm(path);
    }
  }
}
walk(join(root, 'node_modules'));
const npmCount = components.size;

const osRelease = Object.fromEntries(readFileSync('/etc/os-release', 'utf8').split('\n')
  .map((line) => line.match(/^(\w+)=(.*)$/)).filter(Boolean).map((match) => [match[1], match[2].replace(/^"|"$/g, '')]));
const distro = `${osRelease.ID ?? 'debian'}-${osRelease.VERSION_ID ?? ''}`;
// /var/lib/dpkg/status: paragraphs of "Field: value" lines; only installed packages count.
let debianCount = 0;
for (const paragraph of readFileSync('/var/lib/dpkg/status', 'utf8').split('\n\n')) {
  const fields = Object.fromEntries(paragraph.split('\n').map((line) => line.match(/^([\w-]+): (.*)$/)).filter(Boolean).map((match) => [match[1], match[2]]));
  if (!fields.Package || !/ installed$/.test(fields.Status ?? '')) continue;
  const purl = `pkg:deb/${osRelease.ID ?? 'debian'}/${encodeURIComponent(fields.Package)}@${encodeURIComponent(fields.Version)}?arch=${fields.Architecture}&distro=${distro}`;
  components.set(purl, { type: 'library', 'bom-ref': purl, name: fields.Package, version: fields.Version, purl,
    ...(fields.Maintainer ? { supplier: { name: fields.Maintainer } } : {}) });
  debianCount += 1;
}
const node = `pkg:generic/node@${process.versions.node}`;
components.set(node, { type: 'application', 'bom-ref': node, name: 'node', version: process.versions.node, purl: node });

const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version ?? '0.0.0';
const bom = {
  bomFormat: 'CycloneDX', specVersion: '1.5', serialNumber: `urn:uuid:${randomUUID()}`, version: 1,
  metadata: {
    timestamp: new Date().toISOString(),
    tools: { components: [{ type: 'application', name: 'deploy/sbom.mjs' }] },
    component: { type: 'container', 'bom-ref': `inference-gateway-${app}`, name: `inference-gateway-${app}`, version },
  },
  components: [...components.values()],
};
process.stdout.write(`${JSON.stringify(bom, null, 2)}\n`);
process.stderr.write(`sbom: ${components.size} components (${npmCount} npm, ${debianCount} Debian, node ${process.versions.node})\n`);
