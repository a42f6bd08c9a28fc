/**
 * Notices for the model (dialogs, refused navigations, closed file choosers,
 * lost tabs, the download limit), kept until a result that can hold text shows
 * them (docs/TOOLSETS.md D2).
 */

/** Notices shown in one result: the SDK's cap (docs/TOOLSETS.md D2). */
const NOTICES_MAX = 3;

export class Notices {
  private pending: string[] = [];
  private dropped = 0;

  /** Keeps a notice; a page looping alert() cannot grow the list without bound. */
  add(text: string): void {
    if (this.pending.length < NOTICES_MAX) this.pending.push(text);
    else this.dropped++;
  }

  /** The lines a result shows: the first notices, then how many more there were. */
  lines(): string[] {
    const notices = this.pending.slice(0, NOTICES_MAX);
    const more = this.pending.length - NOTICES_MAX + this.dropped;
    if (more > 0) notices.push(`${more} more notices (dialogs, refused navigations) were not shown.`);
    return notices;
  }

  /** A result showed them. */
  clear(): void {
    this.pending = [];
    this.dropped = 0;
  }
}
