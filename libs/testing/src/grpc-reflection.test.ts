import { Server, ServerCredentials } from '@grpc/grpc-js';
import { loadFileDescriptorSetFromBuffer, loadSync } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGrpcServer, type RunningGrpcServer } from '@gateway/platform';
import { AuthServiceService, FILE_DESCRIPTOR_SET_BASE64 } from '@gateway/proto';
import { reflectionAnswers, type ReflectionResponse } from './grpc-reflection.js';
import { testLogger } from './infra.js';

// libs/platform's startGrpcServer hands @grpc/reflection one entry per distinct file list of the package
// definition (reflection.ts: as proto-loader gives it, every one of its ~300 definitions carries the whole
// list, which reflection decoded once per definition). What a client is told must not change for it.

const SERVICES = ['gateway.v1.AuthService', 'grpc.health.v1.Health'];
const REQUESTS: Array<Record<string, string>> = [
  { listServices: '*' },
  { fileContainingSymbol: 'gateway.v1.AuthService' },
  { fileContainingSymbol: 'gateway.v1.CreateAccountRequest' },
  { fileContainingSymbol: 'grpc.health.v1.Health' },
  { fileByFilename: 'gateway/v1/common.proto' },
  { fileContainingSymbol: 'gateway.v1.NoSuchThing' },
];

describe('server reflection of startGrpcServer', () => {
  let gateway: RunningGrpcServer;
  let whole: Server;
  let wholeAddress: string;

  beforeAll(async () => {
    gateway = await startGrpcServer({
      address: '127.0.0.1:0', logger: testLogger('reflection'),
      services: [{ definition: AuthServiceService, implementation: {} as never, name: 'gateway.v1.AuthService' }],
    });
    // Reflection of the package definition as proto-loader gives it, the health proto beside it.
    const definition = { ...loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET_BASE64, 'base64')), ...loadSync(protoPath) };
    whole = new Server();
    new ReflectionService(definition as ConstructorParameters<typeof ReflectionService>[0], { services: SERVICES }).addToServer(whole);
    const port = await new Promise<number>((resolve, reject) =>
      whole.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound))));
    wholeAddress = `127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await gateway?.stop();
    whole?.forceShutdown();
  });

  it('answers list, describe by symbol and by file name as reflection of the whole package definition does', async () => {
    const [answers, expected] = await Promise.all([reflectionAnswers(gateway.address, REQUESTS), reflectionAnswers(wholeAddress, REQUESTS)]);
    expect(answers[0]!.listServicesResponse!.service.map((service) => service.name).sort()).toEqual([...SERVICES].sort());
    expect(answers[1]!.fileDescriptorResponse!.fileDescriptorProto.some((file) => file.toString('latin1').includes('AuthService'))).toBe(true);
    // NOT_FOUND for a symbol nobody declares.
    expect(answers[5]!.errorResponse?.errorCode).toBe(5);
    const shape = (list: ReflectionResponse[]) => list.map((answer) => ({
      services: answer.listServicesResponse?.service.map((service) => service.name).sort(),
      files: answer.fileDescriptorResponse?.fileDescriptorProto.map((file) => file.toString('base64')).sort(),
      error: answer.errorResponse?.errorCode,
    }));
    expect(shape(answers)).toEqual(shape(expected));
  });
});
