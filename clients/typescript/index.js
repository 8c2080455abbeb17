// Client for the Carmy gateway (docs/semantics.md §7, §16): calls with the retry discipline of
// the Python client, and functions held by this process (`held`, `client.hold`). ESM, no runtime
// dependencies beyond the platform's fetch (node 20+). Types: index.d.ts.

const HELD_PATH = "/v1/held";
export const DEFAULT_LEASE_MS = 30_000;

/** Base of every error for a gateway answer or a failed transport. */
export class CarmyError extends Error {
  constructor(detail, { code, status = null, executionId = null, requestId = null, problem = {} } = {}) {
    super(`${status !== null ? `${status} ` : ""}${code}: ${detail}${executionId ? ` (execution ${executionId})` : ""}`);
    this.name = new.target.name;
    this.detail = detail;
    this.code = code;
    this.status = status;
    this.executionId = executionId;
    this.requestId = requestId;
    this.problem = problem;
  }
}
/** 409 IDEMPOTENCY_CONFLICT: the request id holds a different call; never retried. */
export class ConflictError extends CarmyError {}
/** EXECUTION_UNCERTAIN: an execution holds the identity without an outcome. */
export class ExecutionUncertainError extends CarmyError {
  get state() { return typeof this.problem.state === "string" ? this.problem.state : null; }
}
/** Still running when the attempts or the deadline ran out: retry later with the same id. */
export class UncertainRunningError extends ExecutionUncertainError {}
/** Interrupted: its holder died; reconcile, then resolve or release. Never retried. */
export class ExecutionInterrupted extends ExecutionUncertainError {}
/** 409 EXECUTION_FINISHED: already has an outcome or was released (a holder lost it). */
export class ExecutionFinishedError extends CarmyError {}
/** 409 EXECUTION_SUPERSEDED: decided before this outcome arrived; kept as a late arrival. */
export class ExecutionSupersededError extends CarmyError {
  get currentExecutionId() {
    return typeof this.problem.current_execution_id === "string" ? this.problem.current_execution_id : null;
  }
}
/** 400 INVALID_REQUEST (and 408, 413, 415): fix the call; nothing was reserved. */
export class InvalidRequestError extends CarmyError {}
/** A value JSON cannot carry exactly: refused before anything is reserved. */
export class NotJsonError extends InvalidRequestError {}
/** 404 NOT_FOUND or UNKNOWN_TOOL. */
export class NotFoundError extends CarmyError {}
/** 401 UNAUTHORIZED. */
export class UnauthorizedError extends CarmyError {}
/** No answer, or 503, on every attempt until the attempts or the deadline ran out. */
export class UnavailableError extends CarmyError {}
/** The recorded outcome is not `completed`; `execution` holds the record. */
export class ToolFailedError extends CarmyError {
  constructor(execution) {
    const error = execution.error ?? {};
    super(error.message ?? execution.status, {
      code: error.code ?? execution.status,
      executionId: execution.execution_id,
      requestId: execution.request_id,
    });
    this.execution = execution;
  }
}

const BY_CODE = {
  IDEMPOTENCY_CONFLICT: ConflictError,
  INVALID_REQUEST: InvalidRequestError,
  PAYLOAD_TOO_LARGE: InvalidRequestError,
  UNSUPPORTED_MEDIA_TYPE: InvalidRequestError,
  REQUEST_TIMEOUT: InvalidRequestError,
  UNKNOWN_TOOL: NotFoundError,
  NOT_FOUND: NotFoundError,
  UNAUTHORIZED: UnauthorizedError,
  STORE_UNAVAILABLE: UnavailableError,
  EXECUTION_FINISHED: ExecutionFinishedError,
  EXECUTION_SUPERSEDED: ExecutionSupersededError,
};

/** The error for a non-2xx answer and its problem body. */
export function errorFromProblem(status, problem, requestId = null) {
  const code = typeof problem.code === "string" ? problem.code : `HTTP_${status}`;
  let Class = BY_CODE[code] ?? (status >= 502 && status <= 504 ? UnavailableError : CarmyError);
  if (code === "EXECUTION_UNCERTAIN") {
    Class = problem.state === "interrupted" ? ExecutionInterrupted : UncertainRunningError;
  }
  return new Class(typeof problem.detail === "string" ? problem.detail : `HTTP ${status}`, {
    code,
    status,
    executionId: typeof problem.execution_id === "string" ? problem.execution_id : null,
    requestId,
    problem,
  });
}

/** Whether a retry with the same request id may turn this answer into an outcome. */
export function isRetryableAnswer(status, problem) {
  if (status === 503) return true;
  if (status === 502 || status === 504) return typeof problem.code !== "string";
  return status === 409 && problem.code === "EXECUTION_UNCERTAIN" && problem.state === "running";
}

/** Seconds from a Retry-After header (delay-seconds or an HTTP date); null when unreadable. */
export function parseRetryAfter(value) {
  if (value == null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

/** The compact JSON text of `value` if JSON carries it exactly, else a NotJsonError. */
export function checkJson(value, what) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new NotJsonError(`${what} cannot be sent as JSON: ${error.message}`, { code: "INVALID_REQUEST" });
  }
  if (text === undefined || !carried(value)) {
    throw new NotJsonError(
      `${what} would not read back unchanged from JSON (undefined, functions, NaN, Infinity, Map, Set, Date or class instances change); convert it first`,
      { code: "INVALID_REQUEST" },
    );
  }
  return text;
}

