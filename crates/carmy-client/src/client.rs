//! [`Client`] and [`ClientBuilder`]: the requests of docs/semantics.md §7 with the retry discipline
//! of [`crate::retry`].

use crate::call::Call;
use crate::error::{Error, TransportError};
use crate::retry::{classify, parse_retry_after, Answer, Budget, Decision, RetryPolicy};
use crate::wire::{Execution, Problem, Record, Tool, ToolList};
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{RequestBuilder, Url};
use std::time::{Duration, Instant};

/// A client of one Carmy gateway. Cheap to clone (clones share the connection pool).
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    authorization: Option<HeaderValue>,
    policy: RetryPolicy,
}

/// Configures a [`Client`]: see [`Client::builder`].
#[derive(Debug)]
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<String>,
    connect_timeout: Duration,
    policy: RetryPolicy,
    http: Option<reqwest::Client>,
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <api_key>` with every request (docs/semantics.md §6). Without a
    /// key the gateway must run in anonymous mode.
    #[must_use]
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Longest wait for a TCP (and TLS) connection. Default 5 s. Ignored with
    /// [`http_client`](Self::http_client).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest wait for one answer ([`RetryPolicy::attempt_timeout`]).
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.policy.attempt_timeout = timeout;
        self
    }

    /// The retry policy of every request (default [`RetryPolicy::default`]).
    #[must_use]
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Seconds to send as `Prefer: wait=N` with calls, or `None` for no header
    /// ([`RetryPolicy::prefer_wait`]).
    #[must_use]
    pub fn prefer_wait(mut self, seconds: Option<u32>) -> Self {
        self.policy.prefer_wait = seconds;
        self
    }

    /// Uses `http` for the requests (to share a pool, set proxies or TLS roots). Its own
    /// timeouts should not be shorter than the policy's attempt timeout.
    #[must_use]
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::Config`] when the base URL is not an absolute `http`/`https` URL, the API key
    /// cannot be sent in a header, the retry policy is invalid
    /// ([`RetryPolicy::validate`]), or the HTTP client cannot be built (TLS set-up).
    pub fn build(self) -> Result<Client, Error> {
        self.policy.validate()?;
        let mut base = Url::parse(&self.base_url)
            .map_err(|error| Error::Config(format!("base URL {:?}: {error}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::Config(format!(
                "base URL {:?} must be an http or https URL",
                self.base_url
            )));
        }
        // A trailing slash, so that relative joins keep a path prefix (`https://h/carmy/`).
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let authorization = self
            .api_key
            .map(|key| {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| Error::Config("the API key is not a valid header value".into()))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .connect_timeout(self.connect_timeout)
                .user_agent(concat!("carmy-client/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|error| Error::Config(format!("HTTP client: {error}")))?,
        };
        Ok(Client {
            http,
            base,
            authorization,
            policy: self.policy,
        })
    }
}

impl Client {
    /// A client of the gateway at `base_url` (e.g. `http://127.0.0.1:8080`) with the default
    /// [`RetryPolicy`], no API key and a 5 s connect timeout.
    ///
    /// # Errors
    /// [`Error::Config`] when `base_url` is not an absolute `http`/`https` URL.
    pub fn new(base_url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(base_url).build()
    }

