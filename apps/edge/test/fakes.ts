/**
 * Small scripted gRPC servers standing in for Auth, Catalog, Ledger and Router (the real services
 * are built in parallel). Real grpc-js servers on 127.0.0.1:0, speaking the proto contracts.
 */
import {
  AuthServiceService,
  CatalogServiceService,
  LedgerServiceService,
  RouterServiceService,
  type AcquireLeaseRequest,
  type AdmitRequest,
  type ChatRequest,
  type ChatResponse,
  type ChatStreamDelta,
  type ChatStreamResponse,
  type ExchangeRequest,
  type ExchangeResponse,
  type GetSnapshotResponse,
  type Model,
  type ReleaseRequest,
  type RenewLeasesRequest,
  type ReturnLeaseRequest,
  type RouterServiceServer,
  type VerifyApiKeyResponse,
} from '@gateway/proto';
import {
  ErrorReason,
  GatewayError,
  GrpcStatus,
  startGrpcServer,
  unary,
  type Logger,
  type RunningGrpcServer,
} from '@gateway/platform';

export const invalidApiKey = () => new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_API_KEY, 'Invalid API key.');

export class FakeAuth {
  readonly apiKeys = new Map<string, VerifyApiKeyResponse>();
  readonly provisioningKeys = new Map<string, string>();
  verifyCalls = 0;

  implementation(logger: Logger) {
    return {
      verifyApiKey: unary(logger, 'VerifyApiKey', async (request: { key: string }) => {
        this.verifyCalls++;
        const found = this.apiKeys.get(request.key);
        if (!found) throw invalidApiKey();
        return found;
      }),
      verifyProvisioningKey: unary(logger, 'VerifyProvisioningKey', async (request: { key: string }) => {
        const accountId = this.provisioningKeys.get(request.key);
        if (!accountId) {
          throw new GatewayError(GrpcStatus.UNAUTHENTICATED, ErrorReason.ERROR_REASON_INVALID_PROVISIONING_KEY, 'Invalid provisioning key.');
        }
        return { accountId, provisioningKeyId: `pk_${accountId}` };
      }),
    };
  }
}

export class FakeCatalog {
  snapshotCalls = 0;
  iconCalls = 0;
  constructor(public snapshot: GetSnapshotResponse) {}

  implementation(logger: Logger) {
    return {
      getSnapshot: unary(logger, 'GetSnapshot', async (request: { ifVersionNot: string }) => {
        this.snapshotCalls++;
        if (request.ifVersionNot === this.snapshot.version) {
          return { version: this.snapshot.version, unchanged: true, models: [], providers: [], startups: [], limitGroups: [] };
        }
        return this.snapshot;
      }),
      getStartupIcon: unary(logger, 'GetStartupIcon', async (request: { startupId: string }) => {
        this.iconCalls++;
        if (!this.snapshot.startups.some((startup) => startup.id === request.startupId)) {
          throw new GatewayError(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_NOT_FOUND, 'no such startup');
        }
        return { svg: Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg"><title>${request.startupId}</title></svg>`), provided: true };
      }),
    };
  }
}

export class FakeLedger {
  /** account id -> available balance (decimal credits). */
  readonly available = new Map<string, string>();
  readonly admits: AdmitRequest[] = [];
  readonly releases: ReleaseRequest[] = [];
  admitError: GatewayError | undefined;
  /** Refuses the Admit calls it answers an error for (after admitError). */
  refuseAdmit: ((request: AdmitRequest) => GatewayError | undefined) | undefined;
  /** Leases: each AcquireLease grants `leaseCredits` under a new id, with this admission window. */
  readonly acquisitions: AcquireLeaseRequest[] = [];
  readonly returns: ReturnLeaseRequest[] = [];
  readonly renewals: RenewLeasesRequest[] = [];
  leaseCredits = '1';
  renewWithinMs = 600;
  /** 'fail': RenewLeases answers UNAVAILABLE (a ledger restarting, or out of reach). */
  renewFailure: GatewayError | undefined;
  /** Lease ids RenewLeases answers as lost. */
  readonly lostLeases = new Set<string>();

