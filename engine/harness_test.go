package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// taskSchema is the schema most engine tests run against.
const taskSchema = `{"version":1,"tables":[{"name":"tasks","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true},
	{"name":"n","type":"integer","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// harness is an engine over a real SQLite store in a temp dir, with a
// controllable clock.
type harness struct {
	t       testing.TB
	e       *Engine
	store   storage.Store
	schema  *schema.Schema
	now     int64
	commits int
}

func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessOn(t, openSQLite(t), taskSchema, mod)
}

// openSQLite opens a store on a SQLite file of the test.
func openSQLite(t testing.TB) storage.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newHarnessOn is an engine over st serving the schema IR doc.
func newHarnessOn(t testing.TB, st storage.Store, doc string, mod func(*Config)) *harness {
	t.Helper()
	s, err := schema.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: st, schema: s, now: 1_700_000_000_000}
	cfg := Config{Schema: s, Store: st, Clock: clock.NewManual(time.UnixMilli(h.now)), OnCommit: func(string) { h.commits++ }}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	return h
}

// id is an identity in partition "p" holding the given project grant.
func id(actor string, projects ...string) Identity {
	return Identity{Partition: "p", ActorID: actor, Scopes: StaticScopes{"project_id": projects}}
}

// epoch acquires the partition's log epoch with a v2 request.
func (h *harness) epoch(who Identity) string {
	h.t.Helper()
	m := h.sync(who, 2, &ssp2.ReqHeader{ClientID: "epoch-probe", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	rh := m.Frames[0].(*ssp2.RespHeader)
	if !rh.ResetRequired || rh.LogEpoch == "" {
		h.t.Fatalf("epoch acquisition answered %+v", rh)
	}
	return rh.LogEpoch
}

// sync sends one request and decodes the response; a request-level error
// fails the test.
func (h *harness) sync(who Identity, wire uint16, frames ...ssp2.Frame) *ssp2.Message {
	h.t.Helper()
	m, err := h.try(who, wire, frames...)
	if err != nil {
		h.t.Fatalf("sync: %v", err)
	}
	return m
}

// try sends one request; it returns the request-level error, if any.
func (h *harness) try(who Identity, wire uint16, frames ...ssp2.Frame) (*ssp2.Message, error) {
	h.t.Helper()
	body, err := (&ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		h.t.Fatalf("encode request: %v", err)
	}
	return h.raw(who, body)
}

func (h *harness) raw(who Identity, body []byte) (*ssp2.Message, error) {
	h.t.Helper()
	var out bytes.Buffer
	if err := h.e.Sync(context.Background(), who, body, &out); err != nil {
		if out.Len() != 0 {
			h.t.Fatalf("Sync returned %v after writing %d bytes", err, out.Len())
		}
		return nil, err
	}
	m, err := ssp2.DecodeMessage(out.Bytes())
	if err != nil {
		h.t.Fatalf("response does not decode: %v", err)
	}
	return m, nil
}

// row encodes a tasks row; title "" means NULL.
func (h *harness) row(rowID, project, title string) []byte {
	h.t.Helper()
	t, _ := h.schema.Table("tasks")
	vals := []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte(project)}, {Null: title == ""}, {Null: true}}
	if title != "" {
		vals[2].Bytes = []byte(title)
	}
	b, err := t.Codec.AppendRow(nil, vals)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func (h *harness) decodeRow(b []byte) []ssp2.Value {
	h.t.Helper()
	t, _ := h.schema.Table("tasks")
	v, err := t.Codec.DecodeRow(b, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func upsert(rowID string, payload []byte, base ...int64) ssp2.Operation {
	op := ssp2.Operation{Table: "tasks", RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}
	if len(base) > 0 {
		op.BaseVersion = &base[0]
	}
	return op
}

func del(rowID string) ssp2.Operation {
	return ssp2.Operation{Table: "tasks", RowID: rowID, Op: ssp2.OpDelete}
}

func commit(ccid string, ops ...ssp2.Operation) *ssp2.PushCommit {
	return &ssp2.PushCommit{ClientCommitID: ccid, Operations: ops}
}

func hdr(client string, epoch string) *ssp2.ReqHeader {
	e := epoch
	return &ssp2.ReqHeader{ClientID: client, SchemaVersion: 1, LogEpoch: &e}
}

func sub(subID string, cursor int64, projects ...string) *ssp2.Subscription {
	return &ssp2.Subscription{ID: subID, Table: "tasks", Scopes: map[string][]string{"project_id": projects}, Cursor: cursor}
}

// frames returns the response frames of one type.
func frames[T ssp2.Frame](m *ssp2.Message) []T {
	var out []T
	for _, f := range m.Frames {
		if v, ok := f.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func wantCode(t *testing.T, err error, code ssp2.Code) {
	t.Helper()
	if got := ssp2.CodeOf(err); got != code {
		t.Fatalf("error = %v (code %q), want %q", err, got, code)
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
