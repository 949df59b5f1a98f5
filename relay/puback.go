package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishOne publishes m to the commit stream and returns the stream
// sequence the stream stored it at, or that it was a duplicate. It is
// jetstream's PublishMsg without its encoding/json decoding of every
// acknowledgement, which was a quarter of the relay's CPU per event: the
// common acknowledgement ({"stream":…,"seq":N}) is read by hand
// (parsePubAck), and anything else — an error, a duplicate, a shape it
// does not know — is decoded in full. It does not retry on no responders
// as PublishMsg does: the relay retries every failed run with backoff.
func (r *Relay) publishOne(ctx context.Context, m *nats.Msg) (seq uint64, duplicate bool, err error) {
	resp, err := r.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return 0, false, jetstream.ErrNoStreamResponse
		}
		return 0, false, err
	}
	if seq, ok := parsePubAck(resp.Data); ok {
		return seq, false, nil
	}
	var ack struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return ack.Seq, ack.Duplicate, nil
}

// parsePubAck reads the stream sequence of a plain acknowledgement in
// exactly the shape the server writes it: {"stream":"S","seq":N} or
// {"stream":"S","domain":"D","seq":N}, S not empty, S and D without
// quotes, backslashes or control characters, N decimal. ok is false for
// anything else (an error, a duplicate, another shape), which the caller
// then decodes in full.
func parsePubAck(b []byte) (seq uint64, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"stream":`))
	if !ok {
		return 0, false
	}
	var stream []byte
	if stream, rest, ok = plainString(rest); !ok || len(stream) == 0 {
		return 0, false
	}
	if r, found := bytes.CutPrefix(rest, []byte(`,"domain":`)); found {
		if _, rest, ok = plainString(r); !ok {
			return 0, false
		}
	}
	digits, ok := bytes.CutPrefix(rest, []byte(`,"seq":`))
	if !ok || len(digits) < 2 || digits[len(digits)-1] != '}' {
		return 0, false
	}
	digits = digits[:len(digits)-1]
	if len(digits) > 1 && digits[0] == '0' {
		return 0, false // not JSON
	}
	for _, c := range digits {
		if c < '0' || c > '9' || seq > (1<<64-1-9)/10 {
			return 0, false // not a number, or it may overflow: left to encoding/json
		}
		seq = seq*10 + uint64(c-'0')
	}
	return seq, true
}

// plainString reads a JSON string without escapes at the start of b and
// returns its contents and what follows it.
func plainString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		}
	}
	return nil, nil, false
}