  implementation(logger: Logger) {
    return {
      acquireLease: unary(logger, 'AcquireLease', async (request: AcquireLeaseRequest) => {
        this.acquisitions.push(request);
        return {
          leaseId: `lease-${this.acquisitions.length}`, grantedCredits: this.leaseCredits, expiresAtMs: BigInt(Date.now() + 45_000),
          grantedRequests: request.requestedRequests, requestsValidUntilMs: 0n, recalling: false, renewWithinMs: this.renewWithinMs, moreAvailable: false,
        };
      }),
      returnLease: unary(logger, 'ReturnLease', async (request: ReturnLeaseRequest) => {
        this.returns.push(request);
        return { returned: true, returnedCredits: '0' };
      }),
      renewLeases: unary(logger, 'RenewLeases', async (request: RenewLeasesRequest) => {
        this.renewals.push(request);
        if (this.renewFailure) throw this.renewFailure;
        return { lostLeaseIds: request.leaseIds.filter((id) => this.lostLeases.has(id)), renewWithinMs: this.renewWithinMs };
      }),
      admit: unary(logger, 'Admit', async (request: AdmitRequest) => {
        this.admits.push(request);
        if (this.admitError) throw this.admitError;
        const refusal = this.refuseAdmit?.(request);
        if (refusal) throw refusal;
        return { reservedCredits: request.paid ? '0.05' : '0', reservationExpiresAtMs: BigInt(Date.now() + 600_000) };
      }),
      release: unary(logger, 'Release', async (request: ReleaseRequest) => {
        this.releases.push(request);
        return { released: true };
      }),
      getBalance: unary(logger, 'GetBalance', async (request: { accountId: string }) => {
        const available = this.available.get(request.accountId) ?? '0';
        return { balance: available, available, reserved: '0' };
      }),
    };
  }
}

export type StreamScript = (request: ChatRequest) => AsyncIterable<ChatStreamResponse>;

export class FakeRouter {
  readonly chats: ChatRequest[] = [];
  /** ChatStreamRequest.combined_start of each stream call, in order. */
  readonly combinedStarts: boolean[] = [];
  streamCancelled = 0;
  /** Chats that came as their own Router.Chat / Router.ChatStream call (not as an exchange). */
  perCallChats = 0;
  /** Router.Exchange calls opened, and the cancel frames received on them. */
  exchangeCalls = 0;
  /** Exchange messages that carried several frames (ExchangeResponse.batch). */
  batchedMessages = 0;
  exchangeCancels = 0;
  /** Open Exchange calls: a test can drain them (as a router shutting down) or break them. */
  readonly openExchanges = new Set<Parameters<RouterServiceServer['exchange']>[0]>();
  /** Exchange calls the edge ended (half-closed) itself. */
  exchangeCallsEndedByCaller = 0;
  chatAnswer: (request: ChatRequest) => Promise<ChatResponse> = async (request) => chatResponse(request, 'Hello there.');
  streamScript: StreamScript = (request) => streamOf(request, ['Hel', 'lo', '!']);

  implementation(logger: Logger) {
    return {
      chat: unary(logger, 'Chat', async (request: ChatRequest) => {
        this.chats.push(request);
        this.perCallChats++;
        return this.chatAnswer(request);
      }),
      exchange: (call: Parameters<RouterServiceServer['exchange']>[0]) => this.exchange(call),
      // Written against grpc-js directly: platform's serverStream ends a failed stream with
      // call.destroy(error), which drops queued messages and never sends the status (reported).
      chatStream: (call: Parameters<RouterServiceServer['chatStream']>[0]) => {
        this.chats.push(call.request.chat as ChatRequest);
        this.combinedStarts.push(call.request.combinedStart);
        this.perCallChats++;
        call.on('cancelled', () => this.streamCancelled++);
        void (async () => {
          try {
            for await (const message of this.streamScript(call.request.chat as ChatRequest)) {
              if (call.cancelled) return;
              call.write(message);
            }
            call.end();
          } catch (error) {
            if (call.cancelled) return;
            const status = error instanceof GatewayError ? error.toStatusObject() : { code: GrpcStatus.INTERNAL, details: String(error) };
            call.emit('error', status);
          }
        })();
      },
    };
  }

