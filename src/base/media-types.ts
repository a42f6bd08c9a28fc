/**
 * A file's media type by its name's extension, as a browser picking the file from disk reports it: for a
 * file `file_upload` hands a page from an upload folder, and for a download (Playwright's download does not
 * tell the response's Content-Type). `application/octet-stream` when the extension is not known here.
 */
const MEDIA_TYPES: Readonly<Record<string, string>> = {
  txt: 'text/plain',
  csv: 'text/csv',
  html: 'text/html',
  htm: 'text/html',
  json: 'application/json',
  xml: 'application/xml',
  pdf: 'application/pdf',
  zip: 'application/zip',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  svg: 'image/svg+xml',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
};

export function mediaTypeOf(name: string): string {
  const ext = /\.([A-Za-z0-9]{1,8})$/.exec(name)?.[1]?.toLowerCase();
  return (ext && MEDIA_TYPES[ext]) ?? 'application/octet-stream';
}
