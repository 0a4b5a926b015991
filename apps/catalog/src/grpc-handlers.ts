import { auditCallContext, ErrorReason, GatewayError, GrpcStatus, errors, unary, type Logger } from '@gateway/platform';
import type { CatalogServiceServer } from '@gateway/proto';
import { iconSourceFor } from './catalog-data.js';
import type { CatalogService } from './catalog-service.js';

/** Thin gRPC layer: decode, call the domain service, encode. */
export function catalogHandlers(service: CatalogService, logger: Logger): CatalogServiceServer {
  return {
    getSnapshot: unary(logger, 'GetSnapshot', async (request) => {
      const snapshot = service.current;
      if (request.ifVersionNot !== '' && request.ifVersionNot === snapshot.version) {
        return { version: snapshot.version, unchanged: true, models: [], providers: [], startups: [], limitGroups: [], moderationModel: '', defaultModels: {} };
      }
      return {
        version: snapshot.version,
        unchanged: false,
        models: [...snapshot.models],
        providers: [...snapshot.providers],
        startups: [...snapshot.startups],
        limitGroups: [...snapshot.limitGroups],
        moderationModel: snapshot.moderationModel,
        defaultModels: snapshot.defaultModels,
      };
    }),
    listModels: unary(logger, 'ListModels', async () => ({ models: [...service.current.models] })),
    getModel: unary(logger, 'GetModel', async (request) => {
      const model = service.current.findModel(request.model);
      if (!model) {
        throw new GatewayError(GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_MODEL_NOT_FOUND, `model "${request.model}" does not exist`, {
          param: 'model',
          code: 'model_not_found',
        });
      }
      return { model };
    }),
    listStartups: unary(logger, 'ListStartups', async () => ({ startups: [...service.current.startups] })),
    listLimitGroups: unary(logger, 'ListLimitGroups', async () => ({ limitGroups: [...service.current.limitGroups] })),
    getStartupIcon: unary(logger, 'GetStartupIcon', async (request) => {
      const icon = service.current.icon(request.startupId);
      if (!icon) throw errors.notFound(`startup "${request.startupId}" does not exist`);
      return { svg: Buffer.from(icon.svg, 'utf8'), provided: icon.provided };
    }),
    // LoadCatalog is admin-only: an unclaimed caller is recorded as the admin token.
    loadCatalog: unary(logger, 'LoadCatalog', async (request, call) => {
      const result = await service.load(request.document, request.source, iconSourceFor(request.source), request.dryRun, auditCallContext(call.metadata, 'admin'));
      return {
        version: result.version,
        changed: result.changed,
        problems: result.problems,
        modelCount: result.modelCount,
      };
    }),
    readCatalogAuditChain: unary(logger, 'ReadCatalogAuditChain', (request) => service.readAuditChain(request)),
  };
}
