package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// ReactionRule plans a durable reaction (SPEC.md §6.9) for every
// operation of a commit on Table that matches On and every condition in
// When. It lives in the node's config file:
//
//	[[reactions.rules]]
//	name    = "task-done-mail"
//	table   = "tasks"
//	on      = "update"
//	type    = "email.send"
//	payload = { task = "new.id", title = "new.title", was = "old.title", by = "$actorId" }
//	[[reactions.rules.when]]
//	column  = "done"
//	equals  = true
//	changed = true
//
// The reaction's key within the commit is "<name>/<opIndex>", so the
// stored idempotency key is [partition, clientId, clientCommitId,
// "<name>/<opIndex>"]: stable across deliveries of one commit.
type ReactionRule struct {
	// Name identifies the rule: [a-z0-9_-], at most 64 bytes, unique.
	Name  string `json:"name" toml:"name"`
	Table string `json:"table" toml:"table"`
	// On is insert, update, upsert (insert or update), delete, or any.
	On   string              `json:"on" toml:"on"`
	When []ReactionCondition `json:"when,omitempty" toml:"when"`
	// Type is the reaction type, Version its payload version (default 1),
	// MaxAttempts its attempts (default 10).
	Type        string `json:"type" toml:"type"`
	Version     int32  `json:"version,omitempty" toml:"version"`
	MaxAttempts int    `json:"maxAttempts,omitempty" toml:"max_attempts"`
	// Payload maps each payload field to its source: "new.<column>" (the
	// row that persists), "old.<column>" (the stored row before the
	// operation) — null when that row does not exist — or one of $table,
	// $rowId, $op (insert, update or delete), $actorId, $partition,
	// $clientId, $clientCommitId. Values are rendered like commit events:
	// numbers, strings, booleans, bytes as base64, json columns embedded.
	Payload map[string]string `json:"payload,omitempty" toml:"payload"`
}

// ReactionCondition is one condition of a rule; a rule's conditions must
// all hold.
type ReactionCondition struct {
	Column string `json:"column" toml:"column"`
	// Row is "new" (default) or "old": which row Equals compares.
	Row string `json:"row,omitempty" toml:"row"`
	// Equals, when set, must equal the column's value: a string, number,
	// boolean, or {"$bytes": "<hex>"}.
	Equals any `json:"equals,omitempty" toml:"equals"`
	// Changed requires the column's value to differ between the old and
	// the new row (an insert always changes it, a delete never does).
	Changed bool `json:"changed,omitempty" toml:"changed"`
}

// Operation kinds a rule can react to.
const (
	OnInsert = "insert"
	OnUpdate = "update"
	OnUpsert = "upsert"
	OnDelete = "delete"
	OnAny    = "any"
)

// Payload sources other than columns.
var metaSources = map[string]func(c *ruleInput) any{
	"$table":          func(c *ruleInput) any { return c.op.Table },
	"$rowId":          func(c *ruleInput) any { return c.op.RowID },
	"$op":             func(c *ruleInput) any { return c.kind },
	"$actorId":        func(c *ruleInput) any { return c.v.ActorID },
	"$partition":      func(c *ruleInput) any { return c.v.Partition },
	"$clientId":       func(c *ruleInput) any { return c.v.ClientID },
	"$clientCommitId": func(c *ruleInput) any { return c.v.ClientCommitID },
}

type ruleInput struct {
	v    *engine.CommitValidation
	op   *engine.OperationEvidence
	kind string // insert, update or delete
}

type compiledCondition struct {
	column  string
	old     bool
	equals  *value
	changed bool
}

type payloadField struct {
	name   string
	column string // "" for a meta source
	old    bool
	meta   func(c *ruleInput) any
}

type compiledRule struct {
	name        string
	table       string
	on          string
	when        []compiledCondition
	typ         string
	version     int32
	maxAttempts int
	payload     []payloadField
}

// CompileReactions compiles rules against s into one planner (nil when
// there are no rules). It refuses, naming the rule, unknown tables and
// columns, unknown operation kinds and payload sources, sources that can
// never be set (new.* of a delete rule, old.* of an insert rule), values
// a column can never hold, invalid or duplicate names, invalid types and
// out-of-range versions or attempts.
func CompileReactions(s *schema.Schema, rules []ReactionRule) (engine.ReactionPlanner, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	compiled := make([]compiledRule, len(rules))
	names := map[string]bool{}
	for i, r := range rules {
		c, err := compileReaction(s, r)
		if err != nil {
			return nil, fmt.Errorf("reaction rule %d (%q): %w", i, r.Name, err)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("reaction rule %d: name %q is used twice", i, r.Name)
		}
		names[r.Name] = true
		compiled[i] = c
	}
	return func(_ context.Context, v engine.CommitValidation) ([]engine.PlannedReaction, error) {
		var out []engine.PlannedReaction
		for i := range v.Operations {
			op := &v.Operations[i]
			in := ruleInput{v: &v, op: op, kind: opKind(op)}
			if in.kind == "" {
				continue
			}
			for j := range compiled {
				if p, ok := compiled[j].plan(&in); ok {
					out = append(out, p)
				}
			}
		}
		return out, nil
	}, nil
}

// opKind is insert, update or delete; "" for the delete of an absent row
// (it changes nothing).
func opKind(op *engine.OperationEvidence) string {
	switch {
	case op.Op == ssp2.OpDelete && op.Stored != nil:
		return OnDelete
	case op.Op == ssp2.OpUpsert && op.Stored == nil:
		return OnInsert
	case op.Op == ssp2.OpUpsert:
		return OnUpdate
	}
	return ""
}