function carried(value) {
  if (value === null || typeof value === "string" || typeof value === "boolean") return true;
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(carried);
  if (typeof value === "object") {
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return false;
    return Object.values(value).every(carried);
  }
  return false;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Effect found by a reconcile hook: `value` is recorded as the outcome. */
export class Found {
  constructor(value) { this.value = value; }
}
/** Proof from a reconcile hook that the effect did not happen: released and run again. */
export class NotFound {}

/** A Carmy client: `baseUrl`, `apiKey`, retry bounds (`maxAttempts`, `deadlineMs`, backoff). */
export class CarmyClient {
  constructor(baseUrl = "http://127.0.0.1:8080", options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? null;
    this.retry = {
      maxAttempts: 10,
      deadlineMs: 60_000,
      initialBackoffMs: 100,
      multiplier: 2,
      maxBackoffMs: 5_000,
      attemptTimeoutMs: 35_000,
      ...(options.retry ?? {}),
    };
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** Runs a gateway tool at most once per request id and returns its recorded outcome. */
  async execute(tool, args, requestId = crypto.randomUUID(), options = {}) {
    const body = { tool, arguments: args, request_id: requestId };
    if (options.sessionId !== undefined) body.session_id = options.sessionId;
    if (options.metadata !== undefined) body.metadata = options.metadata;
    return (await this.request("POST", "/v1/executions", checkJson(body, "the arguments"), requestId)).body;
  }

  /** Reserves `tool`'s identity for work this process runs (docs/semantics.md §16). */
  async hold(tool, args, requestId, options = {}) {
    const holding = new Holding(this, tool, args, requestId, options);
    await holding.enter();
    return holding;
  }

  /** One logical request with the retry discipline; resolves with the first 2xx answer. */
  async request(method, path, text = null, requestId = null) {
    const start = Date.now();
    const { maxAttempts, deadlineMs, initialBackoffMs, multiplier, maxBackoffMs, attemptTimeoutMs } = this.retry;
    let executionId = null;
    for (let attempt = 1; ; attempt += 1) {
      let error;
      let floorMs = 0;
      const left = deadlineMs - (Date.now() - start);
      const headers = { accept: "application/json" };
      if (text !== null) headers["content-type"] = "application/json";
      if (this.apiKey !== null) headers.authorization = `Bearer ${this.apiKey}`;
      let response;
      let raw;
      try {
        response = await this.fetch(`${this.baseUrl}${path}`, {
          method,
          headers,
          body: text,
          signal: AbortSignal.timeout(Math.max(1, Math.min(attemptTimeoutMs, left))),
        });
        raw = await response.text();
      } catch (caught) {
        error = new UnavailableError(
          `no answer from the gateway (${caught.name}: ${caught.message}); retry later with the same request id`,
          { code: "TRANSPORT", executionId, requestId },
        );
        error.cause = caught;
      }
      if (error === undefined) {
        if (response.ok) return { status: response.status, body: raw ? JSON.parse(raw) : null };
        let problem = {};
        try {
          const parsed = raw ? JSON.parse(raw) : {};
          if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) problem = parsed;
        } catch {}
        error = errorFromProblem(response.status, problem, requestId);
        if (error.executionId) executionId = error.executionId;
        else error.executionId = executionId;
        if (!isRetryableAnswer(response.status, problem)) throw error;
        floorMs = (parseRetryAfter(response.headers.get("retry-after")) ?? 0) * 1000;
      }
      if (attempt >= maxAttempts) throw error;
      const ceiling = Math.min(maxBackoffMs, initialBackoffMs * multiplier ** (attempt - 1));
      const delay = Math.max(Math.random() * ceiling, floorMs);
      if (delay >= deadlineMs - (Date.now() - start)) throw error;
      await sleep(delay);
    }
  }
}

function valueOf(execution) {
  if (execution.status === "completed") return execution.data;
  throw new ToolFailedError(execution);
}

/** One execution held by this process: `replay`, or a reservation to `complete` or `fail`. */
export class Holding {
  constructor(client, tool, args, requestId, options = {}) {
    const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    if (!(leaseMs >= 500 && leaseMs <= 600_000)) throw new RangeError("leaseMs must be between 500 and 600000");
    if (typeof requestId !== "string" || requestId === "") {
      throw new InvalidRequestError(`the request id must be a non-empty string (got ${requestId})`, { code: "INVALID_REQUEST" });
    }
    const body = { tool, arguments: args, request_id: requestId, lease_ms: leaseMs };
    if (options.sessionId !== undefined) body.session_id = options.sessionId;
    if (options.metadata !== undefined) body.metadata = options.metadata;
    this.client = client;
    this.requestId = requestId;
    this.reserveText = checkJson(body, "the arguments");
    this.reconcile = options.reconcile ?? null;
    this.leaseMs = leaseMs;
    this.replay = null;
    this.executionId = null;
    this.fencingToken = null;
    this.rerunOf = null;
    this.recorded = null;
    this.attempted = false;
    this.lost = false;
    this.timer = null;
  }

  async enter() {
    for (let round = 0; round < 2; round += 1) {
      let answer;
      try {
        answer = await this.client.request("POST", HELD_PATH, this.reserveText, this.requestId);
      } catch (error) {
        if (!(error instanceof ExecutionInterrupted) || this.reconcile === null || !error.executionId) throw error;
        const found = await this.reconcile();
        const path = `/v1/executions/${error.executionId}`;
        if (found instanceof Found) {
          const text = checkJson(
            { status: "completed", data: found.value, note: "reconciled by the client's reconcile hook: the effect was found" },
            "the found value",
          );
          this.replay = (await this.client.request("POST", `${path}/resolve`, text, this.requestId)).body;
          return;
        }
        if (found instanceof NotFound) {
          const text = JSON.stringify({ note: "reconciled by the client's reconcile hook: the effect did not happen" });
          await this.client.request("POST", `${path}/release`, text, this.requestId);
          continue;
        }
        throw error;
      }
      if (answer.status !== 201) {
        this.replay = answer.body;
        return;
      }
      this.executionId = answer.body.execution_id;
      this.fencingToken = answer.body.fencing_token;
      this.rerunOf = answer.body.rerun_of ?? null;
      this.leaseMs = answer.body.lease_ms;
      this.timer = setInterval(() => this.renew(), Math.max(100, this.leaseMs / 3));
      return;
    }
    throw new ExecutionInterrupted("the execution was interrupted again after its release", {
      code: "EXECUTION_UNCERTAIN",
      requestId: this.requestId,
    });
  }

  async renew() {
    try {
      const text = JSON.stringify({ fencing_token: this.fencingToken, lease_ms: this.leaseMs });
      await this.client.request("POST", `${HELD_PATH}/${this.executionId}/renew`, text, this.requestId);
    } catch (error) {
      if (error instanceof ExecutionFinishedError || error instanceof NotFoundError) {
        // After a record was sent, finished is its own doing.
        this.lost = !this.attempted;
        this.stop();
      }
    }
  }

  stop() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Records `value` as the outcome (`completed`); returns the record. */
  async complete(value) {
    try {
      checkJson(value, "the result");
    } catch (error) {
      await this.fail("RESULT_NOT_RECORDABLE", "the result cannot be recorded as JSON", { effectUnknown: false });
      throw error;
    }
    return this.record("completed", value, null);
  }

  /** Records a failure (`effect: "unknown"` unless `effectUnknown: false`). */
  async fail(code, message, { effectUnknown = true } = {}) {
    const error = { code, message };
    if (effectUnknown) error.effect = "unknown";
    return this.record("failed", null, error);
  }

  async record(status, data, error) {
    this.attempted = true;
    const text = checkJson({ fencing_token: this.fencingToken, status, data, error }, "the outcome");
    try {
      // The lease is renewed until the record is acknowledged: a record delayed by retries
      // must not find the execution interrupted.
      this.recorded = (await this.client.request("POST", `${HELD_PATH}/${this.executionId}/outcome`, text, this.requestId)).body;
    } finally {
      this.stop();
    }
    return this.recorded;
  }

  /** Ends the hold: an exception is recorded as `failed` `CLIENT_ERROR` (effect unknown). */
  async close(thrown = undefined) {
    this.stop();
    if (this.replay !== null || this.attempted || this.executionId === null) return;
    if (thrown !== undefined) {
      const message = String(thrown?.stack ?? thrown).slice(0, 4096);
      try {
        await this.record("failed", null, { code: "CLIENT_ERROR", message, effect: "unknown" });
      } catch {}
      return;
    }
    await this.fail("NO_OUTCOME", "the hold ended without complete() or fail()");
  }
}

/**
 * Wraps an async function (docs/semantics.md §16): `held(client, "charge", fn, { requestId,
 * reconcile, leaseMs })`. The wrapper takes the same arguments; `requestId(...args)` gives the
 * request id (default: the `requestId` member of the last argument), `args(...args)` the
 * arguments sent to Carmy (default: the first argument). It runs `fn` at most once per request
 * id across processes and returns the recorded value on every retry.
 */
export function held(client, tool, fn, options = {}) {
  const requestIdOf = options.requestId ?? ((...args) => args[args.length - 1]?.requestId);
  const argumentsOf = options.args ?? ((first) => first);
  return async (...args) => {
    const reconcile = options.reconcile ? () => options.reconcile(...args) : null;
    const holding = await client.hold(tool, argumentsOf(...args), requestIdOf(...args), {
      leaseMs: options.leaseMs,
      sessionId: options.sessionId,
      reconcile,
    });
    if (holding.replay !== null) return valueOf(holding.replay);
    let value;
    try {
      value = await fn(...args);
    } catch (error) {
      await holding.close(error);
      throw error;
    }
    // The record, not the value: the first answer is what every retry gets.
    return valueOf(await holding.complete(value));
  };
}
