# chatd worker/API image. Build: docker build -t chatd . ; run `chatd worker`, `chatd api` or
# `chatd codec-server` (8089). All read CHATD_CODEC_KEYS from the environment, never the image.
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

RUN pip install . \
    && useradd --create-home --uid 10001 --user-group chatd

USER chatd
EXPOSE 8080 8089

CMD ["chatd", "api", "--host", "0.0.0.0", "--port", "8080"]
