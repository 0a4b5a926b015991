#!/usr/bin/env node
// Deletes the JetStream streams of one NATS_NAMESPACE (streams whose subjects all start with
// "<namespace>."), so a CI run leaves nothing on the machine's NATS.
//   node deploy/ci/nats-namespace.mjs delete NAMESPACE     (NATS_URL, default nats://127.0.0.1:4222)
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';

const [command, namespace] = process.argv.slice(2);
if (command !== 'delete' || !namespace) {
  process.stderr.write('usage: nats-namespace.mjs delete NAMESPACE\n');
  process.exit(2);
}
const connection = await connect({ servers: process.env.GATEWAY_NATS_URL ?? 'nats://127.0.0.1:4222' });
try {
  const manager = await jetstreamManager(connection);
  const doomed = [];
  for await (const stream of manager.streams.list()) {
    const subjects = stream.config.subjects ?? [];
    if (subjects.length > 0 && subjects.every((subject) => subject.startsWith(`${namespace}.`))) doomed.push(stream.config.name);
  }
  for (const name of doomed) await manager.streams.delete(name);
  process.stdout.write(`deleted ${doomed.length} stream(s) of namespace ${namespace}${doomed.length ? `: ${doomed.join(', ')}` : ''}\n`);
} finally {
  await connection.close();
}
