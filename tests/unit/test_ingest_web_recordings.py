"""The recordings API's pure parts: byte ranges against a slice of the file, signed addresses (any
change to the path, its query, `exp` or `sig` refuses it), the page cursor's exact round trip,
and the query's parameters. The server in front of a real recorder: tests/integration/test_web_recordings.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.web.access import SIGNED_S, Token
from ingest.web.answers import Refusal, byte_range
from ingest.web.recordings import EVENTS, _cursor, cursor, parameters, route

TOKEN = Token("k" * 24, made=True)
NOW = 1796112191.0


@given(st.integers(0, 10_000), st.integers(0, 12_000), st.integers(0, 12_000) | st.none())
def test_a_range_names_the_bytes_a_slice_would_or_is_refused_past_the_end(size, first, last):
    data = bytes(i % 251 for i in range(size))
    span = byte_range(f"bytes={first}-{'' if last is None else last}", size)
    if last is not None and last < first:
        assert span is None  # invalid: the whole file
    elif first >= size:
        assert isinstance(span, Refusal) and span.status == 416
    else:
        assert isinstance(span, tuple)
        a, b = span
        stop = size if last is None else last + 1
        assert data[a:b + 1] == data[first:stop] and 0 <= a <= b < size


@given(st.integers(0, 10_000), st.integers(1, 12_000))
def test_a_suffix_range_is_the_files_last_bytes(size, suffix):
    span = byte_range(f"bytes=-{suffix}", size)
    if size == 0:
        assert isinstance(span, Refusal)
    else:
        assert span == (max(0, size - suffix), size - 1)


def test_what_is_no_single_byte_range_means_the_whole_file():
    for header in (None, "", "bytes=0-1,4-5", "items=0-1", "bytes=-", "bytes=a-b", "bytes=-0x"):
        assert byte_range(header, 100) is None, header
    assert isinstance(byte_range("bytes=-0", 100), Refusal)


PATHS = st.sampled_from(["/api/events/1a2b3c4d:gate-1:7/clip", "/api/events/1a2b3c4d:gate-1:7/snapshot",
                         "/api/cameras/gate-1/export"])


@given(PATHS, st.dictionaries(st.sampled_from(["since", "until"]), st.floats(0, 2e9).map(repr)))
def test_a_signed_address_holds_until_it_expires_and_any_change_refuses_it(path, params):
    signed = TOKEN.sign(path, params, NOW)
    at, query = signed.split("?")
    assert at == path and TOKEN.value not in signed
    assert TOKEN.refuses(path, query, NOW) is None
    assert TOKEN.refuses(path, query, NOW + SIGNED_S) is None
    assert "expired" in (TOKEN.refuses(path, query, NOW + SIGNED_S + 1) or "")
    assert TOKEN.refuses(path + "x", query, NOW) is not None
    assert Token("j" * 24, made=True).refuses(path, query, NOW) is not None  # another token's
    assert TOKEN.refuses(path, query + "&since=1", NOW) is not None
    assert TOKEN.refuses(path, query.replace("exp=", "exp=1"), NOW) is not None


@given(st.floats(0, 4e9), st.from_regex(r"[0-9a-f]{8}:[A-Za-z0-9_.-]{1,63}:[0-9]{1,9}", fullmatch=True))
def test_a_cursor_gives_back_exactly_the_time_and_id_it_was_made_of(at, event_id):
    assert _cursor("before", cursor({"at": at, "id": event_id})) == (at, event_id)


def test_routes_and_parameters():
    assert route("/api/events").what == "events"
    assert route("/api/events/a:b:1").what == "event" and route("/api/events/a:b:1/clip").media
    assert route("/api/cameras/gate-1/export").media and not route("/api/cameras/gate-1/recordings").media
    for path in ("/api/events/../../etc/passwd/clip", "/api/events/a/b/clip", "/api/cameras/a/b/export", "/api/x"):
        assert route(path) is None, path
    assert parameters({"camera": ["gate-1"], "exp": ["1"], "sig": ["x"]}, EVENTS) == {"camera": "gate-1"}
    assert parameters({"since": ["2026-12-01T08:00:00Z"]}, EVENTS) == {"since": 1796112000.0}
