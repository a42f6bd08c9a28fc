#!/usr/bin/env node
// Runs the compiled daemon (dist/, which scripts/build.js makes: `npm start` builds it first) with no
// loader; its desktop worker is the compiled one too (src/base/package-root.ts).
import { existsSync } from 'node:fs';

const cli = new URL('../dist/src/cli.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write('deskbatch: dist/ is not built: run `npm run build` (`npm start` builds it)\n');
  process.exit(1);
}
const { main } = await import(cli.href);
await main(process.argv.slice(2));
