export * from './client-stack.js';
export * from './run-cli.js';
export * from './tool-loop.js';
