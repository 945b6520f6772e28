# syntax=docker/dockerfile:1
#
# One image for every ackloop process. FUNCTION_TARGET picks what `ackloop run` serves:
# ingest | model_step | tool_step | dead_letter (push endpoints, ASGI) or api (FastAPI).
# Cloud Run and Vertex AI Agent Engine both route HTTP to 0.0.0.0:$PORT (8080 unless set).
#
# Reproducible: third-party packages come only from requirements.lock (hashes required); the
# build tools for ackloop's own wheel come only from requirements-build.lock. Regenerate both with
# the commands in their headers after changing pyproject.toml. For bit-for-bit rebuilds, pin both
# FROM lines to a digest (python:3.11-slim-bookworm@sha256:...); they must name the same image,
# because the virtualenv built in the first stage links to the second stage's interpreter.

FROM python:3.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# Dependencies first: this layer is reused until a lock file changes.
COPY requirements.lock requirements-build.lock ./
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --require-hashes --no-deps -r requirements-build.lock \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes --no-deps -r requirements.lock

# ackloop itself, as a wheel built without network access (its build tools are installed above).
COPY pyproject.toml README.md LICENSE ./
COPY shared ./shared
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && /opt/venv/bin/pip install --no-deps /wheels/ackloop-*.whl \
    && /opt/venv/bin/pip check


FROM python:3.11-slim-bookworm AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=8080

# A fixed uid so platform policies (runAsNonRoot) can check it without reading /etc/passwd.
RUN groupadd --system --gid 10001 ackloop \
    && useradd --system --uid 10001 --gid ackloop --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin ackloop

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY functions ./functions

USER 10001:10001
EXPOSE 8080

# Cloud Run and Agent Engine probe the port themselves and ignore Docker's HEALTHCHECK.
#checkov:skip=CKV_DOCKER_2:Cloud Run and Agent Engine use their own startup/liveness probes on $PORT; Docker HEALTHCHECK is ignored there.
CMD ["ackloop", "run"]
