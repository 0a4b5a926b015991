import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { edgeErrors } from './errors.js';

/**
 * The web console (apps/console), served at /console/ from its built files on disk: the edge imports no
 * console code. Default: the console's dist next to this package in the repository (and in the edge image,
 * deploy/Dockerfile); EDGE_CONSOLE_DIR names another directory.
 */
export const DEFAULT_CONSOLE_DIR = fileURLToPath(new URL('../../console/dist/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Only our own files, no inline script or style element, no framing. Style attributes set through the
 * DOM (the chart's, Preact's) are CSSOM and not governed by style-src.
 */
const CONTENT_SECURITY_POLICY = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/** Vite names every bundled file by its content under assets/: such a URL never changes meaning. */
const IMMUTABLE = 'public, max-age=31536000, immutable';

export function consoleHandler(directory: string) {
  const root = resolve(directory);
  const index = join(root, 'index.html');
  return async (request: Request, response: Response, next: NextFunction): Promise<void> => {
    // Every answer under /console carries them, the 301 and every error too (a 404 page is a page).
    setConsoleSecurityHeaders(response);
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      next();
      return;
    }
    // Mounted at /console: request.path is the rest ("/" for /console/, "" never: express gives "/").
    if (request.originalUrl.split('?')[0] === '/console') {
      response.redirect(301, '/console/');
      return;
    }
    try {
      let relative: string;
      try {
        relative = decodeURIComponent(request.path);
      } catch {
        throw edgeErrors.notFound('No such console file.');
      }
      const wanted = resolve(root, `.${relative}`);
      if (relative.includes('\0') || (wanted !== root && !wanted.startsWith(root + sep))) throw edgeErrors.notFound('No such console file.');
      let file = relative.endsWith('/') ? index : wanted;
      let size = await fileSize(file);
      // A client route (/console/keys): the app's page, which reads its own location. A file name with an
      // extension, or anything under assets/, is a file that must exist.
      if (size === undefined && !relative.startsWith('/assets/') && extname(relative) === '') {
        file = index;
        size = await fileSize(file);
      }
      if (size === undefined) throw edgeErrors.notFound(file === index ? 'The console is not built (npm run build).' : 'No such console file.');
      response.setHeader('content-type', TYPES[extname(file)] ?? 'application/octet-stream');
      response.setHeader('content-length', size);
      response.setHeader('cache-control', relative.startsWith('/assets/') && file !== index ? IMMUTABLE : 'no-cache');
      if (request.method === 'HEAD') {
        response.end();
        return;
      }
      await new Promise<void>((done, fail) => {
        const stream = createReadStream(file);
        stream.once('error', fail);
        response.once('close', () => { stream.destroy(); done(); });
        stream.pipe(response);
      });
    } catch (error) {
      next(error);
    }
  };
}

/** The console's security headers: its CSP, no sniffing, no framing, no referrer. */
export function setConsoleSecurityHeaders(response: ServerResponse): void {
  response.setHeader('content-security-policy', CONTENT_SECURITY_POLICY);
  response.setHeader('x-content-type-options', 'nosniff');
  response.setHeader('x-frame-options', 'DENY');
  response.setHeader('referrer-policy', 'no-referrer');
}

/** Whether a request path is the console's (its answers carry the console's headers, whoever answers). */
export function isConsolePath(path: string): boolean {
  return path === '/console' || path.startsWith('/console/');
}

async function fileSize(path: string): Promise<number | undefined> {
  try {
    const found = await stat(path);
    return found.isFile() ? found.size : undefined;
  } catch {
    return undefined;
  }
}
