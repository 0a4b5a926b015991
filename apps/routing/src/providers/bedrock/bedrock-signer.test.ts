import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Sha256 } from '@aws-crypto/sha256-js';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';
import { BedrockSigner, NodeSha256 } from './bedrock-signer.js';

const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', sessionToken: 'token' };

describe('BedrockSigner', () => {
  it('NodeSha256 hashes and HMACs exactly as the pure-JS Sha256 does (same signature for the same request)', async () => {
    const request = () => new HttpRequest({
      method: 'POST', protocol: 'https:', hostname: 'bedrock-runtime.us-east-1.amazonaws.com',
      path: '/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse',
      headers: { host: 'bedrock-runtime.us-east-1.amazonaws.com', 'content-type': 'application/json' }, body: '{"messages":[]}',
    });
    const signingDate = new Date('2026-11-26T10:00:00Z');
    const native = await new SignatureV4({ service: 'bedrock', region: 'us-east-1', credentials, sha256: NodeSha256 }).sign(request(), { signingDate });
    const pure = await new SignatureV4({ service: 'bedrock', region: 'us-east-1', credentials, sha256: Sha256 }).sign(request(), { signingDate });
    expect(native.headers.authorization).toBe(pure.headers.authorization);
    const hash = new NodeSha256();
    hash.update('abc');
    expect(Buffer.from(await hash.digest()).toString('hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    hash.reset();
    hash.update(new Uint8Array([97, 98, 99]));
    expect(Buffer.from(await hash.digest()).toString('hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it('NodeSha256 HMACs with a text secret right when the last one is remembered, and when it is not', async () => {
    const hmac = async (secret: string, ...pieces: (string | Uint8Array)[]) => {
      const hash = new NodeSha256(secret);
      for (const piece of pieces) hash.update(piece);
      return Buffer.from(await hash.digest()).toString('hex');
    };
    const expected = (secret: string, data: string) => createHmac('sha256', secret).update(data).digest('hex');
    const bytes = new Uint8Array(Buffer.from('AKIDEXAMPLE'));
    expect(await hmac('key', bytes)).toBe(expected('key', 'AKIDEXAMPLE'));
    bytes[0] = 0x42; // the remembered data is a copy
    expect(await hmac('key', 'AKIDEXAMPLE')).toBe(expected('key', 'AKIDEXAMPLE'));
    expect(await hmac('key', 'BKIDEXAMPLE')).toBe(expected('key', 'BKIDEXAMPLE'));
    expect(await hmac('other', 'BKIDEXAMPLE')).toBe(expected('other', 'BKIDEXAMPLE'));
    expect(await hmac('other', 'BKID', 'EXAMPLE')).toBe(expected('other', 'BKIDEXAMPLE'));
    expect(await hmac('other')).toBe(expected('other', ''));
    const keyed = new NodeSha256(new Uint8Array([1, 2, 3]));
    keyed.update('x');
    expect(Buffer.from(await keyed.digest()).toString('hex')).toBe(createHmac('sha256', Buffer.from([1, 2, 3])).update('x').digest('hex'));
  });

  it('signs host (with its port), content type, accept, body hash, date and session token', async () => {
    const signer = new BedrockSigner(new URL('http://127.0.0.1:8443/prefix'), 'eu-west-1', credentials);
    const headers = await signer.sign('/prefix/model/m/converse', '{}', 'application/json');
    expect(headers.host).toBe('127.0.0.1:8443');
    expect(headers['x-amz-content-sha256']).toBe('44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a');
    expect(headers['x-amz-security-token']).toBe('token');
    expect(headers.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/eu-west-1\/bedrock\/aws4_request, SignedHeaders=accept;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=[0-9a-f]{64}$/,
    );
  });
});
