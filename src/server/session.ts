/**
 * A session: what outlives one connection. It runs its batches one after
 * another in arrival order, keeps their results for replay (a resent batch_id
 * never runs twice), and survives a dropped connection for the grace period so
 * the client can resume it (docs/PROTOCOL.md "Idempotency and reconnects").
 */
import { createHash, randomBytes } from 'node:crypto';
import type { BatchResult, TakeoverMessage, ToolEvent, ToolUse } from '../base/protocol.ts';
import { canonicalJson } from '../base/text.ts';
import type { AgentOffer } from '../executor/executor.ts';
import type { DesktopLease } from '../desktop-pool/pool.ts';
import type { SessionFiles } from './session-files.ts';
import type { SessionProfile } from './profile-port.ts';

export interface SessionLimits {
  maxQueuedBatches: number;
  resultCache: { maxEntries: number; maxBytes: number; ttlMs: number };
  /** The byte budget this session's stored results share with every other session's. */
  sharedCache?: ResultBudget;
}

/**
 * Stored results of every session, in the order they were stored, under one byte budget: storing past it
 * evicts the least recently stored results first, whichever session holds them. Each session still keeps its
 * own bounds (`resultCache`); this one bounds the sum, `maxSessions` × `maxBytes` being far more than a host
 * should hold.
 */
export class ResultBudget {
  /** Insertion order is store order: the first entry is the least recently stored. */
  private readonly entries = new Map<object, { bytes: number; evict: () => void }>();
  private total = 0;

  constructor(readonly maxBytes: number) {}

  /** Bytes and results stored now, over every session. */
  get usage(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.total };
  }

  /** A result was stored; `evict` drops it from its session (and calls `remove`). May evict `key` itself. */
  add(key: object, bytes: number, evict: () => void): void {
    this.remove(key);
    this.entries.set(key, { bytes, evict });
    this.total += bytes;
    for (const [k, entry] of this.entries) {
      if (this.total <= this.maxBytes) break;
      entry.evict();
      this.remove(k); // in case evict did not
    }
  }

  remove(key: object): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.total -= entry.bytes;
  }
}

/** Runs one batch; the session decides when. */
export type RunBatch = (batchId: string, toolUses: readonly ToolUse[], signal: AbortSignal) => Promise<BatchResult>;

interface StoredBatch {
  hash: string;
  result: Promise<BatchResult>;
  controller: AbortController;
  done: boolean;
  finishedAt: number;
  /** Approximate size of the stored result (its images dominate). */
  bytes: number;
}

/**
 * Size of a stored result: the bytes of its strings (image data, ASCII base64, dominates) plus a
 * fixed share per block.
 * Not a JSON.stringify of the result: that copied every image once more per batch, for a bound.
 */
export function resultBytes(result: BatchResult): number {
  let bytes = 1024;
  for (const r of result.tool_results) {
    bytes += 128 + r.tool_use_id.length;
    for (const block of r.content) {
      bytes += 64;
      if (block.type === 'text') bytes += Buffer.byteLength(block.text);
      else if (block.type === 'image') bytes += block.source.data.length;
      else bytes += JSON.stringify(block).length;
    }
  }
  return bytes;
}

export type SubmitOutcome =
  | { kind: 'accepted'; result: Promise<BatchResult> }
  | { kind: 'replayed'; result: Promise<BatchResult> }
  | { kind: 'conflict' }
  | { kind: 'queue_full' };

export function newSessionId(): string {
  return `s_${randomBytes(16).toString('base64url')}`;
}

export function batchHash(toolUses: readonly ToolUse[]): string {
  return createHash('sha256').update(canonicalJson(toolUses)).digest('hex');
}

export class Session {
  readonly id: string;
  /** Set while a connection is attached; events go there. */
  emit: ((event: ToolEvent) => void) | undefined;
  /** Set while a connection is attached: `takeover` frames go there (the connection sends them if it asked). */
  notify: ((message: TakeoverMessage) => void) | undefined;
  /** What the agent's own tools[] offers its model (hello.tools); everything served when unset. */
  offer: AgentOffer | undefined;
  /** The session's desktop, held until the session ends (src/desktop-pool/pool.ts). */
  desktop: DesktopLease | undefined;
  /** Whether the session is recorded (docs/RECORDING.md). */
  recorded = false;
  /** The files its harness staged (session-files.ts): kept across resumes, removed when the session ends. */
  files: SessionFiles | undefined;
  /** The browser profile its hello named (profile-port.ts): saved and released when the session ends. */
  profile: SessionProfile | undefined;
  /** The attached connection, and how to drop it when another resumes the session. */
  private owner: { id: object; evict: () => void } | undefined;
  private readonly batches = new Map<string, StoredBatch>();
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;
  private storedBytes = 0;
  private graceTimer: NodeJS.Timeout | undefined;
  /** Set by close(): results finishing later are not stored in the shared budget. */
  private closed = false;

