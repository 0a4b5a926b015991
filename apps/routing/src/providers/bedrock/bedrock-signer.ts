import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { fromNodeProviderChain } from '@aws-sdk/credential-providers';
import { HttpRequest } from '@smithy/protocol-http';
import { SignatureV4 } from '@smithy/signature-v4';

type Credentials = ConstructorParameters<typeof SignatureV4>[0]['credentials'];
type SecretInput = string | ArrayBuffer | ArrayBufferView;

/**
 * SHA-256 (and HMAC-SHA-256 with a secret) from node:crypto behind the Checksum interface the signer
 * takes: what the AWS SDK itself uses on Node (@smithy/hash-node). The pure-JS @aws-crypto/sha256-js was
 * half of the signing CPU (a bench profile: RawSha256 at ~50 % of SignatureV4.sign).
 */
export class NodeSha256 {
  private hash: Hash | Hmac;

  constructor(private readonly secret?: SecretInput) {
    this.hash = NodeSha256.create(secret);
  }

  private static create(secret: SecretInput | undefined): Hash | Hmac {
    if (secret === undefined) return createHash('sha256');
    const key = typeof secret === 'string' ? secret : ArrayBuffer.isView(secret) ? Buffer.from(secret.buffer, secret.byteOffset, secret.byteLength) : Buffer.from(secret);
    return createHmac('sha256', key);
  }

  update(data: SecretInput): void {
    this.hash.update(typeof data === 'string' ? data : ArrayBuffer.isView(data) ? Buffer.from(data.buffer, data.byteOffset, data.byteLength) : Buffer.from(data));
  }

  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.hash.digest()));
  }

  reset(): void {
    this.hash = NodeSha256.create(this.secret);
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
