/**
 * What the live page's takeover (takeover.js) uses of noVNC's RFB class: the default export of noVNC's
 * `core/rfb.js`, which the page imports at run time from `/viewer/novnc/` (novnc.ts serves it from
 * DEFAULT_NOVNC_DIR, /usr/share/novnc, Debian's package novnc). Only these members are declared; noVNC's own
 * code is not type-checked here.
 */
export default class RFB {
  /** Draws the desktop into `target` and connects to `url` (a WebSocket URL) offering `wsProtocols`. */
  constructor(target: HTMLElement, url: string, options: { wsProtocols: string[] });
  /** No keys or pointer go to the desktop. */
  viewOnly: boolean;
  /** The desktop is scaled to fit `target`. */
  scaleViewport: boolean;
  /** A click on the desktop gives it the keyboard focus. */
  focusOnClick: boolean;
  focus(): void;
  disconnect(): void;
  /** Sends `text` to the desktop's clipboard (RFB ClientCutText). */
  clipboardPasteFrom(text: string): void;
  /** `securityfailure`: the server refused the view; `reason` when it gave one. */
  addEventListener(
    type: 'securityfailure',
    listener: (event: CustomEvent<{ status: number; reason?: string }>) => void,
  ): void;
  addEventListener(type: 'connect' | 'disconnect', listener: (event: CustomEvent) => void): void;
}
