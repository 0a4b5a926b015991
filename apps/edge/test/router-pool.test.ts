import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RouterServiceService, type ChatRequest, type ChatResponse, type ChatStreamResponse } from '@gateway/proto';
import { parseGrpcTarget, startGrpcServer, type RunningGrpcServer } from '@gateway/platform';
import { eventually, testLogger } from '@gateway/testing';
import type { ChatRouter } from '../src/inference/router-exchange.js';
import { exchangeMember, resolverFor, RouterPool, type PoolMember } from '../src/inference/router-pool.js';
import { FakeRouter, chatResponse } from './fakes.js';

const logger = testLogger('router-pool-test');

function chatRequest(requestId: string): ChatRequest {
  return {
    context: { requestId, accountId: 'acct_1', keyId: 'key_1' },
    modelId: 'acme/chat-small',
    routingStrategy: 'balanced',
    endpoint: 'chat.completions',
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: 'hi' } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
    tools: [],
    stop: [],
    includeUsage: false,
    timeoutMs: 0,
  };
}

/** A member that answers at once, counting what it served, with a settable number of open exchanges. */
class FakeMember implements PoolMember {
  served = 0;
  openExchanges = 0;
  closed = false;
  readonly router: ChatRouter;
  constructor(readonly address: string, readonly lost: () => void) {
    this.router = {
      chat: async (request) => {
        this.served += 1;
        return { id: `${address}:${request.context!.requestId}` } as ChatResponse;
      },
      chatStream: async function* () {
        yield {} as ChatStreamResponse;
      },
    };
  }
  close() {
    this.closed = true;
  }
}

function poolOf(resolve: () => Promise<string[]>, now?: () => number) {
  const members = new Map<string, FakeMember>();
  const pool = RouterPool.start({
    resolve,
    member: (address, lost) => {
      const member = new FakeMember(address, lost);
      members.set(address, member);
      return member;
    },
    logger,
    resolveIntervalMs: 60_000,
    ...(now ? { now } : {}),
  });
  return { pool, members };
}

describe('routing targets', () => {
  it('parses the three forms and refuses anything else', () => {
    expect(parseGrpcTarget('routing:50054')).toEqual({ kind: 'single', address: 'routing:50054' });
    expect(parseGrpcTarget('ipv4:127.0.0.1:1,127.0.0.1:2')).toEqual({ kind: 'static', addresses: ['127.0.0.1:1', '127.0.0.1:2'] });
    expect(parseGrpcTarget('dns:///gw-routing-headless.gw.svc:50054')).toEqual({ kind: 'dns', host: 'gw-routing-headless.gw.svc', port: 50054 });
    for (const bad of ['routing', 'dns://routing:1', 'dns:///routing', 'ipv4:', 'ipv4:a:1,', 'http://routing:1', 'routing:99999']) {
      expect(parseGrpcTarget(bad), bad).toBeUndefined();
    }
  });

  it('resolves a dns:/// name to every address, IPv6 bracketed, without duplicates', async () => {
    const target = parseGrpcTarget('dns:///routing:50054');
    if (target?.kind !== 'dns') throw new Error('expected a dns target');
    const resolve = resolverFor(target, async () => [
      { address: '10.0.0.2', family: 4 }, { address: '10.0.0.1', family: 4 }, { address: '10.0.0.2', family: 4 }, { address: 'fd00::1', family: 6 },
    ]);
    expect(await resolve()).toEqual(['10.0.0.1:50054', '10.0.0.2:50054', '[fd00::1]:50054']);
  });
});

