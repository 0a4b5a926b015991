export * from './errors.js';
export * from './server.js';
export * from './client.js';
export * from './health-client.js';
export * from './internal-auth.js';
