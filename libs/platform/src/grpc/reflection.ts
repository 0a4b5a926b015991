import type { Server } from '@grpc/grpc-js';
import { loadFileDescriptorSetFromBuffer, loadSync, type PackageDefinition } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath } from 'grpc-health-check';
import { FILE_DESCRIPTOR_SET_BASE64 } from '@gateway/proto';

const HEALTH_SERVICE = 'grpc.health.v1.Health';

type ReflectedPackages = ConstructorParameters<typeof ReflectionService>[0];

let described: ReflectedPackages | undefined;

/**
 * Every gateway contract (libs/proto's generated descriptor set, comments included) plus the health
 * service's own proto (shipped in grpc-health-check), decoded once per process.
 *
 * proto-loader gives each of its ~300 definitions (every message, enum and service) the whole list of
 * file descriptors, and @grpc/reflection decodes the list of every definition it is given, keeping the
 * first copy of each file: handed the package definition as it is, a server's reflection decoded the
 * same files ~300 times (~240 ms of CPU and ~100 MB of garbage per server, seven servers in `npm start`,
 * whose heap stayed grown afterwards). It is given one definition per distinct list instead: the same
 * files, each decoded once per server.
 */
function describedPackages(): ReflectedPackages {
  if (described) return described;
  const gateway = loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET_BASE64, 'base64'));
  // grpc-health-check's `protoPath` is the health.proto file itself.
  const health = loadSync(protoPath);
  described = distinctFileLists({ ...gateway, ...health });
  return described;
}

/** One entry per distinct `fileDescriptorProtos` list of a package definition: all reflection reads of it. */
function distinctFileLists(definition: PackageDefinition): ReflectedPackages {
  const lists = new Set<Buffer[]>();
  for (const entry of Object.values(definition)) {
    const files = (entry as { fileDescriptorProtos?: Buffer[] }).fileDescriptorProtos;
    if (Array.isArray(files)) lists.add(files);
  }
  return Object.fromEntries([...lists].map((fileDescriptorProtos, index) => [`files.${index}`, { fileDescriptorProtos }])) as unknown as ReflectedPackages;
}

/**
 * gRPC server reflection (v1 and v1alpha) listing the server's own services and health, so
 * `grpcurl -plaintext HOST:PORT list` and `describe` work without the .proto files at hand.
 */
export function addReflection(server: Server, serviceNames: readonly string[]): void {
  new ReflectionService(describedPackages(), { services: [...serviceNames, HEALTH_SERVICE] }).addToServer(server);
}
