"""The protocol's constants and frame encoding, for the host side: they live in the
standalone ``gammaboard_process`` package (its ``wire`` module), the one source both ends
share; this module keeps the old import path."""

from gammaboard_process.wire import (
    BINARY_LENGTH,
    CONTENT_LENGTH,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
    ERROR_CODE,
    JSONRPC_VERSION,
    LOG_LEVELS,
    LOG_SENTINEL,
    MAX_BINARY_BYTES,
    MAX_HEADER_LINE_BYTES,
    MAX_JSON_BYTES,
    MAX_STRAY_STDOUT_BYTES,
    PROTOCOL,
    ROLES,
    domain_shape,
    encode_frame,
    row_offsets,
    split_header,
)

__all__ = ["BINARY_LENGTH", "CONTENT_LENGTH", "DEFAULT_REQUEST_TIMEOUT",
           "DEFAULT_SHUTDOWN_GRACE", "DEFAULT_TERMINATE_GRACE", "ERROR_CODE", "JSONRPC_VERSION",
           "LOG_LEVELS", "LOG_SENTINEL", "MAX_BINARY_BYTES", "MAX_HEADER_LINE_BYTES",
           "MAX_JSON_BYTES", "MAX_STRAY_STDOUT_BYTES", "PROTOCOL", "ROLES", "domain_shape",
           "encode_frame", "row_offsets", "split_header"]
