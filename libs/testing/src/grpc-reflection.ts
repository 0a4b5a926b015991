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

interface ReflectionResponse {
  listServicesResponse?: { service: Array<{ name: string }> };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

type ReflectionClient = Client & {
  ServerReflectionInfo(): ClientDuplexStream<Record<string, string>, ReflectionResponse>;
};

/**
 * Asks a gRPC server's reflection service, as grpcurl does: `list` and the file declaring `symbol`.
 * The reflection proto is the one @grpc/reflection ships.
 */
export async function askReflection(address: string, symbol: string): Promise<ReflectionAnswer> {
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
    call.write({ listServices: '*' });
    call.write({ fileContainingSymbol: symbol });
    call.end();
    await done;
    const error = answers.find((answer) => answer.errorResponse)?.errorResponse;
    return {
      services: answers.flatMap((answer) => answer.listServicesResponse?.service.map((service) => service.name) ?? []),
      fileDescriptors: answers.flatMap((answer) => answer.fileDescriptorResponse?.fileDescriptorProto ?? []),
      ...(error ? { error: { code: error.errorCode, message: error.errorMessage } } : {}),
    };
  } finally {
    client.close();
  }
}
