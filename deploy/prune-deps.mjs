#!/usr/bin/env node
// Run in the Dockerfile's prod-deps stage after `npm ci --omit=dev --workspace=...`: removes from
// node_modules every package that the production dependencies of the named workspaces do not reach.
// npm's workspace filter keeps more than that: a workspace's devDependencies that are themselves
// workspaces (libs/testing) bring their own dependencies (ffmpeg, pngjs, @anthropic-ai/sdk), which
// --omit=dev does not count as dev because another workspace depends on them for production.
//   node deploy/prune-deps.mjs apps/edge libs/platform libs/proto        (in the install's root)
import { existsSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const root = process.cwd();
const reached = new Set();

/** Where node would find `name` from the package in `from` (its node_modules, then each parent's). */
function locate(name, from) {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return realpathSync(candidate);
    if (dir === root || dir === dirname(dir)) return undefined;
  }
}

function walk(dir, withOptional = true) {
  if (reached.has(dir)) return;
  reached.add(dir);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const names = [
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.peerDependencies ?? {}),
    ...(withOptional ? Object.keys(manifest.optionalDependencies ?? {}) : []),
  ];
  for (const name of names) {
    const found = locate(name, dir);
    // An optional dependency for another platform (or an unmet optional peer) is simply absent.
    if (found) walk(found);
  }
}

for (const workspace of process.argv.slice(2)) walk(realpathSync(resolve(root, workspace)));

const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
let removed = 0;
for (const path of Object.keys(lock.packages)) {
  if (!path.includes('node_modules/')) continue;
  const absolute = join(root, path);
  if (!existsSync(absolute)) continue;
  if (reached.has(realpathSync(absolute))) continue;
  rmSync(absolute, { recursive: true, force: true });
  removed += 1;
}
// Scope folders left empty (node_modules/@ffmpeg-installer once its packages are gone).
for (const entry of readdirSync(join(root, 'node_modules'))) {
  const scope = join(root, 'node_modules', entry);
  if (entry.startsWith('@') && readdirSync(scope).length === 0) rmSync(scope, { recursive: true });
}
// Links to command-line tools: nothing at run time uses them, and some now point at removed packages.
rmSync(join(root, 'node_modules', '.bin'), { recursive: true, force: true });
console.log(`prune-deps: kept ${reached.size} packages (workspaces included), removed ${removed}`);
