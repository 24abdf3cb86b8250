"""The server's HTTP protocol: uvicorn's h11 protocol with the answers it gives on its own made ours.

uvicorn answers some requests before the app sees them, and lets some connections be for ever:
- a request line or headers that do not parse got a text/plain 400: here a problem+json
  ``invalid_request``, as from the app;
- a connection that opens and sends nothing, or half a request line and headers, was never closed
  (uvicorn's keep-alive timer runs only after a response): here the line and headers must all
  arrive within ``header_timeout_s`` of the connection opening, or of the previous response, or the
  connection gets 408 ``header_timeout`` and is closed;
- a client that half-closes its side mid-body (FIN before the bytes its Content-Length announced:
  an upload cut on its way) was disconnected with no answer: here the app sees the body end where
  it stopped, so the upload code refuses it (``incomplete_upload``) on a socket the client still reads.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import HeadersTooSlow, InvalidRequest, QuantCompareError
from service.schemas.api import PROBLEM_MEDIA_TYPE, problem_from_error


def problem_bytes(error: QuantCompareError) -> bytes:
    """A whole HTTP/1.1 response carrying ``error`` as problem+json, closing the connection."""
    body = json.dumps(problem_from_error(error)).encode()
    head = (f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n"
            f"content-type: {PROBLEM_MEDIA_TYPE}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class EdgeProtocol(H11Protocol):
    header_timeout_s: float = 15.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._header_timer = None
        self._half_closed = False
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    # -- header timeout ----------------------------------------------------------------------
    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self._answer_and_close(HeadersTooSlow(
                f"the request line and headers did not all arrive within {self.header_timeout_s:g} s",
                hint="send the whole request head at once; the server closes idle connections "
                     "(QUANTCOMPARE_HEADER_TIMEOUT_S)"))

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:  # the first bytes of a new request
            self._arm_header_timer()
        super().data_received(data)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:  # a request line and its headers arrived: the app has it now
            self._disarm_header_timer()

    # -- answers the protocol gives itself ---------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        self._answer_and_close(InvalidRequest(
            "the HTTP request is malformed: its request line or headers do not parse",
            hint="send an HTTP/1.1 request (curl or any HTTP client builds one)"))

    def _answer_and_close(self, error: QuantCompareError) -> None:
        self._disarm_header_timer()
        self.transport.write(problem_bytes(error))
        self.transport.close()

    # -- a body cut short ---------------------------------------------------------------------
    def eof_received(self) -> bool | None:
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.response_complete and not cycle.disconnected:
            # The client half-closed mid-body: end the body where it stopped (the app compares it with
            # Content-Length and the form's closing boundary) and keep our side open for the answer.
            self._half_closed = True
            cycle.more_body = False
            cycle.message_event.set()
            return True
        return None

    def on_response_complete(self) -> None:
        if self._half_closed:
            self.transport.close()
            return
        super().on_response_complete()


def edge_protocol(header_timeout_s: float) -> type[EdgeProtocol]:
    """The protocol class uvicorn runs (``uvicorn.run(..., http=edge_protocol(...))``)."""
    return type("EdgeProtocol", (EdgeProtocol,), {"header_timeout_s": header_timeout_s})
