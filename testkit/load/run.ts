/**
 * What the load's parts share: its options and figures, the plan of a batch with what
 * each call must show, and the state of one run (`LoadRun`) that the drivers and the
 * checker write to.
 */
import type { BatchResult, ErrorInfo, ToolUse } from '../../src/base/protocol.ts';
import type { LaneRecord, OvertakeReport } from './fairness.ts';

export type BatchKind = 'computer' | 'browser' | 'mixed' | 'malformed' | 'resumed';

export interface BatchRecord {
  session: string;
  batchId: string;
  kind: BatchKind;
  sentAt: number;
  doneAt: number;
  /** No call failed. */
  ok: boolean;
  failureTypes: string[];
  /** A browser call that ran and succeeded / a computer call that ran and succeeded. */
  browserOk: boolean;
  computerOk: boolean;
}

export interface LoadOptions {
  /** ws://…/v1 of the daemon. */
  url: string;
  token: string;
  /** Origin of a startMarkerServer(). */
  webOrigin: string;
  /** Sessions open at once (slots). */
  sessions: number;
  /** Batches per session life (Infinity: until durationMs ends). A number or one per slot. */
  rounds: number | ((slot: number) => number);
  /** When set, a slot whose session finished its rounds opens a new one until this much time has passed (churn). */
  durationMs?: number;
  /** Prefix of session tags (letters and digits), to tell runs apart. */
  label?: string;
  /** The kinds of batches sessions cycle through (default all three). */
  kinds?: readonly BatchMix[];
  /** Every n-th batch of a session, when it is a computer batch, also takes a screenshot (0: never). */
  screenshotEvery?: number;
  /** The same for browser batches (a browser screenshot costs seconds on a loaded machine). */
  browserScreenshotEvery?: number;
  /** Before every n-th batch, one malformed input (0: never). */
  malformedEvery?: number;
  /** After every n-th batch, resend it: it must be answered from the stored result (0: never). */
  replayEvery?: number;
  /** Every n-th session life ends with a dropped connection mid-batch, a resume and a resend (0: never). */
  dropResumeEvery?: number;
  /**
   * Failures that are expected (a fault was injected, or the machine is starved of CPU);
   * anything else is an unexpected failure. Expected ones are counted by type.
   */
  expectFailure?: (error: ErrorInfo) => boolean;
  /**
   * Slot i opens its first session after i × rampUpMs / sessions: all sessions are soon open
   * at once, but 32 browser contexts are not all created in the same instant.
   */
  rampUpMs?: number;
  /**
   * Each session's first life stays open, once its rounds are done, until every
   * slot's first session has opened (or failed to): so all of them are open at
   * once however fast a machine runs the rounds, and `maxConcurrentSessions`
   * equals `sessions` unless a session failed to open. Not with `durationMs`.
   */
  holdOpenUntilAllOpened?: boolean;
  /**
   * At most this many browser batches in flight at once, across sessions (the client waits):
   * on two shared cores each new browser context costs about a second of CPU, and 32 at once
   * outlast navigate's own 20 s limit. Sessions, the lane and mixed batches are not limited.
   */
  browserConcurrency?: number;
  /** A browser batch whose navigation failed (expectedly) is followed by another, at most this many times. */
  browserRetries?: number;
  /** How long a batch may take before its results count as lost. */
  batchTimeoutMs?: number;
  onBatch?: (record: BatchRecord) => void;
  /** Aborts: no new batches start; in-flight ones finish. */
  signal?: AbortSignal;
}

export interface Quantiles {
  n: number;
  p50: number;
  p95: number;
  max: number;
}

export interface LoadStats {
  durationMs: number;
  /** Session lives started (hello answered with welcome). */
  sessionsOpened: number;
  maxConcurrentSessions: number;
  /** Handshakes or hellos refused for capacity (503, too_many_sessions), then retried. */
  sessionRefusals: number;
  /** Batches accepted (including malformed-input batches and resumed ones; replays are counted apart). */
  batches: number;
  batchesByKind: Record<string, number>;
  /** tool_uses in those batches. */
  calls: number;
  /** tool_results received for them. */
  results: number;
  lost: number;
  duplicated: number;
  crossed: number;
  /** Calls whose result was checked against what this session and batch did. */
  contentChecks: number;
  /** Pages that showed this session's own cookie and earlier localStorage value (isolation exercised). */
  isolationChecks: number;
  /** Marker pages read and checked (marker, cookie, storage). */
  pageChecks: number;
  /** Browser batches sent again because their navigation failed in an expected way. */
  browserRetries: number;
  replays: number;
  replaysOk: number;
  dropResumes: number;
  dropResumesOk: number;
  malformedSent: number;
  malformedAnswered: number;
  malformedByKind: Record<string, number>;
  expectedFailures: Record<string, number>;
  unexpectedFailures: number;
  /** tool_event streams that broke the rules (missing, doubled, late, foreign). */
  eventProblems: number;
  /** Messages that failed the protocol schema, and errors nobody asked for. */
  protocolProblems: number;
  laneBatches: number;
  /** Longest time from sending a lane batch to its first call starting. */
  maxLaneWaitMs: number;
  fairness: OvertakeReport;
  /** Session lives that ended before their rounds (a batch without result, a refused session): never expected. */
  unfinishedSessions: number;
  /** Max − min lane batches completed across sessions when the first session finished its last one. */
  spreadAtFirstFinish: number | undefined;
  batchMs: Record<string, Quantiles>;
  /** Call durations by toolset and member, from the daemon's succeeded events. */
  callMs: Record<string, Quantiles>;
  maxScreenshotBytes: number;
  screenshotsWritten: number;
  /** The first descriptions of anything wrong (at most 60). */
  problems: string[];
}

export type BatchMix = 'computer' | 'browser' | 'mixed';

/** What a call was meant to show, checked when it succeeded. */
export type Expectation =
  | { kind: 'cursor'; coordinate: [number, number]; moveIndex: number }
  | { kind: 'image' }
  | { kind: 'navigate'; url: string; title: string }
  | { kind: 'page'; tag: string; n: number }
  | { kind: 'tabs'; tag: string; atLeast: number }
  | { kind: 'outline'; tag: string; n: number }
  | { kind: 'error'; type: string; text: RegExp }
  | { kind: 'not_executed'; text: string }
  | { kind: 'ack' };

export interface Planned {
  kind: BatchKind;
  toolUses: ToolUse[];
  expect: Expectation[];
}

/** One run's state: every driver and the checker count into it; nothing else is shared. */
export interface LoadRun {
  opts: LoadOptions;
  stats: LoadStats;
  batchTimeoutMs: number;
  expectFailure: (error: ErrorInfo) => boolean;
  /** Keeps a description of what went wrong (the first 60). */
  problem(what: string): void;
  recordDuration(kind: string, ms: number): void;
  /** Call durations by `toolset.member`, from succeeded events. */
  callDurations: Map<string, number[]>;
  lane: LaneRecord[];
  /** Per session: lane completion times, and how many lane batches its life was meant to run. */
  laneDone: Map<string, { times: number[]; planned: number }>;
  /** Per batch result: how many of its results were lost, duplicated or crossed (judged when it arrived). */
  wrongResults: WeakMap<BatchResult, number>;
}

export function quantiles(values: number[]): Quantiles {
  const s = [...values].sort((a, b) => a - b);
  const q = (p: number): number => Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0);
  return { n: s.length, p50: q(0.5), p95: q(0.95), max: Math.round(s[s.length - 1] ?? 0) };
}
