import { Agent, createServer, request as httpRequest } from 'node:http';
import { serveUntilSignalled } from './serve-process.js';

/**
 * The reference: the least a Node proxy can do per request — node:http in, a keep-alive http.Agent
 * out, bodies piped both ways (streams flow chunk by chunk). Its own process.
 * argv[2]: upstream origin (http://127.0.0.1:PORT). Prints `{"ready":true,"port":N}`.
 */

const upstream = new URL(process.argv[2] ?? '');
const agent = new Agent({ keepAlive: true, maxSockets: 512, keepAliveMsecs: 30_000 });
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'host']);

const server = createServer({ keepAliveTimeout: 60_000 }, (request, response) => {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  const outgoing = httpRequest(
    { agent, hostname: upstream.hostname, port: upstream.port, method: request.method, path: request.url, headers },
    (upstreamResponse) => {
      const answerHeaders: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(upstreamResponse.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) answerHeaders[name] = value;
      response.writeHead(upstreamResponse.statusCode ?? 502, answerHeaders);
      upstreamResponse.pipe(response);
    },
  );
  outgoing.on('error', () => {
    if (!response.headersSent) response.writeHead(502);
    response.end();
  });
  request.pipe(outgoing);
});
serveUntilSignalled(server);
