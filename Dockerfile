# The carmy-gateway image: a release build on Debian bookworm, run as an unprivileged user.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p carmy-gateway

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 carmy
COPY --from=build /src/target/release/carmy-gateway /usr/local/bin/carmy-gateway
USER carmy
ENV CARMY_LISTEN=0.0.0.0:8080 \
    CARMY_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=12 CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/carmy-gateway"]
