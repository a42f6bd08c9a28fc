/** Browser members (filled in as they are implemented). */
export const SCREEN_MEMBERS = [] as const;
