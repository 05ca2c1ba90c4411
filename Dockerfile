# One image for every inflight subcommand: the container's args pick the service
# (router, scaler, emulator, up, bench, dashboards), e.g. `docker run IMAGE router --help`.
# The Kubernetes manifests (manifests/) run it as router, scaler and emulator, configured
# through INFLIGHT_* environment variables.
#
#   make image                      # podman (scripts/image.sh); any engine works:
#   docker build -t inflight:0.1.0 .
#
# tests/integration/test_image.py builds it and runs router, scaler and emulator containers;
# hadolint lints this file (tests/component/test_manifests_dockerfile_lint.py) and
# tests/unit/test_manifests_dockerfile.py checks it against the repository and manifests.

# --- build: wheels for inflight and every dependency, so the runtime stage needs no
# compiler and no network.
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY inflight/ inflight/
COPY router/ router/
COPY external_scaler/ external_scaler/
COPY dashboards/ dashboards/
RUN pip wheel --wheel-dir /wheels .

# --- runtime: the wheels installed, nothing else; runs as an unprivileged user whose
# uid the manifests' securityContext names (runAsUser 10001). The plain package: what only
# `inflight bench` and `inflight dashboards` import is in the extras inflight[bench] and
# inflight[dashboards], left out here (budget: 150 MB over the base, test_image.py).
FROM python:3.11-slim-bookworm
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN groupadd --gid 10001 inflight \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin inflight
# The wheels are mounted, not copied: a COPY layer would keep them in the image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/inflight-*.whl
USER 10001:10001
# router and emulator: HTTP 8000; scaler: gRPC 9090 and metrics 9091.
EXPOSE 8000 9090 9091
ENTRYPOINT ["inflight"]
CMD ["--help"]