func (r *compiledRule) plan(in *ruleInput) (engine.PlannedReaction, bool) {
	if in.op.Table != r.table {
		return engine.PlannedReaction{}, false
	}
	switch r.on {
	case OnAny:
	case OnUpsert:
		if in.kind == OnDelete {
			return engine.PlannedReaction{}, false
		}
	default:
		if in.kind != r.on {
			return engine.PlannedReaction{}, false
		}
	}
	for _, c := range r.when {
		if !c.holds(in.op) {
			return engine.PlannedReaction{}, false
		}
	}
	payload := make(map[string]any, len(r.payload))
	for _, f := range r.payload {
		switch {
		case f.meta != nil:
			payload[f.name] = f.meta(in)
		case f.old:
			payload[f.name] = in.op.Stored[f.column] // nil map reads nil
		default:
			payload[f.name] = in.op.Row[f.column]
		}
	}
	return engine.PlannedReaction{
		Key: r.name + "/" + strconv.Itoa(in.op.OpIndex), Type: r.typ, Version: r.version,
		MaxAttempts: r.maxAttempts, Payload: payload,
	}, true
}

func (c *compiledCondition) holds(op *engine.OperationEvidence) bool {
	if c.changed {
		switch {
		case op.Row == nil: // a delete changes nothing
			return false
		case op.Stored != nil && sameValue(op.Row[c.column], op.Stored[c.column]):
			return false
		}
	}
	if c.equals == nil {
		return true
	}
	row := op.Row
	if c.old {
		row = op.Stored
	}
	x, ok := row[c.column]
	return ok && c.equals.matches(x)
}

func compileReaction(s *schema.Schema, r ReactionRule) (compiledRule, error) {
	if !validRuleName(r.Name) {
		return compiledRule{}, errors.New("name must be 1..64 bytes of [a-z0-9_-]")
	}
	t, err := lookupTable(s, r.Table)
	if err != nil {
		return compiledRule{}, err
	}
	switch r.On {
	case OnInsert, OnUpdate, OnUpsert, OnDelete, OnAny:
	case "":
		return compiledRule{}, errors.New("on is required (insert, update, upsert, delete or any)")
	default:
		return compiledRule{}, fmt.Errorf("on %q is not insert, update, upsert, delete or any", r.On)
	}
	if err := storage.CheckReactionType(r.Type); err != nil {
		return compiledRule{}, err
	}
	c := compiledRule{name: r.Name, table: t.Name, on: r.On, typ: r.Type, version: r.Version, maxAttempts: r.MaxAttempts}
	if c.version == 0 {
		c.version = 1
	}
	if c.version < 1 {
		return compiledRule{}, fmt.Errorf("version %d is not positive", r.Version)
	}
	if c.maxAttempts < 0 || c.maxAttempts > storage.MaxReactionAttempts {
		return compiledRule{}, fmt.Errorf("max_attempts %d is outside 1..%d", r.MaxAttempts, storage.MaxReactionAttempts)
	}
	hasNew, hasOld := r.On != OnDelete, r.On != OnInsert
	for i, w := range r.When {
		col, err := column(t, w.Column, fmt.Sprintf("when[%d].column", i))
		if err != nil {
			return compiledRule{}, err
		}
		cc := compiledCondition{column: col.Name, changed: w.Changed}
		switch w.Row {
		case "", "new":
			if !hasNew {
				return compiledRule{}, fmt.Errorf("when[%d]: a delete has no new row", i)
			}
		case "old":
			if !hasOld {
				return compiledRule{}, fmt.Errorf("when[%d]: an insert has no old row", i)
			}
			cc.old = true
		default:
			return compiledRule{}, fmt.Errorf("when[%d].row %q is neither new nor old", i, w.Row)
		}
		if w.Equals != nil {
			raw, err := json.Marshal(w.Equals)
			if err != nil {
				return compiledRule{}, fmt.Errorf("when[%d].equals: %w", i, err)
			}
			v, err := parseValue(raw, col.Type)
			if err != nil {
				return compiledRule{}, fmt.Errorf("when[%d].equals: %w", i, err)
			}
			cc.equals = &v
		} else if !w.Changed {
			return compiledRule{}, fmt.Errorf("when[%d]: set equals, changed or both", i)
		}
		c.when = append(c.when, cc)
	}
	for name, src := range r.Payload {
		if name == "" {
			return compiledRule{}, errors.New("payload: empty field name")
		}
		f := payloadField{name: name}
		switch {
		case strings.HasPrefix(src, "$"):
			if f.meta = metaSources[src]; f.meta == nil {
				return compiledRule{}, fmt.Errorf("payload.%s: unknown source %q", name, src)
			}
		case strings.HasPrefix(src, "new."), strings.HasPrefix(src, "old."):
			f.old = src[:4] == "old."
			if f.old && !hasOld || !f.old && !hasNew {
				return compiledRule{}, fmt.Errorf("payload.%s: %q is never set for a rule on %s", name, src, r.On)
			}
			col, err := column(t, src[4:], "payload."+name)
			if err != nil {
				return compiledRule{}, err
			}
			f.column = col.Name
		default:
			return compiledRule{}, fmt.Errorf("payload.%s: source %q is not new.<column>, old.<column> or a $ source", name, src)
		}
		c.payload = append(c.payload, f)
	}
	return c, nil
}

func validRuleName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
