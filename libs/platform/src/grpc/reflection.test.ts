import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { credentials, loadPackageDefinition, Server, ServerCredentials, type Client, type ClientDuplexStream } from '@grpc/grpc-js';
import { loadFileDescriptorSetFromBuffer, loadSync } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FILE_DESCRIPTOR_SET_BASE64 } from '@gateway/proto';
import { addReflection, describedPackages } from './reflection.js';

interface ReflectionResponse {
  listServicesResponse?: { service: Array<{ name: string }> };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}
type ReflectionClient = Client & { ServerReflectionInfo(): ClientDuplexStream<Record<string, string>, ReflectionResponse> };

const reflectionProto = join(dirname(createRequire(import.meta.url).resolve('@grpc/reflection')), '..', 'proto/grpc/reflection/v1/reflection.proto');
const { grpc } = loadPackageDefinition(loadSync(reflectionProto, { longs: String, enums: String, defaults: true })) as unknown as {
  grpc: { reflection: { v1: { ServerReflection: new (address: string, credentials: unknown) => ReflectionClient } } };
};

/** Every answer of one reflection stream to the requests, in order, as grpcurl's `list` and `describe` ask. */
async function ask(address: string, requests: Array<Record<string, string>>): Promise<ReflectionResponse[]> {
  const client = new grpc.reflection.v1.ServerReflection(address, credentials.createInsecure());
  try {
    const call = client.ServerReflectionInfo();
    const answers: ReflectionResponse[] = [];
    const done = new Promise<void>((resolve, reject) => {
      call.on('data', (answer: ReflectionResponse) => answers.push(answer));
      call.on('end', resolve);
      call.on('error', reject);
    });
    for (const request of requests) call.write(request);
    call.end();
    await done;
    return answers;
  } finally {
    client.close();
  }
}

async function serve(add: (server: Server) => void): Promise<{ address: string; server: Server }> {
  const server = new Server();
  add(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))));
  return { address: `127.0.0.1:${port}`, server };
}

const SERVICES = ['gateway.v1.AuthService', 'grpc.health.v1.Health'];
const REQUESTS: Array<Record<string, string>> = [
  { listServices: '*' },
  { fileContainingSymbol: 'gateway.v1.AuthService' },
  { fileContainingSymbol: 'gateway.v1.CreateAccountRequest' },
  { fileContainingSymbol: 'grpc.health.v1.Health' },
  { fileByFilename: 'gateway/v1/common.proto' },
  { fileContainingSymbol: 'gateway.v1.NoSuchThing' },
];

describe('server reflection', () => {
  let slim: { address: string; server: Server };
  let whole: { address: string; server: Server };

  beforeAll(async () => {
    slim = await serve((server) => addReflection(server, ['gateway.v1.AuthService']));
    // The package definition as proto-loader gives it, every definition with its own copy of the file list.
    const definition = { ...loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET_BASE64, 'base64')), ...loadSync(protoPath) };
    whole = await serve((server) => new ReflectionService(definition as ConstructorParameters<typeof ReflectionService>[0], { services: SERVICES }).addToServer(server));
  });
  afterAll(() => {
    slim?.server.forceShutdown();
    whole?.server.forceShutdown();
  });

  it('hands reflection each file list once', () => {
    const entries = Object.values(describedPackages());
    const lists = entries.map((entry) => (entry as { fileDescriptorProtos: Buffer[] }).fileDescriptorProtos);
    expect(new Set(lists).size).toBe(lists.length);
    expect(lists.flat().length).toBeGreaterThan(0);
  });

  it('answers list, describe by symbol and by file name exactly as reflection of the whole package definition does', async () => {
    const [answers, expected] = await Promise.all([ask(slim.address, REQUESTS), ask(whole.address, REQUESTS)]);
    expect(answers.map((answer) => answer.listServicesResponse?.service.map((service) => service.name).sort())[0]).toEqual([...SERVICES].sort());
    // The service's file is the gateway's own, and the unknown symbol is refused (NOT_FOUND).
    expect(answers[1]!.fileDescriptorResponse!.fileDescriptorProto.some((file) => file.toString('latin1').includes('AuthService'))).toBe(true);
    expect(answers[5]!.errorResponse?.errorCode).toBe(5);
    const shape = (list: ReflectionResponse[]) => list.map((answer) => ({
      services: answer.listServicesResponse?.service.map((service) => service.name).sort(),
      files: answer.fileDescriptorResponse?.fileDescriptorProto.map((file) => file.toString('base64')).sort(),
      error: answer.errorResponse?.errorCode,
    }));
    expect(shape(answers)).toEqual(shape(expected));
  });
});
