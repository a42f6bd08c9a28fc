/**
 * The keymap a person's keys need during a takeover (docs/VIEWER.md "Takeover").
 *
 * noVNC sends keysyms, in the person's own layout; x11vnc (`-xkb`) presses
 * the keycode that gives each keysym in the desktop's layout. A keysym the
 * desktop's keymap lacks (é on a US desktop) x11vnc binds to a spare keycode
 * and presses at once, before the focused client has re-read the keymap: the
 * client reads the new keycode as nothing, and the character is lost (the
 * first é of a password, seen in test/viewer-takeover.test.ts). The agent's
 * own typing waits for that re-read (src/desktop-driver/worker/keymap.ts); this does
 * the same for the person's keys. The bridge (src/takeover/vnc-bridge.ts) sends
 * x11vnc the key's release first, which x11vnc answers by binding the keysym
 * (a release of a key that is not down types nothing), waits here
 * until the client that gets the keys has re-read the keymap since, then
 * sends the press, which x11vnc gives the keycode it just bound. The keys
 * after it wait in order. Only the first press of each such keysym waits.
 */
import type { Logger } from '../base/log.ts';
import { keyboardTarget, KeymapReads, REREAD_CAP_MS } from './keymap-reads.ts';
import { XConnection } from './x11.ts';

export class KeymapWatch {
  /** Every keysym on some keycode of the desktop's keymap, at any level. */
  private known = new Set<number>();

  private constructor(
    private readonly conn: XConnection,
    private readonly reads: KeymapReads,
    private readonly log: Logger,
  ) {
    conn.onMappingNotify = () => void this.refresh();
  }

  /**
   * Watches the keymap of `display`; undefined when the X server cannot say
   * who re-read it (no RECORD extension), where x11vnc keeps its own way.
   */
  static async open(display: string, xauthority: string | undefined, log: Logger): Promise<KeymapWatch | undefined> {
    const conn = await XConnection.open(display, xauthority, 5_000);
    try {
      const reads = await KeymapReads.open(display, conn, { changesBy: 'anyone', xauthority });
      if (!reads) {
        conn.close();
        log.info('the X server has no RECORD extension: a key the desktop lacks may be lost on its first press');
        return undefined;
      }
      const keymap = new KeymapWatch(conn, reads, log);
      await keymap.refresh();
      return keymap;
    } catch (err) {
      conn.close();
      throw err;
    }
  }

  private async refresh(): Promise<void> {
    try {
      const { keysyms } = await this.conn.getKeyboardMapping();
      const known = new Set(keysyms);
      known.delete(0);
      this.known = known;
    } catch (err) {
      if (!this.conn.closed) this.log.warn('could not read the desktop keymap', { error: String(err) });
    }
  }

  /** Whether the desktop's keymap lacks `keysym` (so x11vnc would bind it as the key is pressed). */
  lacks(keysym: number): boolean {
    return keysym !== 0 && !this.known.has(keysym);
  }

  /** The keymap changes so far: taken right before the release that makes x11vnc bind a keysym. */
  mark(): number {
    return this.reads.changes;
  }

  /**
   * Resolves once the client that gets the keyboard's keys has re-read the
   * keymap after the change that follows `mark` (or after REREAD_CAP_MS);
   * `keysym` counts as bound from then on. Never rejects.
   */
  async settled(mark: number, keysym: number): Promise<void> {
    const start = performance.now();
    try {
      const target = await keyboardTarget(this.conn);
      const read = !target || (await this.reads.waitForRead(target, mark + 1, REREAD_CAP_MS, () => undefined));
      // Nothing is logged of a key that went as it should: which keys a person pressed is theirs. Not the keysym here.
      if (!read) {
        this.log.debug('the focused client did not re-read the keymap in time; the key went on', {
          ms: Math.round(performance.now() - start),
        });
      }
    } catch (err) {
      if (!this.conn.closed) this.log.warn('could not wait for the keymap to be re-read', { error: String(err) });
    }
    this.known.add(keysym);
  }

  close(): void {
    this.reads.close();
    this.conn.close();
  }
}
