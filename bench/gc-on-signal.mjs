// Preloaded (NODE_OPTIONS=--expose-gc --import=…) into the memory run's daemon
// and, through the environment, its desktop worker: SIGUSR2 runs a full
// garbage collection, so bench/memory.ts can read RSS without the sawtooth of
// when V8 last collected, then writes process.memoryUsage() to
// $DESKBATCH_BENCH_HEAP_DIR/<pid>.json (what the JS heap and Buffers hold
// after that collection). Nothing else changes in those processes.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

process.on('SIGUSR2', () => {
  globalThis.gc?.();
  const dir = process.env.DESKBATCH_BENCH_HEAP_DIR;
  if (dir) writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(process.memoryUsage()));
});
