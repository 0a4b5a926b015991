/** Bounds of the Files API routes (routes/files-routes.ts); a leaf module, so the context can name it without a cycle. */
export interface FilesRouteOptions {
  /** Largest file the edge lets through (the jobs service checks it again): JOBS_MAX_FILE_BYTES. */
  maxFileBytes: number;
}

export const DEFAULT_FILES_ROUTE_OPTIONS: FilesRouteOptions = { maxFileBytes: 200 * 1024 * 1024 };

/** The Files API's id shape (the jobs service's ids): any other id is unknown without a call. */
export const FILE_ID_PATTERN = /^file-[A-Za-z0-9_-]{1,64}$/;
