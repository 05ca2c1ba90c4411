# One image for every inflight subcommand: the container's args pick the service
# (router, scaler, emulator, up, bench, dashboards), e.g. `docker run IMAGE router --help`.
# The Kubernetes manifests (manifests/) run it as router, scaler and emulator.
#
#   docker build -t inflight:0.1.0 .
#
# (No Docker engine runs where the tests run; instead hadolint lints this file
# (tests/component/test_manifests_dockerfile_lint.py) and tests/unit/
# test_manifests_dockerfile.py checks it against the repository and the manifests.)

# --- build: wheels for inflight and every dependency, so the runtime stage needs no
# compiler and no network.
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY inflight/ inflight/
COPY router/ router/
COPY external_scaler/ external_scaler/
COPY emulator/ emulator/
COPY orchestrator/ orchestrator/
COPY bench/ bench/
COPY dashboards/ dashboards/
RUN pip wheel --wheel-dir /wheels .

# --- runtime: the wheels installed, nothing else; runs as an unprivileged user whose
# uid the manifests' securityContext names (runAsUser 10001).
FROM python:3.11-slim-bookworm
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN groupadd --gid 10001 inflight \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin inflight
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels /wheels/inflight-*.whl && rm -rf /wheels
USER 10001:10001
# router and emulator: HTTP 8000; scaler: gRPC 9090 and metrics 9091.
EXPOSE 8000 9090 9091
ENTRYPOINT ["inflight"]
CMD ["--help"]
