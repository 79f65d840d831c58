// Typed errors: every failed call rejects with a MemMachineError (a subclass per gRPC
// code), carrying the google.rpc details the server sent, decoded.
import { createRegistry, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  type BadRequest,
  BadRequestSchema,
  type BadRequest_FieldViolation,
  type ErrorInfo,
  ErrorInfoSchema,
  type ResourceInfo,
  ResourceInfoSchema,
  type RetryInfo,
  RetryInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";

export { Code };
export type { BadRequest, BadRequest_FieldViolation, ErrorInfo, ResourceInfo, RetryInfo };

/** A detail of a type this client does not know: its type name and raw bytes. */
export interface UnknownDetail {
  $typeName: "unknown";
  type: string;
  value: Uint8Array;
}

export type ErrorDetail = ErrorInfo | BadRequest | RetryInfo | ResourceInfo | UnknownDetail;

const detailRegistry = createRegistry(
  ErrorInfoSchema,
  BadRequestSchema,
  RetryInfoSchema,
  ResourceInfoSchema,
);

export class MemMachineError extends Error {
  /** The gRPC status code. */
  readonly code: Code;
  /** The server's message, without connect's "[code]" prefix. */
  readonly rawMessage: string;
  /** Decoded google.rpc details, in the order the server sent them. */
  readonly details: ErrorDetail[];
  /** Response metadata (headers and trailers) of the failed call. */
  readonly metadata: Headers;

  constructor(code: Code, message: string, details: ErrorDetail[] = [], metadata = new Headers(), cause?: unknown) {
    super(`[${codeName(code)}] ${message}`, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.rawMessage = message;
    this.details = details;
    this.metadata = metadata;
  }

  get codeName(): string {
    return codeName(this.code);
  }

  /** google.rpc.BadRequest field violations (empty when none were sent). */
  get fieldViolations(): BadRequest_FieldViolation[] {
    return this.details.flatMap((d) => (d.$typeName === "google.rpc.BadRequest" ? d.fieldViolations : []));
  }

  get errorInfo(): ErrorInfo | undefined {
    return this.details.find((d): d is ErrorInfo => d.$typeName === "google.rpc.ErrorInfo");
  }

  /** How long the server asked the client to wait (RetryInfo or grpc-retry-pushback-ms);
   * -1 when it said waiting does not help; undefined when it said nothing. */
  get retryAfterMs(): number | undefined {
    const pushback = this.metadata.get("grpc-retry-pushback-ms");
    if (pushback !== null && pushback.trim() !== "") return Number(pushback);
    const info = this.details.find((d): d is RetryInfo => d.$typeName === "google.rpc.RetryInfo");
    const delay = info?.retryDelay;
    if (delay === undefined) return undefined;
    return Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6);
  }
}

export class CanceledError extends MemMachineError {}
export class UnknownError extends MemMachineError {}
export class InvalidArgumentError extends MemMachineError {}
export class DeadlineExceededError extends MemMachineError {}
export class NotFoundError extends MemMachineError {}
export class AlreadyExistsError extends MemMachineError {}
export class PermissionDeniedError extends MemMachineError {}
export class ResourceExhaustedError extends MemMachineError {}
export class FailedPreconditionError extends MemMachineError {}
export class AbortedError extends MemMachineError {}
export class OutOfRangeError extends MemMachineError {
  /** For a pruned watch cursor: the oldest cursor still kept (ErrorInfo CURSOR_PRUNED). */
  get resumeAfter(): string | undefined {
    return this.errorInfo?.metadata["resume_after"];
  }
}
export class UnimplementedError extends MemMachineError {}
export class InternalError extends MemMachineError {}
export class UnavailableError extends MemMachineError {}
export class DataLossError extends MemMachineError {}
export class UnauthenticatedError extends MemMachineError {}

type ErrorClass = new (code: Code, message: string, details?: ErrorDetail[], metadata?: Headers, cause?: unknown) => MemMachineError;

const classes: Record<Code, ErrorClass> = {
  [Code.Canceled]: CanceledError,
  [Code.Unknown]: UnknownError,
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
  [Code.NotFound]: NotFoundError,
  [Code.AlreadyExists]: AlreadyExistsError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
  [Code.FailedPrecondition]: FailedPreconditionError,
  [Code.Aborted]: AbortedError,
  [Code.OutOfRange]: OutOfRangeError,
  [Code.Unimplemented]: UnimplementedError,
  [Code.Internal]: InternalError,
  [Code.Unavailable]: UnavailableError,
  [Code.DataLoss]: DataLossError,
  [Code.Unauthenticated]: UnauthenticatedError,
};

/** "INVALID_ARGUMENT" for Code.InvalidArgument (gRPC's spelling). */
export function codeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

export function makeError(code: Code, message: string, details: ErrorDetail[] = [], metadata?: Headers, cause?: unknown): MemMachineError {
  return new classes[code](code, message, details, metadata, cause);
}

/** Wraps anything a call threw as a MemMachineError (unchanged when it is one). */
export function toMemMachineError(err: unknown): MemMachineError {
  if (err instanceof MemMachineError) return err;
  const ce = ConnectError.from(err);
  const details: ErrorDetail[] = ce.details.map((d) => {
    if ("desc" in d) return { $typeName: "unknown", type: d.desc.typeName, value: new Uint8Array() };
    const known = detailRegistry.getMessage(d.type);
    if (known === undefined) return { $typeName: "unknown", type: d.type, value: d.value };
    return fromBinary(known, d.value) as ErrorDetail;
  });
  // connect reports a connection lost mid-call as CANCELLED ("http/2 stream closed"),
  // INTERNAL or UNKNOWN with the socket's error; it is the network's failure, not the
  // server's nor the caller's, so it is UNAVAILABLE here.
  const lost = [Code.Canceled, Code.Internal, Code.Unknown].includes(ce.code) && lostConnection(ce);
  const code = lost ? Code.Unavailable : ce.code;
  return makeError(code, ce.rawMessage, details, ce.metadata, err);
}

function lostConnection(ce: ConnectError): boolean {
  const causes: string[] = [ce.rawMessage];
  for (let c: unknown = ce.cause, i = 0; c instanceof Error && i < 5; c = c.cause, i++) {
    causes.push(c.message, String((c as { code?: unknown }).code ?? ""));
  }
  return /ECONNRESET|ECONNREFUSED|EPIPE|socket hang up|stream closed|terminated|fetch failed|other side closed|GOAWAY|NGHTTP2|ERR_HTTP2/i.test(causes.join(" "));
}
