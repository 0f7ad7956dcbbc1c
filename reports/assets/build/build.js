// Builds ../plotly-scsitrace.min.js: plotly.js 4.1.1 with the traces the report draws (see
// ../README.md). Run from this folder: npm install && node build.js
const esbuild = require('esbuild');
const { environmentPlugin } = require('esbuild-plugin-environment');
const { glsl } = require('esbuild-plugin-glsl');
const InlineCSSPlugin = require('esbuild-plugin-inline-css');
const version = require('plotly.js/package.json').version;

esbuild.build({
  // plotly.js's own esbuild-config.js, with another entry point and output
  entryPoints: ['./entry.js'], outfile: '../plotly-scsitrace.min.js',
  format: 'iife', globalName: 'Plotly', bundle: true, minify: true, sourcemap: false,
  plugins: [InlineCSSPlugin(), glsl({ minify: true }), environmentPlugin({ NODE_DEBUG: false })],
  alias: { regl: '@plotly/regl', stream: 'stream-browserify' },
  define: { global: 'window', 'define.amd': 'false' },
  target: 'es2016', logLevel: 'info', legalComments: 'eof',
  banner: { js: `/* plotly.js ${version} (bar, pie, scatter, scattergl), MIT license, copyright Plotly, Inc. ` +
                `See plotly.LICENSE; built by scsitrace reports/assets/build/build.js */` },
}).catch(() => process.exit(1));