  constructor(
    private readonly limits: SessionLimits,
    private readonly runBatch: RunBatch,
    id = newSessionId(),
  ) {
    this.id = id;
  }

  /** Batches queued or running. */
  get active(): number {
    return this.pending;
  }

  submit(batchId: string, toolUses: readonly ToolUse[]): SubmitOutcome {
    this.evictExpired();
    const hash = batchHash(toolUses);
    const known = this.batches.get(batchId);
    if (known) return known.hash === hash ? { kind: 'replayed', result: known.result } : { kind: 'conflict' };
    // The running batch plus maxQueuedBatches waiting behind it.
    if (this.pending > this.limits.maxQueuedBatches) return { kind: 'queue_full' };

    const controller = new AbortController();
    this.pending++;
    const result = this.tail.then(() => this.runBatch(batchId, toolUses, controller.signal));
    const stored: StoredBatch = { hash, result, controller, done: false, finishedAt: 0, bytes: 0 };
    this.tail = result.catch(() => undefined);
    void result
      .then((r) => {
        stored.bytes = resultBytes(r);
        this.storedBytes += stored.bytes;
      })
      .finally(() => {
        this.pending--;
        stored.done = true;
        stored.finishedAt = Date.now();
        if (!this.closed && this.batches.get(batchId) === stored) {
          this.limits.sharedCache?.add(stored, stored.bytes, () => this.evict(batchId, stored));
        }
        this.evictOverflow();
      });
    this.batches.set(batchId, stored);
    return { kind: 'accepted', result };
  }

  /** Whether this batch_id was accepted before (and is still stored): resending it replays, never runs. */
  knows(batchId: string): boolean {
    return this.batches.has(batchId);
  }

  /** Cancels a queued or running batch. False when the session never saw it. */
  cancel(batchId: string): boolean {
    const stored = this.batches.get(batchId);
    if (!stored) return false;
    if (!stored.done) stored.controller.abort();
    return true;
  }

  /** Cancels everything queued or running (disconnect, shutdown). */
  cancelAll(): void {
    for (const stored of this.batches.values()) if (!stored.done) stored.controller.abort();
  }

  /** Resolves when every accepted batch has its result. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.batches.values()].map((b) => b.result));
  }

  /**
   * The owner's connection dropped: cancel its work and start the grace period;
   * `expire` runs at its end. A no-op for a connection that no longer owns the session.
   */
  detach(owner: object, graceMs: number, expire: () => void): void {
    if (this.owner?.id !== owner) return;
    this.owner = undefined;
    this.emit = undefined;
    this.notify = undefined;
    this.cancelAll();
    clearTimeout(this.graceTimer);
    this.graceTimer = setTimeout(expire, graceMs);
    this.graceTimer.unref();
  }

  /** Attaches a connection; one that still held the session is evicted (a client reconnecting past a half-open socket). */
  attach(
    owner: object,
    emit: (event: ToolEvent) => void,
    evict: () => void,
    notify?: (message: TakeoverMessage) => void,
  ): void {
    clearTimeout(this.graceTimer);
    this.graceTimer = undefined;
    const previous = this.owner;
    this.owner = { id: owner, evict };
    this.emit = emit;
    this.notify = notify;
    if (previous && previous.id !== owner) previous.evict();
  }

  close(): void {
    clearTimeout(this.graceTimer);
    this.cancelAll();
    this.closed = true;
    // The session is gone: its stored results no longer count against the budget shared with the others.
    for (const b of this.batches.values()) this.limits.sharedCache?.remove(b);
  }

  private evict(id: string, b: StoredBatch): void {
    if (this.batches.get(id) !== b) return;
    this.batches.delete(id);
    this.storedBytes -= b.bytes;
    this.limits.sharedCache?.remove(b);
  }

  private evictExpired(): void {
    const cutoff = Date.now() - this.limits.resultCache.ttlMs;
    for (const [id, b] of this.batches) if (b.done && b.finishedAt < cutoff) this.evict(id, b);
  }

  /** Keeps finished results within the count and byte bounds, dropping the oldest (Map keeps insertion order). */
  private evictOverflow(): void {
    const { maxEntries, maxBytes } = this.limits.resultCache;
    for (const [id, b] of this.batches) {
      if (this.batches.size <= maxEntries && this.storedBytes <= maxBytes) break;
      if (b.done) this.evict(id, b);
    }
  }

  /** Stored results and their approximate bytes (for tests and metrics). */
  get cacheUsage(): { entries: number; bytes: number } {
    return { entries: this.batches.size, bytes: this.storedBytes };
  }
}
