import { createHash } from 'node:crypto';

/** Up to two initials: "Acme AI" -> "AA", "nebula" -> "N"; falls back to the id. */
export function initialsOf(displayName: string, id: string): string {
  const words = displayName.split(/[\s_\-./]+/).filter((word) => /[\p{L}\p{N}]/u.test(word));
  const source = words.length > 0 ? words : [id];
  return source
    .slice(0, 2)
    .map((word) => Array.from(word.replace(/[^\p{L}\p{N}]/gu, ''))[0] ?? '')
    .join('')
    .toUpperCase();
}

/** A stable colour per startup id, dark enough for white text. */
export function colourOf(id: string): string {
  const hash = createHash('sha256').update(id).digest();
  const hue = hash.readUInt16BE(0) % 360;
  return hslToHex(hue, 55, 42);
}

function hslToHex(hue: number, saturationPercent: number, lightnessPercent: number): string {
  const saturation = saturationPercent / 100;
  const lightness = lightnessPercent / 100;
  const amplitude = saturation * Math.min(lightness, 1 - lightness);
  const channel = (offset: number) => {
    const k = (offset + hue / 30) % 12;
    const value = lightness - amplitude * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(value * 255).toString(16).padStart(2, '0');
  };
  return `#${channel(0)}${channel(8)}${channel(4)}`;
}

const escapeXml = (text: string) =>
  text.replace(/[<>&"']/g, (character) => `&#${character.charCodeAt(0)};`);

/** The logo shown for a startup that has none: its initials on a colour derived from its id. */
export function placeholderIcon(id: string, displayName: string): string {
  const initials = escapeXml(initialsOf(displayName, id));
  const label = escapeXml(displayName || id);
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64" role="img" aria-label="${label}">` +
    `<rect width="64" height="64" rx="12" fill="${colourOf(id)}"/>` +
    `<text x="32" y="32" dy="0.35em" text-anchor="middle" font-family="system-ui, sans-serif" font-size="26" ` +
    `font-weight="600" fill="#ffffff">${initials}</text></svg>`
  );
}
