// Types of @carmy/client (index.js). Rules: docs/semantics.md §7 (calls), §16 (held functions).

/** JSON values the gateway records and replays exactly. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A recorded outcome (docs/semantics.md §4). */
export interface Execution {
  execution_id: string;
  status: "completed" | "failed" | "timed_out" | "cancelled";
  data: Json;
  error: { code: string; message: string; effect?: "unknown"; details?: Json } | null;
  tool: string;
  request_id: string | null;
  session_id: string;
  replayed?: boolean;
  started_at: string;
  finished_at: string;
  resolution?: { by: string; at: string; note: string };
  expires_at?: string | null;
}

export interface RetryOptions {
  maxAttempts?: number;
  deadlineMs?: number;
  initialBackoffMs?: number;
  multiplier?: number;
  maxBackoffMs?: number;
  attemptTimeoutMs?: number;
}

export interface ClientOptions {
  apiKey?: string;
  retry?: RetryOptions;
  fetch?: typeof fetch;
}

export declare const DEFAULT_LEASE_MS: number;

export declare class CarmyError extends Error {
  readonly detail: string;
  readonly code: string;
  readonly status: number | null;
  executionId: string | null;
  readonly requestId: string | null;
  readonly problem: Record<string, unknown>;
}
export declare class ConflictError extends CarmyError {}
export declare class ExecutionUncertainError extends CarmyError {
  get state(): string | null;
}
export declare class UncertainRunningError extends ExecutionUncertainError {}
export declare class ExecutionInterrupted extends ExecutionUncertainError {}
export declare class ExecutionFinishedError extends CarmyError {}
export declare class ExecutionSupersededError extends CarmyError {
  get currentExecutionId(): string | null;
}
export declare class InvalidRequestError extends CarmyError {}
export declare class NotJsonError extends InvalidRequestError {}
export declare class NotFoundError extends CarmyError {}
export declare class UnauthorizedError extends CarmyError {}
export declare class UnavailableError extends CarmyError {}
export declare class ToolFailedError extends CarmyError {
  readonly execution: Execution;
}

export declare function errorFromProblem(
  status: number,
  problem: Record<string, unknown>,
  requestId?: string | null,
): CarmyError;
export declare function isRetryableAnswer(status: number, problem: Record<string, unknown>): boolean;
export declare function parseRetryAfter(value: string | null | undefined): number | null;
/** The JSON text of `value` if JSON carries it exactly; throws NotJsonError otherwise. */
export declare function checkJson(value: unknown, what: string): string;

/** A reconcile hook's answer: the effect happened; `value` becomes the outcome. */
export declare class Found<T = Json> {
  constructor(value: T);
  readonly value: T;
}
/** A reconcile hook's answer: proof that the effect did not happen. */
export declare class NotFound {}
/** What a reconcile hook returns; `null`: it cannot tell. */
export type Reconciliation<T = Json> = Found<T> | NotFound | null;

export interface HoldOptions<T = Json> {
  leaseMs?: number;
  sessionId?: string;
  metadata?: Record<string, Json>;
  reconcile?: () => Promise<Reconciliation<T>> | Reconciliation<T>;
}

export declare class Holding {
  /** The recorded outcome: do not run the function. */
  readonly replay: Execution | null;
  readonly executionId: string | null;
  readonly fencingToken: string | null;
  /** The released execution this reservation replaced (semantics.md §12.1); null otherwise. */
  readonly rerunOf: { execution_id: string; ended: "released"; by: string; note: string } | null;
  /** Set when the renewal found the execution decided by someone else. */
  readonly lost: boolean;
  readonly recorded: Execution | null;
  complete(value: Json): Promise<Execution>;
  fail(code: string, message: string, options?: { effectUnknown?: boolean }): Promise<Execution>;
  /** Ends the hold; `thrown` is recorded as `failed` `CLIENT_ERROR` (effect unknown). */
  close(thrown?: unknown): Promise<void>;
}

export declare class CarmyClient {
  constructor(baseUrl?: string, options?: ClientOptions);
  readonly baseUrl: string;
  execute(
    tool: string,
    args: Record<string, Json>,
    requestId?: string,
    options?: { sessionId?: string; metadata?: Record<string, Json> },
  ): Promise<Execution>;
  hold<T = Json>(
    tool: string,
    args: Record<string, Json>,
    requestId: string,
    options?: HoldOptions<T>,
  ): Promise<Holding>;
  request(
    method: string,
    path: string,
    text?: string | null,
    requestId?: string | null,
  ): Promise<{ status: number; body: any }>;
}

export interface HeldOptions<A extends unknown[], R> {
  /** The request id from the call's arguments (default: `requestId` of the last argument). */
  requestId?: (...args: A) => string;
  /** The arguments sent to Carmy (default: the first argument). */
  args?: (...args: A) => Record<string, Json>;
  reconcile?: (...args: A) => Promise<Reconciliation<R>> | Reconciliation<R>;
  leaseMs?: number;
  sessionId?: string;
}

/** Wraps an async function: it runs at most once per request id; retries return the record. */
export declare function held<A extends unknown[], R extends Json>(
  client: CarmyClient,
  tool: string,
  fn: (...args: A) => Promise<R>,
  options?: HeldOptions<A, R>,
): (...args: A) => Promise<R>;
