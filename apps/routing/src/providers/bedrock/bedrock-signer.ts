import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { fromNodeProviderChain } from '@aws-sdk/credential-providers';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';

type Credentials = ConstructorParameters<typeof SignatureV4>[0]['credentials'];
type SecretInput = string | ArrayBuffer | ArrayBufferView;

const asBuffer = (data: SecretInput): Buffer =>
  typeof data === 'string' ? Buffer.from(data) : ArrayBuffer.isView(data) ? Buffer.from(data.buffer, data.byteOffset, data.byteLength) : Buffer.from(data);

/** The last HMAC computed with a text secret over one piece of data (see NodeSha256). */
let lastTextHmac: { secret: string; data: Buffer; digest: Buffer } | undefined;

/**
 * SHA-256 (and HMAC-SHA-256 with a secret) from node:crypto behind the Checksum interface the signer
 * takes: what the AWS SDK itself uses on Node (@smithy/hash-node). The pure-JS @aws-crypto/sha256-js was
 * half of the signing CPU (a bench profile: RawSha256 at ~50 % of SignatureV4.sign).
 *
 * An HMAC keyed by a text secret over a single piece of data is remembered (the last one): SignatureV4
 * computes HMAC(secret access key, access key id) on every request only to name its signing-key cache
 * entry, the same value each time. Other hashes are computed as they come.
 */
export class NodeSha256 {
  private hash: Hash | Hmac | undefined;
  /** With a text secret, the first piece of data, held until `digest` (or a second `update`). */
  private held: Buffer | undefined;

  constructor(private readonly secret?: SecretInput) {
    this.reset();
  }

  private create(): Hash | Hmac {
    const secret = this.secret;
    if (secret === undefined) return createHash('sha256');
    return createHmac('sha256', typeof secret === 'string' ? secret : asBuffer(secret));
  }

  update(data: SecretInput): void {
    if (this.hash === undefined) {
      if (this.held === undefined) {
        // Copied: the caller may reuse its bytes after update.
        this.held = Buffer.from(asBuffer(data));
        return;
      }
      this.hash = this.create().update(this.held);
      this.held = undefined;
    }
    this.hash.update(asBuffer(data));
  }

  digest(): Promise<Uint8Array> {
    if (this.hash !== undefined) return Promise.resolve(this.hash.digest());
    const secret = this.secret as string;
    const data = this.held ?? Buffer.alloc(0);
    const last = lastTextHmac;
    if (last !== undefined && last.secret === secret && last.data.equals(data)) return Promise.resolve(Buffer.from(last.digest));
    const digest = createHmac('sha256', secret).update(data).digest();
    lastTextHmac = { secret, data, digest };
    return Promise.resolve(Buffer.from(digest));
  }

  reset(): void {
    this.held = undefined;
    this.hash = typeof this.secret === 'string' ? undefined : this.create();
  }
}

export interface BedrockCredentialOptions {
  /** The catalog named key variables (`access_key_id_env`): then only those keys are used, never the chain. */
  staticKeysNamed?: boolean | undefined;
  accessKeyId?: string | undefined;
  secretAccessKey?: string | undefined;
  sessionToken?: string | undefined;
}

/**
 * Static credentials when the catalog names both key variables; otherwise the
 * standard AWS chain (environment, SSO, shared files, web identity, ECS / EC2 metadata). The chain's
 * provider is created once per adapter: it caches what it resolved and refreshes it before expiry.
 */
export function bedrockCredentials(options: BedrockCredentialOptions): Credentials {
  if (options.accessKeyId && options.secretAccessKey) {
    return {
      accessKeyId: options.accessKeyId,
      secretAccessKey: options.secretAccessKey,
      ...(options.sessionToken ? { sessionToken: options.sessionToken } : {}),
    };
  }
  // Named but unset: every request fails as misconfigured rather than signing with whatever the chain finds.
  if (options.staticKeysNamed) return () => Promise.reject(new Error('the access key variables the catalog names are not set'));
  return fromNodeProviderChain();
}

/**
 * SigV4 for one Bedrock Runtime endpoint (service `bedrock`). The signer (with its cached signing key)
 * and the parts of the URL are made once per adapter; per request only the canonical request is built
 * and hashed, natively (NodeSha256). The body's hash goes in `x-amz-content-sha256`, which the signer
 * takes as the payload hash.
 */
export class BedrockSigner {
  private readonly signer: SignatureV4;
  private readonly protocol: string;
  private readonly hostname: string;
  private readonly port: number | undefined;
  /** Host header as sent: with the port when it is not the scheme's default. */
  readonly host: string;

  constructor(baseUrl: URL, region: string, credentials: Credentials) {
    this.signer = new SignatureV4({ service: 'bedrock', region, credentials, sha256: NodeSha256 });
    this.protocol = baseUrl.protocol;
    this.hostname = baseUrl.hostname;
    this.port = baseUrl.port ? Number(baseUrl.port) : undefined;
    this.host = baseUrl.host;
  }

  /**
   * The headers of a signed POST of `body` to `path` (the path exactly as it goes on the wire, model id
   * already percent-encoded: SigV4 encodes it once more for the canonical request, as the service does).
   */
  async sign(path: string, body: string, accept: string): Promise<Record<string, string>> {
    const request = new HttpRequest({
      method: 'POST',
      protocol: this.protocol,
      hostname: this.hostname,
      ...(this.port !== undefined ? { port: this.port } : {}),
      path,
      headers: {
        host: this.host,
        'content-type': 'application/json',
        accept,
        'x-amz-content-sha256': createHash('sha256').update(body).digest('hex'),
      },
      body,
    });
    const signed = await this.signer.sign(request);
    return signed.headers;
  }
}
