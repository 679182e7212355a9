# The Sandgate gateway image: one static binary on scratch, running as a
# non-root numeric user (65532), with a CA bundle for rediss:// and OTLP.
# The binary is bin/gateway from `make build` (scripts/build.sh: static,
# -trimpath, stripped, version stamped), the one way to get it; the image
# copies it rather than compile it again with other flags:
#
#   make build && docker build -t sandgate-gateway:latest \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" .
#
# For another architecture: make build GOARCH=arm64, then docker build
# --platform linux/arm64. Without a registry (debian cannot be pulled) build
# the same final stage from the same binary and this host's CA bundle:
#   deployments/gateway-image/build.sh sandgate-gateway:latest
# The final stage here and in deployments/gateway-image/Dockerfile.prebuilt
# are the same text; test/deploy checks that and tests the built image.
#
# No HEALTHCHECK (Kubernetes ignores it, and compose's nginx does not read
# it; the image has no shell or curl to run one): probe GET /healthz (the
# process is alive) and GET /readyz (Redis and the backend answer, not
# draining) on port 8080, both open without credentials. The gateway refuses
# a non-loopback listener without authentication: configure
# SANDGATE_AUTH_API_KEYS or a JWT issuer (SANDGATE_AUTH_JWT_*), or set
# SANDGATE_INSECURE=true only where nothing untrusted reaches the port.
# docs/DEPLOYMENT.md has the details.

# The CA bundle is the same for every architecture: fetched once, on the
# build machine's platform.
FROM --platform=$BUILDPLATFORM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY bin/gateway /rootfs/gateway
COPY deployments/gateway-image/rootfs/etc/passwd deployments/gateway-image/rootfs/etc/group /rootfs/etc/
# The rest of the root filesystem, laid out as build.sh lays out its context.
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/data /rootfs/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/

# ---- final stage: keep identical to deployments/gateway-image/Dockerfile.prebuilt ----
FROM scratch AS gateway
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sandgate-gateway" \
      org.opencontainers.image.description="Sandgate: one stable URL per agent thread for its own code sandbox" \
      org.opencontainers.image.source="https://github.com/sandgate/sandgate" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /rootfs/etc/ /etc/
COPY --from=build --chown=65532:65532 /rootfs/data/ /data/
COPY --from=build --chown=65532:65532 /rootfs/tmp/ /tmp/
COPY --from=build /rootfs/gateway /gateway
USER 65532:65532
WORKDIR /data
ENV SANDGATE_LISTEN=0.0.0.0:8080 \
    SANDGATE_DATA_DIR=/data \
    SANDGATE_LOG_FORMAT=json
EXPOSE 8080
ENTRYPOINT ["/gateway"]
CMD ["serve"]
