import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consoleHandler } from './console-static.js';
import { toApiError } from './errors.js';

// The console's static files over real HTTP: headers, cache rules, client-route fallback, and nothing
// answered from outside the directory.
const root = mkdtempSync(join(tmpdir(), 'console-static-'));
const dist = join(root, 'dist');
mkdirSync(join(dist, 'assets'), { recursive: true });
writeFileSync(join(dist, 'index.html'), '<!doctype html><title>console</title>');
writeFileSync(join(dist, 'assets', 'index-AbC123.js'), 'console.info(1);');
writeFileSync(join(root, 'secret.txt'), 'outside the dist');

let server: Server;
let base = '';
beforeAll(async () => {
  const app = express();
  app.use('/console', consoleHandler(dist));
  // The edge's error table, as app.ts applies it.
  app.use((error: unknown, _request: Request, response: Response, _next: NextFunction) => {
    response.status(toApiError(error).status).json({ error: toApiError(error).message });
  });
  app.use((_request: Request, response: Response) => { response.status(404).end(); });
  server = app.listen(0, '127.0.0.1');
  await new Promise((done) => server.once('listening', done));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((done) => server.close(() => done())));

function expectConsoleHeaders(answer: globalThis.Response, label: string): void {
  expect(answer.headers.get('content-security-policy') ?? '', label).toContain("default-src 'self'");
  expect(answer.headers.get('x-content-type-options'), label).toBe('nosniff');
  expect(answer.headers.get('x-frame-options'), label).toBe('DENY');
}

describe('console static files', () => {
  it('serves index.html at /console/ with a strict CSP, nosniff and no-cache', async () => {
    const answer = await fetch(`${base}/console/`);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = answer.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
    expect(answer.headers.get('cache-control')).toBe('no-cache');
    expect(await answer.text()).toContain('<title>console</title>');
  });

  it('serves hashed assets as immutable with their type', async () => {
    const answer = await fetch(`${base}/console/assets/index-AbC123.js`);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(answer.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await answer.text()).toBe('console.info(1);');
  });

  it('answers client routes with index.html, a missing asset or file with 404', async () => {
    const route = await fetch(`${base}/console/keys`);
    expect(route.status).toBe(200);
    expect(route.headers.get('cache-control')).toBe('no-cache');
    expect(await route.text()).toContain('<title>console</title>');
    for (const path of ['/console/assets/missing-1.js', '/console/favicon.ico']) {
      const missing = await fetch(`${base}${path}`);
      expect(missing.status, path).toBe(404);
      // Issue 35 item 8: an error page under /console is one of the console's pages.
      expectConsoleHeaders(missing, path);
    }
  });

  it('answers 404 for anything outside the dist, however spelled', async () => {
    for (const path of ['/console/..%2fsecret.txt', '/console/%2e%2e/secret.txt', '/console/assets/..%2f..%2fsecret.txt', '/console/%00', '/console/%E0%A4%A']) {
      const answer = await fetch(`${base}${path}`);
      expect(answer.status, path).toBe(404);
      // fetch resolves `%2e%2e` itself: that request never reached /console.
      if (!path.includes('%2e%2e')) expectConsoleHeaders(answer, path);
      expect(await answer.text(), path).not.toContain('outside the dist');
    }
  });

  it('redirects /console to /console/ and leaves other methods to the app', async () => {
    const answer = await fetch(`${base}/console`, { redirect: 'manual' });
    expect(answer.status).toBe(301);
    expect(answer.headers.get('location')).toBe('/console/');
    expectConsoleHeaders(answer, '301 /console');
    const post = await fetch(`${base}/console/`, { method: 'POST' });
    expect(post.status).toBe(404);
    expectConsoleHeaders(post, 'POST /console/');
    const head = await fetch(`${base}/console/`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-security-policy')).toContain("default-src 'self'");
  });
});
