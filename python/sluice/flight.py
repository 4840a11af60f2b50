"""A pyarrow.flight client for `sluice flight` (or `sluice dev --flight`)
that sends the cluster token with every call. Plain pyarrow.flight works
as well: pass ``authorization: Bearer TOKEN`` in FlightCallOptions headers.

    import sluice.flight
    client = sluice.flight.connect()     # SLUICE_FLIGHT / SLUICE_TOKEN
    for f in client.list_flights(): ...
    info = client.get_flight_info(sluice.flight.descriptor("points", batch_size=256, world_size=4))
"""
import json
import os

import pyarrow.flight as fl

from ._lib import SluiceError

__all__ = ["connect", "descriptor", "ticket"]


class _Bearer(fl.ClientMiddleware):
    def __init__(self, header):
        self._header = header

    def sending_headers(self):
        return {"authorization": self._header}


class _BearerFactory(fl.ClientMiddlewareFactory):
    def __init__(self, token):
        self._header = "Bearer " + token

    def start_call(self, info):
        return _Bearer(self._header)


def connect(location=None, token=None, **kwargs):
    """A pyarrow.flight.FlightClient for location (default SLUICE_FLIGHT)
    whose every call carries token (default SLUICE_TOKEN). kwargs go to
    pyarrow.flight.connect (tls_root_certs=..., ...)."""
    location = location or os.environ.get("SLUICE_FLIGHT", "")
    token = token or os.environ.get("SLUICE_TOKEN", "")
    if not location or not token:
        raise SluiceError("sluice: no Flight location or token (pass them, or set SLUICE_FLIGHT and SLUICE_TOKEN)")
    middleware = list(kwargs.pop("middleware", [])) + [_BearerFactory(token)]
    return fl.connect(location, middleware=middleware, **kwargs)


def descriptor(dataset, **options):
    """The descriptor of a dataset's batches with loader options (batch_size,
    shuffle, seed, epoch, world_size, columns, drop_last, index_column,
    state)."""
    return fl.FlightDescriptor.for_command(json.dumps(dict(options, dataset=dataset)))


def ticket(endpoint_ticket, state):
    """A ticket that continues endpoint_ticket's stream after the batch whose
    app metadata was state (bytes, str or dict)."""
    if isinstance(state, (bytes, bytearray)):
        state = state.decode()
    if isinstance(state, str):
        state = json.loads(state)
    return fl.Ticket(json.dumps(dict(json.loads(endpoint_ticket.ticket), state=state)))