describe('RouterPool', () => {
  it('spreads exchanges round-robin over every resolved address', async () => {
    const { pool: started, members } = poolOf(async () => ['a:1', 'b:1', 'c:1']);
    const pool = await started;
    try {
      const answers = await Promise.all(Array.from({ length: 300 }, (_, index) => pool.chat(chatRequest(`r${index}`), {})));
      expect([...members.values()].map((member) => member.served)).toEqual([100, 100, 100]);
      expect(new Set(answers.slice(0, 3).map((answer) => answer.id.split(':')[0]))).toEqual(new Set(['a', 'b', 'c']));
    } finally {
      pool.close();
    }
  });

  it('skips a member whose call broke for the cool-down, and looks again soon', async () => {
    let clock = 1_000;
    let resolutions = 0;
    const { pool: started, members } = poolOf(async () => { resolutions += 1; return ['a:1', 'b:1']; }, () => clock);
    const pool = await started;
    try {
      members.get('a:1')!.lost();
      for (let index = 0; index < 10; index++) await pool.chat(chatRequest(`r${index}`), {});
      expect(members.get('a:1')!.served).toBe(0);
      expect(members.get('b:1')!.served).toBe(10);
      await eventually(() => expect(resolutions).toBe(2), 2_000, 20);
      clock += 2_001;
      for (let index = 0; index < 10; index++) await pool.chat(chatRequest(`s${index}`), {});
      expect(members.get('a:1')!.served).toBe(5);
    } finally {
      pool.close();
    }
  });

  it('adds new addresses, stops sending to vanished ones and closes them once their exchanges answered', async () => {
    let addresses = ['a:1', 'b:1'];
    const { pool: started, members } = poolOf(async () => addresses);
    const pool = await started;
    try {
      const a = members.get('a:1')!;
      a.openExchanges = 1;
      addresses = ['b:1', 'c:1'];
      await pool.refresh();
      expect(pool.addresses).toEqual(['b:1', 'c:1']);
      for (let index = 0; index < 10; index++) await pool.chat(chatRequest(`r${index}`), {});
      expect(a.served).toBe(0);
      expect(members.get('c:1')!.served).toBe(5);
      expect(a.closed).toBe(false);
      a.openExchanges = 0;
      await eventually(() => expect(a.closed).toBe(true), 3_000, 50);
      expect(members.get('b:1')!.closed).toBe(false);
    } finally {
      pool.close();
    }
  });

  it('keeps the known addresses when a resolution fails or finds none; refuses with UNAVAILABLE when it never had any', async () => {
    let answer: () => Promise<string[]> = async () => ['a:1'];
    const { pool: started } = poolOf(() => answer());
    const pool = await started;
    try {
      answer = async () => { throw new Error('SERVFAIL'); };
      await pool.refresh();
      answer = async () => [];
      await pool.refresh();
      expect(pool.addresses).toEqual(['a:1']);
    } finally {
      pool.close();
    }
    const { pool: emptyStarted } = poolOf(async () => { throw new Error('NXDOMAIN'); });
    const empty = await emptyStarted;
    try {
      expect(() => empty.chat(chatRequest('x'), {})).toThrow(/no routing address/);
    } finally {
      empty.close();
    }
  });
});