  private exchange(call: Parameters<RouterServiceServer['exchange']>[0]): void {
    this.exchangeCalls++;
    this.openExchanges.add(call);
    const cancelled = new Set<number>();
    let open = 0;
    let halfClosed = false;
    // As the routing service: a caller that asks for batches gets the frames of one event-loop turn in one message.
    const batching = call.metadata.get('x-gateway-exchange-batch')[0] === '1';
    let gathered: ExchangeResponse[] = [];
    const flush = () => {
      const frames = gathered;
      gathered = [];
      if (frames.length === 0) return;
      if (frames.length === 1) call.write(frames[0]!);
      else {
        this.batchedMessages++;
        call.write({ exchangeId: 0, frame: undefined, batch: frames });
      }
    };
    const write = (response: ExchangeResponse) => {
      if (!batching) return call.write(response);
      gathered.push(response);
      if (gathered.length === 1) setImmediate(flush);
      return true;
    };
    const endIfIdle = () => {
      if (halfClosed && open === 0) {
        flush();
        call.end();
      }
    };
    call.on('end', () => {
      this.exchangeCallsEndedByCaller++;
      halfClosed = true;
      endIfIdle();
    });
    call.on('close', () => this.openExchanges.delete(call));
    call.on('error', () => this.openExchanges.delete(call));
    call.on('data', (request: ExchangeRequest) => {
      const id = request.exchangeId;
      const frame = request.frame;
      if (frame?.$case === 'cancel') {
        this.exchangeCancels++;
        this.streamCancelled++;
        cancelled.add(id);
        return;
      }
      if (!frame) return;
      open++;
      const done = () => {
        open--;
        endIfIdle();
      };
      if (frame.$case === 'chat') {
        this.chats.push(frame.value);
        this.chatAnswer(frame.value).then(
          (answer) => { if (!cancelled.has(id)) write({ exchangeId: id, frame: { $case: 'chat', value: answer }, batch: [] }); },
          (error: unknown) => { if (!cancelled.has(id)) write(failureFrame(id, error)); },
        ).finally(done);
        return;
      }
      const chat = frame.value.chat as ChatRequest;
      this.chats.push(chat);
      this.combinedStarts.push(frame.value.combinedStart);
      void (async () => {
        try {
          for await (const message of this.streamScript(chat)) {
            if (cancelled.has(id)) return;
            write({ exchangeId: id, frame: { $case: 'stream', value: message }, batch: [] });
          }
          if (!cancelled.has(id)) write({ exchangeId: id, frame: { $case: 'end', value: {} }, batch: [] });
        } catch (error) {
          if (!cancelled.has(id)) write(failureFrame(id, error));
        } finally {
          done();
        }
      })();
    });
  }

