"""A minimal OTLP/HTTP trace receiver for the gateway's trace test.

It decodes each POST to /v1/traces (protobuf, optionally gzip) with the official
`opentelemetry-proto` bindings and appends one JSON line per request and per span to the file
named by its first argument:
  {"request": {"path": ..., "content_type": ..., "spans": N}}
  {"span": {"trace_id", "span_id", "parent_span_id" (hex, "" for a root), "name", "kind",
            "attributes": {key: value}, "service": service.name, "scope": scope name}}
It listens on 127.0.0.1 at the port of its second argument (default: a free one), which it
prints as its first line on stdout, and runs until it is killed. Anything it cannot decode is answered 400 and recorded as a request with
"error".
"""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUTPUT = sys.argv[1]
LOCK = Lock()


def any_value(value):
    """An OTLP AnyValue as plain JSON."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(pairs):
    return {kv.key: any_value(kv.value) for kv in pairs}


def write(lines):
    with LOCK, open(OUTPUT, "a", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line, sort_keys=True) + "\n")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        content_type = self.headers.get("Content-Type", "")
        request = {"path": self.path, "content_type": content_type}
        try:
            if self.headers.get("Content-Encoding", "") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or content_type != "application/x-protobuf":
                raise ValueError("expected a protobuf POST to /v1/traces")
            export = ExportTraceServiceRequest()
            export.ParseFromString(body)
        except Exception as error:  # recorded for the test to show, answered 400
            request["error"] = str(error)
            write([{"request": request}])
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        lines = []
        for resource_spans in export.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append({"span": {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "attributes": attributes(span.attributes),
                        "service": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                    }})
        request["spans"] = len(lines)
        write([{"request": request}] + lines)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format, *args):
        pass


def main():
    open(OUTPUT, "a", encoding="utf-8").close()
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
