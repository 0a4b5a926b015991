import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { credentials, loadPackageDefinition, type Client, type ClientDuplexStream } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/** What a server's reflection (grpc.reflection.v1) says: its services, and a symbol's file descriptors. */
export interface ReflectionAnswer {
  services: string[];
  /** Serialized google.protobuf.FileDescriptorProto of the file declaring the symbol, and its imports. */
  fileDescriptors: Buffer[];
  error?: { code: number; message: string };
}

/** One answer of a reflection stream (grpc.reflection.v1), as the reflection proto's loader decodes it. */
export interface ReflectionResponse {
  listServicesResponse?: { service: Array<{ name: string }> };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

type ReflectionClient = Client & {
  ServerReflectionInfo(): ClientDuplexStream<Record<string, string>, ReflectionResponse>;
};

/** Every answer of one reflection stream to `requests`, in order (a request: `{ listServices: '*' }`, `{ fileContainingSymbol }`, `{ fileByFilename }`). */
export async function reflectionAnswers(address: string, requests: ReadonlyArray<Record<string, string>>): Promise<ReflectionResponse[]> {
  const packageRoot = join(dirname(createRequire(import.meta.url).resolve('@grpc/reflection')), '..');
  const definition = loadSync(join(packageRoot, 'proto/grpc/reflection/v1/reflection.proto'), { longs: String, enums: String, defaults: true });
  const loaded = loadPackageDefinition(definition) as unknown as {
    grpc: { reflection: { v1: { ServerReflection: new (address: string, credentials: unknown) => ReflectionClient } } };
  };
  const client = new loaded.grpc.reflection.v1.ServerReflection(address, credentials.createInsecure());
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

/**
 * Asks a gRPC server's reflection service, as grpcurl does: `list` and the file declaring `symbol`.
 * The reflection proto is the one @grpc/reflection ships.
 */
export async function askReflection(address: string, symbol: string): Promise<ReflectionAnswer> {
  const answers = await reflectionAnswers(address, [{ listServices: '*' }, { fileContainingSymbol: symbol }]);
  const error = answers.find((answer) => answer.errorResponse)?.errorResponse;
  return {
    services: answers.flatMap((answer) => answer.listServicesResponse?.service.map((service) => service.name) ?? []),
    fileDescriptors: answers.flatMap((answer) => answer.fileDescriptorResponse?.fileDescriptorProto ?? []),
    ...(error ? { error: { code: error.errorCode, message: error.errorMessage } } : {}),
  };
}
