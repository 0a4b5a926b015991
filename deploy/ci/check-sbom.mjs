#!/usr/bin/env node
// deploy/ci/images.sh: checks an image's SBOM (deploy/sbom.mjs) — CycloneDX 1.5 JSON, every component with a
// purl, the app's own workspace and its runtime libraries present, Debian's ffmpeg exactly in media and routing,
// and no npm ffmpeg build anywhere. Prints a one-line summary; exits 1 naming what is wrong.
//   node deploy/ci/check-sbom.mjs <sbom.cdx.json> <app>
import { readFileSync } from 'node:fs';

const [file, app] = process.argv.slice(2);
const bom = JSON.parse(readFileSync(file, 'utf8'));
const problems = [];
if (bom.bomFormat !== 'CycloneDX' || bom.specVersion !== '1.5') problems.push(`not CycloneDX 1.5 (${bom.bomFormat} ${bom.specVersion})`);
if (!/^urn:uuid:[0-9a-f-]{36}$/.test(bom.serialNumber ?? '')) problems.push('no serialNumber');
if (bom.metadata?.component?.name !== `inference-gateway-${app}`) problems.push(`metadata names ${bom.metadata?.component?.name}`);
const components = bom.components ?? [];
const names = new Set(components.map((component) => component.name));
for (const component of components) if (!component.purl || !component.version) problems.push(`${component.name}: no purl or version`);
for (const name of [`@gateway/${app}`, '@gateway/platform', '@gateway/proto', '@grpc/grpc-js', 'node', 'libc6']) {
  if (!names.has(name)) problems.push(`${name} missing`);
}
const debianFfmpeg = components.some((component) => component.name === 'ffmpeg' && component.purl.startsWith('pkg:deb/'));
if (debianFfmpeg !== (app === 'media' || app === 'routing')) problems.push(debianFfmpeg ? 'holds Debian ffmpeg' : 'no Debian ffmpeg');
if ([...names].some((name) => name.startsWith('@ffmpeg-installer/'))) problems.push('holds @ffmpeg-installer');
if (problems.length > 0) { console.error(problems.join('; ')); process.exit(1); }
const npm = components.filter((component) => component.purl.startsWith('pkg:npm/')).length;
const deb = components.filter((component) => component.purl.startsWith('pkg:deb/')).length;
console.log(`${components.length} components: ${npm} npm, ${deb} Debian`);
