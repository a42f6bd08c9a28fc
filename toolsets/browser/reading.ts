/** Browser members (filled in as they are implemented). */
export const READING_MEMBERS = [] as const;
