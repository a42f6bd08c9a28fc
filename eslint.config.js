// ESLint flat config: @eslint/js recommended + typescript-eslint recommended
// (syntactic only: no type information, so `eslint .` stays fast).
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

/** Node.js globals the .js files use (TypeScript files get theirs from @types/node). */
const nodeGlobals = Object.fromEntries(
  [
    'AbortController',
    'AbortSignal',
    'Buffer',
    'URL',
    'URLSearchParams',
    'TextDecoder',
    'TextEncoder',
    'clearImmediate',
    'clearInterval',
    'clearTimeout',
    'console',
    'fetch',
    'performance',
    'process',
    'queueMicrotask',
    'setImmediate',
    'setInterval',
    'setTimeout',
    'structuredClone',
  ].map((name) => [name, 'readonly']),
);

/**
 * Browser globals of the in-page script (src/browser/page-script/), which runs in a page, not in Node.js.
 * Only those it uses: a new one is added here on purpose, so a Node.js name cannot slip into the page.
 */
const browserGlobals = Object.fromEntries(
  ['DOMMatrixReadOnly', 'Event', 'document', 'getComputedStyle', 'window'].map((name) => [name, 'readonly']),
);

/**
 * The layers, top to bottom; an import may only point down (docs/ARCHITECTURE.md):
 *   cli → daemon → ops, viewer → recording, takeover, profiles, mcp → server → executor → toolset API ← toolsets
 *   → desktop pool → drivers (desktop driver, browser) → base (the leaves).
 * Only the composition root (src/daemon.ts, src/cli.ts) names the toolsets; the rest knows them by the
 * interface they implement (src/toolset-api/).
 * The client library stands apart (the protocol and the leaves only); the SDK classes use the client.
 * `layer(name, files, ...below)` lets the layer's `files` import their own group, the groups named
 * `below` and the leaves; every other group is forbidden.
 */
const GROUPS = {
  cli: ['**/cli.ts'],
  daemon: ['**/daemon.ts'],
  ops: ['**/ops/**', '**/viewer/**'],
  takeover: ['**/takeover/**'],
  recording: ['**/recording/**'],
  profiles: ['**/profiles/**'],
  mcp: ['**/mcp/**'],
  server: ['**/server/**'],
  executor: ['**/executor/**'],
  toolsets: ['**/toolsets/**'],
  toolsetApi: ['**/toolset-api/**'],
  desktops: ['**/desktop-pool/**'],
  desktop: ['**/desktop-driver/**'],
  browser: ['**/browser/**'],
  client: ['**/client/**'],
  sdk: ['**/sdk/**'],
};
/** The leaves: modules every layer may use, which import none of the project's layers. */
const LEAVES = ['src/base/**'];
/** Only src/base/child-process.ts starts programs: every other file goes through it (docs/ARCHITECTURE.md). */
const CHILD_PROCESS_MODULE = 'src/base/child-process.ts';
const childProcessPaths = ['node:child_process', 'child_process'].map((name) => ({
  name,
  message: `programs are started through ${CHILD_PROCESS_MODULE} (one way to run a child process: docs/ARCHITECTURE.md).`,
}));

function layer(name, files, ...below) {
  const groups = Object.keys(GROUPS).filter(
    (g) => !below.includes(g) && !files.some((f) => GROUPS[g].includes(`**/${f.replace(/^src\//, '')}`)),
  );
  return {
    files,
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: files.includes(CHILD_PROCESS_MODULE) ? [] : childProcessPaths,
          patterns: groups.map((g) => ({
            group: GROUPS[g],
            message: `the ${name} may not import from the ${g} layer: imports point down (docs/ARCHITECTURE.md).`,
          })),
        },
      ],
    },
  };
}

/** `config` (a layer) with some files of the group `name` allowed: its pattern for that group gets exceptions. */
function onlyFrom(config, name, what, ...files) {
  const options = config.rules['no-restricted-imports'][1];
  for (const p of options.patterns) {
    if (p.group !== GROUPS[name]) continue;
    p.group = [...GROUPS[name], ...files.map((f) => `!**/${f.replace(/^src\//, '')}`)];
    p.message = `of ${what}, only ${files.join(' and ')} may be imported here (docs/ARCHITECTURE.md).`;
  }
  return config;
}

