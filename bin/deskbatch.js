#!/usr/bin/env node
// Runs the TypeScript sources directly (no build step): tsx registers the loader.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
await main(process.argv.slice(2));