  /** As a router shutting down: every open Exchange call is told to take no new exchanges. */
  drainExchanges(): void {
    for (const call of this.openExchanges) call.write({ exchangeId: 0, frame: { $case: 'drain', value: {} }, batch: [] });
  }
}

/** The same scripts as Chat / ChatStream, answered as Router.Exchange frames (as the routing service does). */
function failureFrame(exchangeId: number, error: unknown): ExchangeResponse {
  const gatewayError = error instanceof GatewayError ? error : new GatewayError(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL, String(error));
  return { exchangeId, frame: { $case: 'failure', value: { status: gatewayError.status, detail: gatewayError.detail } }, batch: [] };
}

export function chatResponse(request: ChatRequest, content: string): ChatResponse {
  return {
    id: `chatcmpl-${request.context?.requestId ?? 'x'}`,
    modelId: request.modelId,
    created: 1_767_225_600n,
    choices: [{ index: 0, message: { content, toolCalls: [], reasoning: [], images: [] }, finishReason: 'stop', stopSequence: '' }],
    usage: usage(11, 3),
    providerId: 'acme-cloud',
    routingStrategy: request.routingStrategy,
    droppedParams: [],
  };
}

export function usage(inputTokens: number, outputTokens: number) {
  return {
    inputTokens,
    cachedInputTokens: 0,
    outputTokens,
    reasoningTokens: 0,
    inputAudioTokens: 0,
    outputAudioTokens: 0,
    inputAudioMs: 0,
    outputAudioMs: 0,
    outputTextTokens: 0,
    inputTextCharacters: 0,
    outputTextCharacters: 0,
    outputImageTokens: 0,
    inputImageTokens: 0,
    inputTextTokens: 0,
    estimated: false,
    cacheWriteTokens: 0,
  };
}

export function startEvent(request: ChatRequest): ChatStreamResponse {
  return {
    event: {
      $case: 'start',
      value: {
        id: `chatcmpl-${request.context?.requestId ?? 'x'}`,
        modelId: request.modelId,
        created: 1_767_225_600n,
        providerId: 'acme-cloud',
        routingStrategy: request.routingStrategy,
        droppedParams: [],
      },
    },
  };
}

export function delta(content: string, finishReason = ''): ChatStreamDelta {
  return { choiceIndex: 0, content, toolCalls: [], reasoning: '', reasoningSignature: '', finishReason, images: [], reasoningEncrypted: '', stopSequence: '' };
}

export function deltaEvent(content: string, finishReason = ''): ChatStreamResponse {
  return { event: { $case: 'delta', value: delta(content, finishReason) } };
}

export async function* streamOf(request: ChatRequest, pieces: readonly string[]): AsyncIterable<ChatStreamResponse> {
  yield startEvent(request);
  for (const [index, piece] of pieces.entries()) yield deltaEvent(piece, index === pieces.length - 1 ? 'stop' : '');
  yield { event: { $case: 'usage', value: usage(7, pieces.length) } };
}

export function model(overrides: Partial<Model> & { id: string }): Model {
  return {
    displayName: overrides.id,
    description: `The ${overrides.id} model.`,
    created: 1_767_225_600n,
    contextWindow: 128_000,
    aliases: [],
    inputModalities: ['text'],
    outputModalities: ['text'],
    supportedParameters: ['temperature', 'top_p', 'max_completion_tokens', 'stop', 'tools', 'tool_choice', 'response_format', 'stream_options'],
    pricing: { perInputToken: '0.0000005', perOutputToken: '0.0000015' },
    limitGroup: 'default',
    offers: [{ providerId: 'acme-cloud', upstreamModel: 'up', endpoints: ['chat.completions', 'messages'] }],
    voices: [],
    extraParameters: [],
    reasoningEfforts: [],
    audioFormats: [],
    ...overrides,
  };
}

export interface FakeServices {
  auth: FakeAuth;
  catalog: FakeCatalog;
  ledger: FakeLedger;
  router: FakeRouter;
  addresses: { authAddress: string; catalogAddress: string; ledgerAddress: string; routerAddress: string };
  stop(): Promise<void>;
}

export async function startFakeServices(snapshot: GetSnapshotResponse, logger: Logger): Promise<FakeServices> {
  const auth = new FakeAuth();
  const catalog = new FakeCatalog(snapshot);
  const ledger = new FakeLedger();
  const router = new FakeRouter();
  const servers: RunningGrpcServer[] = [];
  const start = async (definition: typeof AuthServiceService | typeof CatalogServiceService | typeof LedgerServiceService | typeof RouterServiceService, implementation: object, name: string) => {
    const server = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [{ definition, implementation: implementation as Parameters<typeof startGrpcServer>[0]['services'][number]['implementation'], name }],
      logger,
    });
    servers.push(server);
    return server.address;
  };
  const addresses = {
    authAddress: await start(AuthServiceService, auth.implementation(logger), 'gateway.v1.AuthService'),
    catalogAddress: await start(CatalogServiceService, catalog.implementation(logger), 'gateway.v1.CatalogService'),
    ledgerAddress: await start(LedgerServiceService, ledger.implementation(logger), 'gateway.v1.LedgerService'),
    routerAddress: await start(RouterServiceService, router.implementation(logger), 'gateway.v1.RouterService'),
  };
  return {
    auth,
    catalog,
    ledger,
    router,
    addresses,
    stop: async () => {
      for (const server of servers) await server.stop(100);
    },
  };
}
