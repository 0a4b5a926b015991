import { defineConfig } from 'vite';

// A static single-page app served by the edge under /console/ (the edge reads dist/ from disk).
// Everything is bundled: no CDN, no inline script (the edge's CSP is `default-src 'self'`).
export default defineConfig({
  base: '/console/',
  build: { outDir: 'dist', emptyOutDir: true, assetsInlineLimit: 0, modulePreload: { polyfill: false }, sourcemap: false },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
});
