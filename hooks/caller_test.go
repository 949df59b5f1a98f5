package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/engine"
)

// TestReplies sends real requests to a responder that answers each
// subject with a fixed reply, and checks how every kind of answer is
// classified and counted.
func TestReplies(t *testing.T) {
	srv := embeddedtest.Start(t, embeddedtest.WithDontListen())
	nc := srv.Conn()
	replies := map[string]*nats.Msg{
		"ok":        {Data: []byte(`{"accept":true}`)},
		"reject":    {Data: []byte(`{"reject":{"opIndex":0,"code":"host.no","message":"no"}}`)},
		"both":      {Data: []byte(`{"accept":true,"reject":{"code":"host.no"}}`)},
		"neither":   {Data: []byte(`{}`)},
		"reserved":  {Data: []byte(`{"reject":{"code":"sync.forbidden"}}`)},
		"garbage":   {Data: []byte(`not json`)},
		"errorbody": {Data: []byte(`{"error":{"code":"busy","message":"try later"}}`)},
		"header":    {Header: nats.Header{"Nats-Service-Error-Code": {"503"}, "Nats-Service-Error": {"down"}}},
	}
	for subject, msg := range replies {
		if _, err := nc.Subscribe("t."+subject, func(m *nats.Msg) { _ = m.RespondMsg(&nats.Msg{Data: msg.Data, Header: msg.Header}) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Subscribe("t.hang", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := caller{nc: nc, hook: "validate", timeout: 50 * time.Millisecond, m: m}
	for _, tc := range []struct {
		subject string
		want    error // nil: accepted; *Error: an error reply
		reason  string
	}{
		{"ok", nil, ""},
		{"reject", nil, ""},
		{"both", ErrInvalidReply, ReasonInvalidReply},
		{"neither", ErrInvalidReply, ReasonInvalidReply},
		{"reserved", ErrInvalidReply, ReasonInvalidReply},
		{"garbage", ErrInvalidReply, ReasonInvalidReply},
		{"errorbody", &Error{Hook: "validate", Code: "busy", Message: "try later"}, ReasonErrorReply},
		{"header", &Error{Hook: "validate", Code: "503", Message: "down"}, ReasonErrorReply},
		{"hang", ErrTimeout, ReasonTimeout},
		{"nobody", ErrNoResponders, ReasonNoResponders},
	} {
		var r ValidateReply
		before := counter(t, m.errors.WithLabelValues("validate", tc.reason))
		err := c.call(context.Background(), "t."+tc.subject, map[string]string{"x": "y"}, &r)
		var he *Error
		switch want := tc.want.(type) {
		case nil:
			if err != nil {
				t.Errorf("%s: %v", tc.subject, err)
			}
		case *Error:
			if !errors.As(err, &he) || *he != *want {
				t.Errorf("%s: err = %v, want %+v", tc.subject, err, want)
			}
		default:
			if !errors.Is(err, want) {
				t.Errorf("%s: err = %v, want %v", tc.subject, err, want)
			}
		}
		if tc.reason != "" {
			if got := counter(t, m.errors.WithLabelValues("validate", tc.reason)) - before; got != 1 {
				t.Errorf("%s: %s errors +%v, want +1", tc.subject, tc.reason, got)
			}
		}
	}
	if got := counter(t, m.requests.WithLabelValues("validate")); got != 10 {
		t.Errorf("requests = %v, want 10", got)
	}
}

// TestValidatorRejection: a hook's rejection becomes the engine's, with
// its operation, code and details.
func TestValidatorRejection(t *testing.T) {
	srv := embeddedtest.Start(t, embeddedtest.WithDontListen())
	nc := srv.Conn()
	var got ValidateRequest
	if _, err := nc.Subscribe("syncnode.hook.validate.acme", func(m *nats.Msg) {
		_ = json.Unmarshal(m.Data, &got)
		_ = m.Respond([]byte(`{"reject":{"opIndex":1,"code":"host.bad","message":"bad","details":{"fieldPaths":["title"]}}}`))
	}); err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(ValidateConfig{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(2)
	err = v.Validate(context.Background(), engine.CommitValidation{Partition: "acme", ActorID: "a", ClientID: "c", ClientCommitID: "cc",
		Operations: []engine.OperationEvidence{
			{OpIndex: 0, Op: 2, Table: "todos", RowID: "r0", Stored: engine.Row{"id": "r0"}},
			{OpIndex: 1, Op: 1, Table: "todos", RowID: "r1", Row: engine.Row{"id": "r1", "blob": []byte("hi"), "score": mathNaN()}, NextServerVersion: &next},
		}})
	var rj *engine.Rejection
	if !errors.As(err, &rj) || rj.OpIndex != 1 || rj.Code != "host.bad" || rj.Details == nil || rj.Details.FieldPaths[0] != "title" {
		t.Fatalf("rejection = %+v (%v)", rj, err)
	}
	if len(got.Operations) != 2 || got.Operations[0].Op != "delete" || got.Operations[0].Row != nil || got.Operations[1].Op != "upsert" ||
		got.Operations[1].Row["blob"] != "aGk=" || got.Operations[1].Row["score"] != nil || *got.Operations[1].NextServerVersion != 2 {
		t.Fatalf("request = %+v", got)
	}
}

// FuzzReplies: any bytes a hook answers decode into an answer or an
// error, never a panic, and an accepted answer is well-formed.
func FuzzReplies(f *testing.F) {
	for _, s := range []string{`{"accept":true}`, `{"reject":{"code":"x"}}`, `{"scopes":{"a":["*"]}}`, `{"actorId":"a","partition":"p"}`, `{"error":{}}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range []reply{&ValidateReply{}, &ScopesReply{}, &TokenReply{}} {
			if json.Unmarshal(b, r) != nil || r.replyError() != nil || r.check() != nil {
				continue
			}
			switch r := r.(type) {
			case *ValidateReply:
				if r.Accept == (r.Reject != nil) {
					t.Fatalf("accepted %s as %+v", b, r)
				}
			case *ScopesReply:
				if r.Scopes == nil {
					t.Fatalf("accepted %s without scopes", b)
				}
			case *TokenReply:
				if r.ActorID == "" || r.Partition == "" {
					t.Fatalf("accepted %s as %+v", b, r)
				}
			}
		}
	})
}

func mathNaN() float64 { return math.NaN() }

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