/** `config` (a layer) with a package's imports allowed where a group's pattern would match them by their path. */
function allowPackage(config, name) {
  for (const p of config.rules['no-restricted-imports'][1].patterns) p.group = [...p.group, `!${name}/**`];
  return config;
}

/** `config` (a layer) with some files of the desktop driver allowed. */
function onlyFromDesktop(config, ...files) {
  return onlyFrom(config, 'desktop', 'the desktop driver', ...files);
}

export default defineConfig(
  { ignores: ['node_modules/', 'dist/', 'screenshots/', 'downloads/', 'test-artifacts/', '.deskbatch/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module', globals: nodeGlobals },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
        },
      ],
    },
  },
  {
    // A classic script (its text is evaluated in the page, src/browser/frame-worlds.ts) with the page's globals only.
    files: ['src/browser/page-script/**/*.js'],
    languageOptions: {
      sourceType: 'script',
      globals: { ...Object.fromEntries(Object.keys(nodeGlobals).map((name) => [name, 'off'])), ...browserGlobals },
    },
  },
  layer('leaves', LEAVES),
  layer('child processes', [CHILD_PROCESS_MODULE]),
  layer('desktop driver', ['src/desktop-driver/**']),
  layer('browser driver', ['src/browser/**']),
  layer('desktops', ['src/desktop-pool/**'], 'desktop', 'browser'),
  layer('toolset API', ['src/toolset-api/**'], 'desktops'),
  layer('toolsets', ['toolsets/**'], 'toolsetApi', 'desktops', 'desktop', 'browser'),
  layer('executor', ['src/executor/**'], 'toolsetApi', 'desktops'),
  layer('server', ['src/server/**'], 'executor', 'desktops'),
  // Recordings replay through the client library (`deskbatch replay`).
  layer(
    'recording',
    ['src/recording/**'],
    'server',
    'executor',
    'toolsetApi',
    'desktops',
    'desktop',
    'browser',
    'client',
  ),
  // Human takeover (src/takeover/): the server's seams (routes, TakeoverPort), the desktops' hold, and of the
  // desktop driver only keymap-watch.ts (the keymap a person's keys need) and display.ts (a display's name).
  onlyFromDesktop(
    layer('takeover', ['src/takeover/**'], 'server', 'desktops'),
    'src/desktop-driver/keymap-watch.ts',
    'src/desktop-driver/display.ts',
  ),
  // Named browser profiles (src/profiles/): the leaves; of the server only its route seam (HttpRoute in
  // server.ts), the routes' helpers (session-routes.ts) and the ProfilePort a session's profile implements
  // (profile-port.ts); the desktops and the browser a session's state is loaded into and saved from.
  onlyFrom(
    layer('profiles', ['src/profiles/**'], 'desktops', 'browser'),
    'server',
    'the server',
    'src/server/server.ts',
    'src/server/session-routes.ts',
    'src/server/profile-port.ts',
  ),
  // The MCP server (src/mcp/): of the server only its route seam (HttpRoute), the sessions it opens and runs
  // batches on (session.ts, and connection.ts's OpenRequest), the Origin check (auth.ts) and the body helpers
  // (session-routes.ts); the toolsets by the toolset API's interface; the client library, for another daemon's
  // session (`deskbatch mcp --connect`). The MCP SDK's own `server/` and `client/` modules are a package's, not
  // our layers.
  allowPackage(
    onlyFrom(
      layer('mcp', ['src/mcp/**'], 'toolsetApi', 'client'),
      'server',
      'the server',
      'src/server/server.ts',
      'src/server/session.ts',
      'src/server/connection.ts',
      'src/server/auth.ts',
      'src/server/session-routes.ts',
    ),
    '@modelcontextprotocol/sdk',
  ),
  layer(
    'ops and viewer',
    ['src/ops/**', 'src/viewer/**'],
    'takeover',
    'recording',
    'server',
    'executor',
    'toolsetApi',
    'desktops',
  ),
  layer(
    'daemon',
    ['src/daemon.ts'],
    'ops',
    'takeover',
    'profiles',
    'mcp',
    'recording',
    'server',
    'executor',
    'toolsets',
    'toolsetApi',
    'desktops',
    'desktop',
    'browser',
  ),
  layer('client library', ['src/client/**']),
  layer('SDK classes', ['src/sdk/**'], 'client'),
);
