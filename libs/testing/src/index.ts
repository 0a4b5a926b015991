export * from './infra.js';
export * from './fake-upstream.js';
