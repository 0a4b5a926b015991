export * from './infra.js';
export * from './fake-upstream.js';
export * from './fake-anthropic-upstream.js';
export * from './minimal-pdf.js';
export * from './hidden-class.js';
export * from './crash-copy.js';
export * from './grpc-reflection.js';
export * from './prometheus-text.js';
export type { RecordedPart } from './fake-upstream-support.js';
