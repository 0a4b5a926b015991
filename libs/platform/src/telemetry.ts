import type { Logger } from 'pino';

/**
 * OpenTelemetry tracing, on only when OTEL_EXPORTER_OTLP_ENDPOINT is set (the SDK is loaded lazily so
 * a process without an exporter pays nothing). gRPC and HTTP calls are traced across services.
 */
export async function startTelemetry(serviceName: string, logger: Logger): Promise<() => Promise<void>> {
  if (!process.env.OTEL_EXPORTER_OTLP_ENDPOINT) return async () => {};
  const [{ NodeSDK }, { OTLPTraceExporter }, { GrpcInstrumentation }, { HttpInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/instrumentation-grpc'),
    import('@opentelemetry/instrumentation-http'),
  ]);
  const sdk = new NodeSDK({
    serviceName,
    traceExporter: new OTLPTraceExporter(),
    instrumentations: [new GrpcInstrumentation(), new HttpInstrumentation()],
  });
  sdk.start();
  logger.info({ endpoint: process.env.OTEL_EXPORTER_OTLP_ENDPOINT }, 'OpenTelemetry tracing on');
  return () => sdk.shutdown();
}
