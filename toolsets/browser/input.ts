/** Browser members (filled in as they are implemented). */
export const INPUT_MEMBERS = [] as const;
