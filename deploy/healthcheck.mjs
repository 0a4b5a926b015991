#!/usr/bin/env node
// Container health probe for docker-compose (Kubernetes uses its native grpc/httpGet probes instead).
// There is no grpc_health_probe binary in the image, so this asks the standard grpc.health.v1 service
// with the same grpc-js + grpc-health-check packages the services themselves use.
//
//   node deploy/healthcheck.mjs grpc 127.0.0.1:50051 [service-name]   exit 0 when SERVING
//   node deploy/healthcheck.mjs http http://127.0.0.1:8080/healthz      exit 0 on a 2xx answer
//   node deploy/healthcheck.mjs tcp 127.0.0.1:5432                      exit 0 when the port accepts a connection
//                                 (the stand-ins of deploy/docker-compose.host.yaml for the machine's Postgres and NATS)
import { connect } from 'node:net';
import grpc from '@grpc/grpc-js';
import healthCheck from 'grpc-health-check';

const timeoutMs = Number(process.env.HEALTHCHECK_TIMEOUT_MS ?? 2_000);
const [kind, target, serviceName = ''] = process.argv.slice(2);

function finish(healthy, detail) {
  if (!healthy) process.stderr.write(`unhealthy: ${detail}\n`);
  process.exit(healthy ? 0 : 1);
}

if (kind === 'grpc' && target) {
  const HealthClient = grpc.makeClientConstructor(healthCheck.service, 'grpc.health.v1.Health');
  const client = new HealthClient(target, grpc.credentials.createInsecure());
  client.Check({ service: serviceName }, { deadline: Date.now() + timeoutMs }, (error, response) => {
    client.close();
    if (error) finish(false, `${target}: ${error.message}`);
    else finish(response?.status === 'SERVING', `${target}: status ${response?.status}`);
  });
} else if (kind === 'http' && target) {
  fetch(target, { signal: AbortSignal.timeout(timeoutMs) }).then(
    (response) => finish(response.ok, `${target}: HTTP ${response.status}`),
    (error) => finish(false, `${target}: ${error.message}`),
  );
} else if (kind === 'tcp' && target) {
  const separator = target.lastIndexOf(':');
  const socket = connect({ host: target.slice(0, separator), port: Number(target.slice(separator + 1)), timeout: timeoutMs });
  socket.once('connect', () => { socket.destroy(); finish(true, target); });
  socket.once('timeout', () => { socket.destroy(); finish(false, `${target}: timed out`); });
  socket.once('error', (error) => finish(false, `${target}: ${error.message}`));
} else {
  finish(false, 'usage: healthcheck.mjs grpc HOST:PORT [SERVICE] | http URL | tcp HOST:PORT');
}
