# chatd worker/API image. Build: docker build -t chatd . ; run `chatd worker`, `chatd api` or
# `chatd codec-server` (8089). All read CHATD_CODEC_KEYS from the environment, never the image.
# The processes run as uid 10001 and write nothing but the workspace volume: /app and the
# installed package stay root-owned, so the container's root filesystem can be read-only.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Copy only what the package build needs (keeps .venv, .data and caches out of the image).
COPY pyproject.toml README.md ./
COPY chatd ./chatd
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
COPY api ./api

# bubblewrap: the sandbox `execute` runs commands in (only used when CHATD_ENABLE_EXECUTE=1).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

# The tool workspaces' mount point, owned by the runtime user: a named volume mounted there
# starts as a copy of it (owner included), so the workers can create chats' directories.
RUN pip install . \
    && useradd --create-home --uid 10001 --user-group chatd \
    && mkdir -p /var/lib/chatd/workspaces \
    && chown 10001:10001 /var/lib/chatd/workspaces

ENV CHATD_WORKSPACE_ROOT=/var/lib/chatd/workspaces
USER 10001:10001
EXPOSE 8080 8089

CMD ["chatd", "api", "--host", "0.0.0.0", "--port", "8080"]
