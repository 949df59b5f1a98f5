package engine

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

func testSchema(t *testing.T) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"tasks","columns":[
		{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"org_id","type":"string"},
		{"name":"title","type":"string","nullable":true}],
		"primaryKey":"id","scopes":["project:{project_id}","org:{org_id}"]},
		{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"user_id","type":"string"}],
		"primaryKey":"id","scopes":["user:{user_id}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEffectiveScopes(t *testing.T) {
	r := resolvedScopes{allowed: Allowed{"project_id": {"p1", "p2"}, "org_id": {Wildcard}, "user_id": {"u1"}}}
	cases := []struct {
		name      string
		requested map[string][]string
		want      map[string][]string
		ok        bool
	}{
		{"intersect", map[string][]string{"project_id": {"p2", "p3", "p2"}}, map[string][]string{"project_id": {"p2"}}, true},
		{"wildcard passes values", map[string][]string{"org_id": {"o9", "o1"}}, map[string][]string{"org_id": {"o9", "o1"}}, true},
		{"two dimensions", map[string][]string{"project_id": {"p1"}, "org_id": {"o1"}}, map[string][]string{"project_id": {"p1"}, "org_id": {"o1"}}, true},
		{"empty intersection revokes", map[string][]string{"project_id": {"p3"}}, nil, false},
		{"partial loss revokes", map[string][]string{"project_id": {"p1"}, "user_id": {"u2"}}, nil, false},
		{"empty request revokes", map[string][]string{}, nil, false},
	}
	for _, c := range cases {
		got, ok := r.effectiveScopes(c.requested)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	failed := resolvedScopes{err: errResolverFailed}
	if _, ok := failed.effectiveScopes(map[string][]string{"project_id": {"p1"}}); ok {
		t.Error("a failed resolver must revoke")
	}
	if _, ok := (resolvedScopes{allowed: Allowed{}}).effectiveScopes(map[string][]string{"project_id": {"p1"}}); ok {
		t.Error("an actor with no grant must be revoked")
	}
}

func TestAuthorizes(t *testing.T) {
	s := testSchema(t)
	tasks, _ := s.Table("tasks")
	r := resolvedScopes{allowed: Allowed{"project_id": {"p1"}, "org_id": {Wildcard}}}
	if !r.authorizes(tasks, map[string]string{"project_id": "p1", "org_id": "anything"}) {
		t.Error("allowed row refused")
	}
	if r.authorizes(tasks, map[string]string{"project_id": "p2", "org_id": "o"}) {
		t.Error("row outside the grant authorized")
	}
	if r.authorizes(tasks, map[string]string{"project_id": "p1"}) {
		t.Error("row missing a declared variable authorized")
	}
	if (resolvedScopes{allowed: Allowed{"project_id": {"p1"}}}).authorizes(tasks, map[string]string{"project_id": "p1", "org_id": "o"}) {
		t.Error("partial grant authorized: all declared variables are required")
	}
	if (resolvedScopes{err: errResolverFailed}).authorizes(tasks, map[string]string{"project_id": "p1", "org_id": "o"}) {
		t.Error("failed resolver authorized a write")
	}
}

func TestResolveValidatesKeys(t *testing.T) {
	s := testSchema(t)
	ctx := context.Background()
	r, err := resolve(ctx, StaticScopes{"project_id": {"p1"}}, s, "part", "actor")
	if err != nil || r.err != nil {
		t.Fatalf("resolve = %+v, %v", r, err)
	}
	_, err = resolve(ctx, StaticScopes{"nope": {"x"}}, s, "part", "actor")
	if ssp2.CodeOf(err) != ssp2.CodeInvalidSubscription {
		t.Fatalf("undeclared key: err = %v, want sync.invalid_subscription", err)
	}
	boom := ResolverFunc(func(context.Context, string, string) (Allowed, error) { return nil, errors.New("boom") })
	r, err = resolve(ctx, boom, s, "part", "actor")
	if err != nil || !errors.Is(r.err, errResolverFailed) {
		t.Fatalf("throwing resolver: %+v, %v; want a closed failure, not a request error", r, err)
	}
}

func TestValidateRequested(t *testing.T) {
	s := testSchema(t)
	tasks, _ := s.Table("tasks")
	if err := validateRequested(tasks, map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	if err := validateRequested(tasks, map[string][]string{"user_id": {"u1"}}); ssp2.CodeOf(err) != ssp2.CodeInvalidSubscription {
		t.Fatalf("other table's variable: %v", err)
	}
	if err := validateRequested(tasks, map[string][]string{"project_id": {"*"}}); ssp2.CodeOf(err) != ssp2.CodeInvalidSubscription {
		t.Fatalf("requested wildcard: %v", err)
	}
}
