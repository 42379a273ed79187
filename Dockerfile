# Image for compose.yaml: mainboard with its runtime dependencies.
# .dockerignore keeps .venv, .git, .mainboard/ (broker password, receipts), .env and build or
# test artifacts out of `COPY . .`; deploy/ stays in (Flower's config is read from it).
FROM python:3.11-slim
WORKDIR /opt/mainboard
COPY . .
RUN pip install --no-cache-dir . && useradd -m mainboard
USER mainboard
