package engine

import (
	"context"
	"slices"
	"strings"

	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The realtime rules the engine shares with pull (SPEC.md §8.1–§8.2): who
// may attach a realtime socket, what the socket is registered on, and the
// delta one commit becomes. Package realtime owns sockets, sessions and
// the bus; these functions read SQL and encode, nothing more.

// Registration is one entry of a client record's subscription list with
// the effective scopes it resolved to: what a realtime connection receives
// deltas for (SPEC.md §8.1).
type Registration struct {
	ID    string
	Table string
	// Effective maps each requested scope variable to the values the
	// actor holds, as a pull computes them.
	Effective map[string][]string
}

// Matches reports whether ch belongs in this registration's section: the
// change is to its table and its stored value of every effective variable
// is one of that variable's values — the rule a pull window applies.
func (r *Registration) Matches(ch *storage.Change) bool {
	if ch.Table != r.Table {
		return false
	}
	for k, vals := range r.Effective {
		v, ok := ch.Scopes[k]
		if !ok || !slices.Contains(vals, v) {
			return false
		}
	}
	return true
}

// Attachment is what a realtime connect (or the end of a socket round)
// reads: the partition as touched, the client record if there is one, and
// the registrations it resolves to.
type Attachment struct {
	Partition     storage.Partition
	Client        storage.Client
	HasClient     bool
	Registrations []Registration
}

// Attach checks that id may hold a realtime connection as clientID and
// loads what the connection registers on (SPEC.md §8.1): the subscription
// list of the client's last successful pull, each resolved against the
// actor's scopes now. It refuses, as an *ssp2.Error, an identity or client
// id the stores cannot hold and an empty client id (sync.invalid_request,
// sync.invalid_client_id), the reserved server-command prefix and a client
// id bound to another actor (sync.invalid_client_id). A connect binds
// nothing: a socket's rounds bind through Sync like any request, and its
// acks apply only to a record of its actor. A resolver that
// fails, or returns what no table declares, registers nothing: the
// connection still opens, and receives no deltas until a round registers
// it again.
func (e *Engine) Attach(ctx context.Context, id Identity, clientID string) (Attachment, error) {
	if err := checkIdentity(id); err != nil {
		return Attachment{}, err
	}
	if clientID == "" {
		return Attachment{}, ssp2.Errorf(ssp2.CodeInvalidRequest, "the clientId query parameter is required")
	}
	if strings.HasPrefix(clientID, reservedClientIDPrefix) {
		return Attachment{}, ssp2.Errorf(ssp2.CodeInvalidClientID, "client ids starting with %s are reserved for server commands", reservedClientIDPrefix)
	}
	if err := ids.Check("the client id", clientID); err != nil {
		return Attachment{}, ssp2.Errorf(ssp2.CodeInvalidClientID, "%v", err)
	}
	if err := e.guardRemote(ctx, id.Partition, false); err != nil {
		return Attachment{}, err
	}
	// One statement reads the partition and the client record, as a
	// round's prepare does: a reconnect storm attaches twice per socket.
	part, client, hasClient, err := e.cfg.Store.PartitionTouchClient(ctx, id.Partition, clientID, e.nowMs())
	if err != nil {
		return Attachment{}, internal("touch partition", err)
	}
	a := Attachment{Partition: part, Client: client, HasClient: hasClient}
	if a.HasClient && a.Client.ActorID != id.ActorID {
		return Attachment{}, ssp2.Errorf(ssp2.CodeInvalidClientID, "client id is bound to another actor")
	}
	if !a.HasClient || len(a.Client.Subscriptions) == 0 {
		return a, nil
	}
	// A socket round re-attaches at its end: the list is the one the
	// round's pull just decoded, from the memo.
	rec := e.subs.get(a.Client.Subscriptions)
	if rec == nil {
		e.log.Warn("unreadable client subscriptions; registering none", "partition", id.Partition, "client", clientID)
		return a, nil
	}
	subs := rec.list
	if len(subs) == 0 {
		return a, nil
	}
	rs, err := resolve(ctx, id.Scopes, e.cfg.Schema, id.Partition, id.ActorID)
	if err != nil {
		if ctx.Err() != nil {
			return Attachment{}, internal("resolve scopes", err)
		}
		rs = resolvedScopes{err: err}
	}
	if rs, _, err = e.withLease(ctx, rs, id, clientID); err != nil {
		// No valid lease during an outage: like a failed resolver, the
		// connection registers nothing; its rounds get the lease code.
		e.log.Warn("scope resolver outage without a valid lease; the realtime connection registers nothing", "partition", id.Partition, "actor", id.ActorID, "err", err)
		return a, nil
	}
	if rs.err != nil {
		e.log.Warn("scope resolution failed; the realtime connection registers nothing", "partition", id.Partition, "actor", id.ActorID, "err", rs.err)
		return a, nil
	}
	for _, s := range subs {
		t, ok := e.cfg.Schema.Table(s.Table)
		if !ok || validateRequested(t, s.Scopes) != nil {
			continue // the schema moved on since the pull; the next round repairs it
		}
		if eff, ok := rs.effectiveScopes(s.Scopes); ok {
			a.Registrations = append(a.Registrations, Registration{ID: s.ID, Table: s.Table, Effective: eff})
		}
	}
	return a, nil
}

// AppendDelta appends to dst the delta commit c becomes for a connection
// registered on regs, encoded in wireVersion (SPEC.md §8.2): one complete
// SSP2 response with RESP_HEADER (logEpoch from v2 on, no reset), then for
// each registration with matching changes, in order, SUB_START (active,
// no bootstrap), one COMMIT with only those changes and SUB_END at the
// commit's seq. It reports false, leaving dst as it was, when no change
// matches any registration.
func AppendDelta(dst []byte, wireVersion uint16, logEpoch string, regs []Registration, c *storage.Commit) ([]byte, bool, error) {
	w := &appendWriter{b: dst}
	enc := ssp2.NewResponseEncoder(w, wireVersion)
	matched := false
	for i := range regs {
		r := &regs[i]
		var changes []ssp2.Change
		for j := range c.Changes {
			if ch := &c.Changes[j]; r.Matches(ch) {
				changes = append(changes, wireChange(ch))
			}
		}
		if len(changes) == 0 {
			continue
		}
		if !matched {
			h := &ssp2.RespHeader{}
			if wireVersion >= 2 {
				h.LogEpoch = logEpoch
			}
			if err := enc.WriteFrame(h); err != nil {
				return dst, false, err
			}
			matched = true
		}
		frames := []ssp2.Frame{
			&ssp2.SubStart{ID: r.ID, Status: ssp2.SubActive, EffectiveScopes: r.Effective},
			&ssp2.Commit{CommitSeq: c.CommitSeq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Tables: []string{r.Table}, Changes: changes},
			&ssp2.SubEnd{NextCursor: c.CommitSeq},
		}
		for _, f := range frames {
			if err := enc.WriteFrame(f); err != nil {
				return dst, false, err
			}
		}
	}
	if !matched {
		return dst, false, nil
	}
	if err := enc.End(); err != nil {
		return dst, false, err
	}
	return w.b, true, nil
}

// wireChange is a stored change as a COMMIT frame carries it.
func wireChange(ch *storage.Change) ssp2.Change {
	out := ssp2.Change{RowID: ch.RowID, Op: ssp2.Op(ch.Op), Scopes: ch.Scopes}
	if ch.Op == storage.OpUpsert {
		v := ch.RowVersion
		out.RowVersion, out.Row = &v, ch.Row
	}
	return out
}

// appendWriter collects an encoder's writes into one slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}