    /// A builder for a client of the gateway at `base_url`.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            policy: RetryPolicy::default(),
            http: None,
        }
    }

    /// The retry policy in use.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Runs `call` through the gateway (`POST /v1/executions`) and returns its outcome, or the
    /// recorded outcome of an earlier attempt with the same identity (`replayed == true`).
    ///
    /// Every attempt sends the same body, hence the same request_id; failures that may still
    /// turn into an outcome are retried per the policy (see [`crate::retry`]). A tool that
    /// failed, timed out or was cancelled is an `Ok` outcome with that [`Status`](crate::Status):
    /// it was recorded and is never re-run.
    ///
    /// # Errors
    /// - [`Error::Conflict`]: the request_id was used for a different call; returned at once.
    /// - [`Error::Interrupted`]: the execution's process died; returned at once, reconcile it.
    /// - [`Error::StillRunning`]: a duplicate was still running when the budget ran out.
    /// - [`Error::Unavailable`]: retries ran out on transport failures or 503; whether the tool
    ///   ran is unknown until the same call is executed again.
    /// - [`Error::Capacity`], [`Error::Unauthorized`], [`Error::InvalidRequest`],
    ///   [`Error::UnknownTool`], [`Error::Problem`]: the gateway's answer, not retried.
    /// - [`Error::Transport`]: the request could not be sent at all.
    /// - [`Error::Protocol`]: a 2xx answer that is not an execution record.
    pub async fn execute(&self, call: &Call) -> Result<Execution, Error> {
        let body = serde_json::to_vec(call)
            .map_err(|error| Error::Protocol(format!("the call does not serialize: {error}")))?;
        let url = self.url(&["v1", "executions"])?;
        let answer = self
            .send(|prefer_wait| {
                let request = self
                    .http
                    .post(url.clone())
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.clone());
                match prefer_wait {
                    Some(seconds) => request.header("prefer", format!("wait={seconds}")),
                    None => request,
                }
            })
            .await?;
        match Record::from_json(&answer) {
            Ok(Record::Finished(execution)) => Ok(execution),
            Ok(Record::InFlight(in_flight)) => Err(Error::Protocol(format!(
                "a 2xx answer without an outcome (execution {})",
                in_flight.execution_id
            ))),
            Err(error) => Err(Error::Protocol(format!("execution record: {error}"))),
        }
    }

    /// Reads execution `execution_id` (`GET /v1/executions/{id}`): its outcome, or whether it
    /// is still running or was interrupted. Transport failures and 503 are retried.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the caller's principal has no such execution;
    /// [`Error::Unauthorized`], [`Error::Unavailable`], [`Error::Protocol`] as for
    /// [`execute`](Self::execute).
    pub async fn get_execution(&self, execution_id: &str) -> Result<Record, Error> {
        let url = self.url(&["v1", "executions", execution_id])?;
        let answer = self.send(|_| self.http.get(url.clone())).await?;
        Record::from_json(&answer).map_err(|error| Error::Protocol(format!("record: {error}")))
    }

    /// Lists the gateway's tools with their argument schemas (`GET /v1/tools`).
    ///
    /// # Errors
    /// [`Error::Unauthorized`], [`Error::Unavailable`], [`Error::Protocol`] as for
    /// [`execute`](Self::execute).
    pub async fn tools(&self) -> Result<Vec<Tool>, Error> {
        let url = self.url(&["v1", "tools"])?;
        let answer = self.send(|_| self.http.get(url.clone())).await?;
        serde_json::from_slice::<ToolList>(&answer)
            .map(|list| list.tools)
            .map_err(|error| Error::Protocol(format!("tool list: {error}")))
    }

    /// `base` with `segments` appended, each percent-encoded as one path segment.
    fn url(&self, segments: &[&str]) -> Result<Url, Error> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::Config("the base URL cannot take a path".into()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// Sends the request made by `build` (given the attempt's `Prefer: wait` seconds) until
    /// [`classify`] accepts or fails it; returns the 2xx body.
    async fn send(&self, build: impl Fn(Option<u32>) -> RequestBuilder) -> Result<Vec<u8>, Error> {
        let mut budget = Budget::new(&self.policy, Instant::now());
        loop {
            let plan = budget.plan(Instant::now());
            let mut request = build(plan.prefer_wait)
                .timeout(plan.timeout)
                .header(ACCEPT, "application/json, application/problem+json");
            if let Some(authorization) = &self.authorization {
                request = request.header(AUTHORIZATION, authorization.clone());
            }
            let (answer, body) = exchange(request).await;
            let (retry_after, failure) = match classify(answer) {
                Decision::Accept => return Ok(body),
                Decision::Fail(error) => return Err(error),
                Decision::Retry {
                    retry_after,
                    failure,
                } => (retry_after, failure),
            };
            // The thread-local generator is not held across the await below.
            let delay = budget.next_delay(
                retry_after,
                failure,
                Instant::now(),
                &mut rand::thread_rng(),
            )?;
            tokio::time::sleep(delay).await;
        }
    }
}

/// One attempt: the answer as [`classify`] reads it, and the body of a 2xx answer.
async fn exchange(request: RequestBuilder) -> (Answer, Vec<u8>) {
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return (
                Answer::Transport(TransportError::from_reqwest(&error)),
                vec![],
            )
        }
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_retry_after);
    // The whole body is part of the answer: one cut short is a transport failure.
    let body = match response.bytes().await {
        Ok(body) => body.to_vec(),
        Err(error) => {
            return (
                Answer::Transport(TransportError::from_reqwest(&error)),
                vec![],
            )
        }
    };
    if status.is_success() {
        (Answer::Success, body)
    } else {
        let problem = Problem::from_answer(status.as_u16(), &body);
        (
            Answer::Problem {
                problem,
                retry_after,
            },
            vec![],
        )
    }
}