describe('RouterPool over real routing servers', () => {
  const routers: FakeRouter[] = [];
  const servers: RunningGrpcServer[] = [];

  beforeAll(async () => {
    for (let index = 0; index < 2; index++) {
      const router = new FakeRouter();
      router.chatAnswer = async (request) => chatResponse(request, `from ${index}`);
      routers.push(router);
      servers.push(await startGrpcServer({
        address: '127.0.0.1:0',
        services: [{ definition: RouterServiceService, implementation: router.implementation(logger), name: 'gateway.v1.RouterService' }],
        logger,
      }));
    }
  });

  afterAll(async () => {
    for (const server of servers) await server.stop(100);
  });

  let pool: RouterPool | undefined;
  afterEach(() => pool?.close());

  it('keeps one Exchange call per routing server and splits the requests between them', async () => {
    const target = parseGrpcTarget(`ipv4:${servers.map((server) => server.address).join(',')}`);
    if (target?.kind !== 'static') throw new Error('expected a static target');
    const fallback: ChatRouter = { chat: () => Promise.reject(new Error('no fallback')), chatStream: () => { throw new Error('no fallback'); } };
    pool = await RouterPool.start({ resolve: resolverFor(target), member: (address, lost, elsewhere) => exchangeMember(address, fallback, logger, {}, lost, elsewhere), logger });
    const before = routers.map((router) => router.exchangeCalls);
    const answers = await Promise.all(Array.from({ length: 200 }, (_, index) => pool!.chat(chatRequest(`r${index}`), {})));
    const counts = [0, 1].map((index) => answers.filter((answer) => answer.choices[0]!.message!.content === `from ${index}`).length);
    expect(counts).toEqual([100, 100]);
    expect(routers.map((router, index) => router.exchangeCalls - before[index]!)).toEqual([1, 1]);
  });

  it('a request (chat or stream) whose call found no connection is answered by the other server, once', async () => {
    const router = new FakeRouter();
    router.chatAnswer = async (request) => chatResponse(request, 'from live');
    const live = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [{ definition: RouterServiceService, implementation: router.implementation(logger), name: 'gateway.v1.RouterService' }],
      logger,
    });
    try {
      // The second address refuses connections: nobody listens there.
      const dead = await startGrpcServer({ address: '127.0.0.1:0', services: [], logger });
      const deadAddress = dead.address;
      await dead.stop(0);
      const target = parseGrpcTarget(`ipv4:${live.address},${deadAddress}`);
      if (target?.kind !== 'static') throw new Error('expected a static target');
      const fallback: ChatRouter = { chat: () => Promise.reject(new Error('no fallback')), chatStream: () => { throw new Error('no fallback'); } };
      pool = await RouterPool.start({ resolve: resolverFor(target), member: (address, lost, elsewhere) => exchangeMember(address, fallback, logger, {}, lost, elsewhere), logger });
      // Round-robin: the first goes to the live server, the stream to the dead one, which never got it.
      expect((await pool.chat(chatRequest('first'), {})).choices[0]!.message!.content).toBe('from live');
      const streamed: ChatStreamResponse[] = [];
      for await (const message of pool.chatStream({ chat: chatRequest('stream'), combinedStart: false }, {})) streamed.push(message);
      expect(streamed.length).toBeGreaterThan(0);
      const answers = await Promise.all(Array.from({ length: 10 }, (_, index) => pool!.chat(chatRequest(`c${index}`), {})));
      expect(answers.map((answer) => answer.choices[0]!.message!.content)).toEqual(Array(10).fill('from live'));
      expect(router.chats.map((chat) => chat.context!.requestId).sort()).toEqual(['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9', 'first', 'stream']);
    } finally {
      await live.stop(0);
    }
  });

  it('a server that went away gets no request: those that found no connection go to the other once; it is back once it listens again', async () => {
    // Servers of their own: this one stops one of them.
    const local: RunningGrpcServer[] = [];
    const localRouters: FakeRouter[] = [];
    const serve = async (index: number, address = '127.0.0.1:0') => {
      const router = new FakeRouter();
      router.chatAnswer = async (request) => chatResponse(request, `from ${index}`);
      localRouters[index] = router;
      local[index] = await startGrpcServer({
        address,
        services: [{ definition: RouterServiceService, implementation: router.implementation(logger), name: 'gateway.v1.RouterService' }],
        logger,
      });
    };
    await serve(0);
    await serve(1);
    try {
      const target = parseGrpcTarget(`ipv4:${local.map((server) => server.address).join(',')}`);
      if (target?.kind !== 'static') throw new Error('expected a static target');
      const fallback: ChatRouter = { chat: () => Promise.reject(new Error('no fallback')), chatStream: () => { throw new Error('no fallback'); } };
      pool = await RouterPool.start({ resolve: resolverFor(target), member: (address, lost, elsewhere) => exchangeMember(address, fallback, logger, {}, lost, elsewhere), logger, coolDownMs: 50 });
      await Promise.all(Array.from({ length: 4 }, (_, index) => pool!.chat(chatRequest(`warm${index}`), {})));
      const stoppedAddress = local[1]!.address;
      await local[1]!.stop(0);
      // Past the cool-down: the pool would have tried the stopped server again by now.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const content = async (id: string) => (await pool!.chat(chatRequest(id), {})).choices[0]!.message!.content;
      for (let index = 0; index < 20; index++) expect(await content(`after${index}`)).toBe('from 0');
      // Streams too: a stream that found no connection is sent to the other server before anything was read.
      const streamed: ChatStreamResponse[] = [];
      for await (const message of pool.chatStream({ chat: chatRequest('stream'), combinedStart: false }, {})) streamed.push(message);
      expect(streamed.length).toBeGreaterThan(0);
      // Each request reached one server once: none was lost, none answered twice.
      expect(localRouters[0]!.chats.filter((chat) => chat.context!.requestId.startsWith('after'))).toHaveLength(20);

      await serve(1, stoppedAddress);
      await eventually(async () => {
        const answers = await Promise.all(Array.from({ length: 4 }, (_, index) => content(`back${index}`)));
        expect(answers).toContain('from 1');
      }, 5_000, 100);
    } finally {
      for (const server of local) await server?.stop(0);
    }
  });
});
