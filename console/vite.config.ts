import { defineConfig } from 'vite';

// The Gantry console: a Preact single-page app built into console/dist, served by the node itself
// (src/edge/routes/console.ts). JSX goes through Vite's own transformer (Oxc) with Preact's runtime.
export default defineConfig({
  base: '/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    sourcemap: false,
    reportCompressedSize: false,
  },
  server: { proxy: { '/api': 'http://127.0.0.1:8080', '/storage': 'http://127.0.0.1:8080' } },
});
