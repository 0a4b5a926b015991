import type { Server } from '@grpc/grpc-js';
import { loadFileDescriptorSetFromBuffer, loadSync, type PackageDefinition } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath } from 'grpc-health-check';
import { FILE_DESCRIPTOR_SET_BASE64 } from '@gateway/proto';

const HEALTH_SERVICE = 'grpc.health.v1.Health';

let described: PackageDefinition | undefined;

/**
 * Every gateway contract (libs/proto's generated descriptor set, comments included) plus the health
 * service's own proto (shipped in grpc-health-check), decoded once per process.
 */
function describedPackages(): PackageDefinition {
  if (described) return described;
  const gateway = loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET_BASE64, 'base64'));
  // grpc-health-check's `protoPath` is the health.proto file itself.
  const health = loadSync(protoPath);
  described = { ...gateway, ...health };
  return described;
}

/**
 * gRPC server reflection (v1 and v1alpha) listing the server's own services and health, so
 * `grpcurl -plaintext HOST:PORT list` and `describe` work without the .proto files at hand.
 */
export function addReflection(server: Server, serviceNames: readonly string[]): void {
  new ReflectionService(describedPackages() as ConstructorParameters<typeof ReflectionService>[0], {
    services: [...serviceNames, HEALTH_SERVICE],
  }).addToServer(server);
}
