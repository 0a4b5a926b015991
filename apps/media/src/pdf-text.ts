import { getDocumentProxy } from 'unpdf';
import { ErrorReason, GatewayError, GrpcStatus, errors } from '@gateway/platform';

export interface PdfTextLimits {
  /** Largest PDF accepted (the spec's single inline file bound). */
  maxBytes: number;
  /** Most pages read; a caller may ask for fewer, never more. */
  maxPages: number;
  /** Most characters returned: the text goes into a prompt, which has its own bounds. */
  maxTextCharacters: number;
}

export const DEFAULT_PDF_LIMITS: PdfTextLimits = { maxBytes: 20 * 1024 * 1024, maxPages: 500, maxTextCharacters: 4_000_000 };

function tooLarge(message: string) {
  return new GatewayError(GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_PAYLOAD_TOO_LARGE, message);
}

/** Text of a PDF, pages separated by a blank line. */
export async function extractPdfText(pdf: Uint8Array, requestedMaxPages: number, limits: PdfTextLimits = DEFAULT_PDF_LIMITS) {
  if (pdf.length > limits.maxBytes) throw tooLarge(`The PDF is larger than ${limits.maxBytes} bytes.`);
  if (Buffer.from(pdf.subarray(0, 1024)).indexOf('%PDF-') < 0) throw errors.invalidRequest('The file is not a PDF.', 'pdf');
  const maxPages = requestedMaxPages > 0 ? Math.min(requestedMaxPages, limits.maxPages) : limits.maxPages;
  let document: Awaited<ReturnType<typeof getDocumentProxy>>;
  try {
    // pdf.js takes ownership of (and may detach) the buffer it is given: hand it a copy.
    document = await getDocumentProxy(new Uint8Array(pdf));
  } catch (error) {
    throw errors.invalidRequest(`The PDF could not be read: ${error instanceof Error ? error.message : String(error)}`, 'pdf');
  }
  try {
    if (document.numPages > maxPages) throw tooLarge(`The PDF has ${document.numPages} pages; at most ${maxPages} are read.`);
    const pages: string[] = [];
    let characters = 0;
    for (let number = 1; number <= document.numPages; number++) {
      const page = await document.getPage(number);
      const content = await page.getTextContent();
      let text = '';
      for (const item of content.items) {
        if (!('str' in item)) continue;
        text += item.str;
        if (item.hasEOL) text += '\n';
      }
      page.cleanup();
      characters += text.length;
      if (characters > limits.maxTextCharacters) throw tooLarge(`The PDF holds more than ${limits.maxTextCharacters} characters of text.`);
      pages.push(text.trim());
    }
    return { text: pages.join('\n\n'), pages: document.numPages };
  } catch (error) {
    if (error instanceof GatewayError) throw error;
    throw errors.invalidRequest(`The PDF could not be read: ${error instanceof Error ? error.message : String(error)}`, 'pdf');
  } finally {
    await document.destroy().catch(() => undefined);
  }
}
