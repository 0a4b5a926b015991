/** Bounds of the Files API routes (routes/files-routes.ts); a leaf module, so the context can name it without a cycle. */
export interface FilesRouteOptions {
  /** Largest file the edge lets through (the jobs service checks it again): JOBS_MAX_FILE_BYTES. */
  maxFileBytes: number;
}

export const DEFAULT_FILES_ROUTE_OPTIONS: FilesRouteOptions = { maxFileBytes: 200 * 1024 * 1024 };
