package storagetest

import (
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

var leaseTests = []test{
	{"PutGetReplaceDelete", testLeasePutGet},
}

func testLeasePutGet(t *testing.T, e *env) {
	s, _ := e.store()
	ctx := t.Context()
	p := partition(t, s)
	if _, ok, err := s.LeaseGet(ctx, p.ID, "c1"); err != nil || ok {
		t.Fatalf("LeaseGet on empty = %v, %v", ok, err)
	}
	l := storage.Lease{Partition: p.ID, ClientID: "c1", LeaseID: "L1", ActorID: "alice",
		Allowed: []byte(`{"project":["p1"]}`), IssuedAtMs: 10, ExpiresAtMs: 20, Signature: []byte{0, 1, 0xff}}
	if err := s.LeasePut(ctx, l); err != nil {
		t.Fatal(err)
	}
	for _, get := range []func() (storage.Lease, bool, error){
		func() (storage.Lease, bool, error) { return s.LeaseGet(ctx, p.ID, "c1") },
		func() (storage.Lease, bool, error) { return s.LeaseByID(ctx, p.ID, "L1") },
	} {
		got, ok, err := get()
		if err != nil || !ok || !reflect.DeepEqual(got, l) {
			t.Fatalf("read back %+v, %v, %v; want %+v", got, ok, err, l)
		}
	}
	// Another partition holds none of it.
	q := partition(t, s)
	if _, ok, err := s.LeaseByID(ctx, q.ID, "L1"); err != nil || ok {
		t.Fatalf("LeaseByID in another partition = %v, %v", ok, err)
	}
	l.ExpiresAtMs, l.Revoked, l.Allowed = 30, true, []byte(`{}`)
	if err := s.LeasePut(ctx, l); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.LeaseGet(ctx, p.ID, "c1"); !reflect.DeepEqual(got, l) {
		t.Fatalf("replaced lease %+v, want %+v", got, l)
	}
	if ok, err := s.LeaseDelete(ctx, p.ID, "L1"); err != nil || !ok {
		t.Fatalf("LeaseDelete = %v, %v", ok, err)
	}
	if ok, err := s.LeaseDelete(ctx, p.ID, "L1"); err != nil || ok {
		t.Fatalf("second LeaseDelete = %v, %v", ok, err)
	}
	if _, ok, _ := s.LeaseGet(ctx, p.ID, "c1"); ok {
		t.Fatal("deleted lease still read")
	}
}
