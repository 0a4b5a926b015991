import { afterEach, describe, expect, it } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { JetStreamPublisher, JetStreamPublishError } from '@gateway/platform';
import { natsUrl, uniqueName } from './infra.js';

// The usage path's JetStream publish (one reply subscription, no request object per publish) against the
// real server: stored, deduplicated by msg-id, and every way it can fail ends in a typed rejection.
describe('JetStreamPublisher', () => {
  let connection: NatsConnection;
  let streamName = '';
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function withStream(options: { maxMsgSize?: number } = {}): Promise<string> {
    connection = await connect({ servers: natsUrl, noAsyncTraces: true });
    cleanups.push(() => connection.close());
    const subject = uniqueName('jsp').replaceAll('_', '-');
    streamName = subject.toUpperCase().replaceAll('-', '_');
    const manager = await jetstreamManager(connection);
    await manager.streams.add({ name: streamName, subjects: [`${subject}.>`], ...(options.maxMsgSize ? { max_msg_size: options.maxMsgSize } : {}) });
    cleanups.push(async () => { await manager.streams.delete(streamName).catch(() => undefined); });
    return subject;
  }

  const failure = async (promise: Promise<unknown>): Promise<JetStreamPublishError> => {
    const error = await promise.then(() => undefined, (rejected: unknown) => rejected);
    expect(error).toBeInstanceOf(JetStreamPublishError);
    return error as JetStreamPublishError;
  };

  it('stores every message once per msg-id, also when many are in flight at once', async () => {
    const subject = await withStream();
    const publisher = new JetStreamPublisher(connection);
    cleanups.push(() => publisher.close());
    const publishes = Array.from({ length: 300 }, (_, index) =>
      publisher.publish(`${subject}.usage`, new TextEncoder().encode(`event ${index % 200}`), `id-${index % 200}`));
    await Promise.all(publishes);
    expect(publisher.pending).toBe(0);
    const info = await (await jetstreamManager(connection)).streams.info(streamName);
    expect(info.state.messages).toBe(200);
  });

  it('rejects with 503 when no stream stores the subject', async () => {
    await withStream();
    const publisher = new JetStreamPublisher(connection);
    cleanups.push(() => publisher.close());
    const error = await failure(publisher.publish(`${uniqueName('nowhere')}.usage`, new Uint8Array([1]), 'lost-1'));
    expect(error.code).toBe(503);
    expect(publisher.pending).toBe(0);
  });

  it("rejects with the server's error when the stream refuses the message", async () => {
    const subject = await withStream({ maxMsgSize: 128 });
    const publisher = new JetStreamPublisher(connection);
    cleanups.push(() => publisher.close());
    const error = await failure(publisher.publish(`${subject}.usage`, new Uint8Array(512), 'big-1'));
    expect(error.code).not.toBe(503);
    expect(error.code).toBeGreaterThanOrEqual(400);
    expect(error.message).toMatch(/refused/);
    await publisher.publish(`${subject}.usage`, new Uint8Array(8), 'small-1');
  });

  it('times out when nothing acknowledges, and close rejects what still waits', async () => {
    await withStream();
    // A responder that never answers: the server has someone to deliver to, so no 503 comes back.
    const silent = `${uniqueName('silent')}.usage`;
    const listener = connection.subscribe(silent);
    cleanups.push(() => listener.unsubscribe());
    await connection.flush();
    const publisher = new JetStreamPublisher(connection, 300);
    const startedAt = Date.now();
    const timedOut = await failure(publisher.publish(silent, new Uint8Array([1]), 'slow-1'));
    expect(timedOut.code).toBe(408);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(300);
    expect(publisher.pending).toBe(0);

    const waiting = publisher.publish(silent, new Uint8Array([2]), 'slow-2');
    expect(publisher.pending).toBe(1);
    publisher.close();
    expect((await failure(waiting)).code).toBe(0);
    expect((await failure(publisher.publish(silent, new Uint8Array([3]), 'slow-3'))).code).toBe(0);
  });
});
