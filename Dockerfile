# Image for compose.yaml: mainboard with its runtime dependencies.
FROM python:3.11-slim
WORKDIR /opt/mainboard
COPY . .
RUN pip install --no-cache-dir . && useradd -m mainboard
USER mainboard
